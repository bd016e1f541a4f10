// Double-precision reference for the token embedding and softmax
// cross-entropy, unsharded and over the real vocabulary only (no padding), with
// plain loops. Like reference.h it includes no colrow header and shares no code
// with src/.
#pragma once

#include <cstdint>
#include <vector>

namespace colrow::reference {

using Matrix = std::vector<double>;  // row-major

// table: [rows, d], ids: [tokens] -> y[t] = table[ids[t]]: [tokens, d]
Matrix embedding_forward(const Matrix& table, const std::vector<int32_t>& ids, int64_t d);
// dtable[ids[t]] += dy[t]: [rows, d] (dy: [tokens, d])
Matrix embedding_backward(const std::vector<int32_t>& ids, const Matrix& dy, int64_t rows,
                          int64_t d);

struct CrossEntropyResult {
  std::vector<double> losses;  // [tokens]; 0 where the target is ignore_index
  double mean = 0.0;           // over the counted tokens; NaN when there are none
  int64_t counted = 0;
  Matrix dlogits;  // [tokens, classes]: d losses[t] / d logits[t, j]; 0 on ignored rows
  // Error magnitudes for an fp32 implementation that shifts by the row max
  // (z_j = x_j - max), sums exp(z_j) and z_j in high precision within each of
  // `parts` blocks of classes and adds the parts' fp32 sums: |got - exact| <= c u M.
  // With sigma = parts + 2 + sum_j p_j |z_j| (the relative error of the
  // denominator in units of u: an exp within 1.5 u, the error u |z_j| of each
  // rounded z_j, one rounding per part and per addition of parts):
  //   loss_mag[t]       = sigma + |z_target| + (parts + 1) a mean_j |z_j| + |loss|
  //   dlogits_mag[t, j] = p_j (4 + |z_j| + sigma) + |p_j - a/classes|
  //                       + 2 |dlogits[t, j]| + [j == target] + 2^-100
  // (0 on ignored rows; 2^-100 u > e^-87 covers an exp that flushes e^z below
  // e^-87 to zero): the exp, 1/S and the product in p, then the
  // subtraction, the scale and the target's term, one rounding each; the c the
  // tests use (2) leaves room for the O(u^2) terms.
  std::vector<double> loss_mag;
  Matrix dlogits_mag;
};

// PyTorch's F.cross_entropy(logits, targets, ignore_index, label_smoothing,
// reduction='none') from its definition, with a = label_smoothing:
//   loss_t = -(1 - a) log p[t, target] - a / classes * sum_j log p[t, j]
//   dlogits[t, j] = p[t, j] - (1 - a) [j == target] - a / classes
// logits: [tokens, classes]; parts only sizes the error magnitudes.
CrossEntropyResult cross_entropy(const Matrix& logits, const std::vector<int32_t>& targets,
                                 int64_t tokens, int64_t classes, double label_smoothing,
                                 int32_t ignore_index, int parts = 1);

}  // namespace colrow::reference
