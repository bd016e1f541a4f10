// Embedding lookup and softmax cross-entropy in double, from their definitions.
#include "support/vocab_reference.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace colrow::reference {

Matrix embedding_forward(const Matrix& table, const std::vector<int32_t>& ids, int64_t d) {
  Matrix y;
  y.reserve(ids.size() * d);
  for (int32_t id : ids) {
    for (int64_t j = 0; j < d; ++j) y.push_back(table[id * d + j]);
  }
  return y;
}

Matrix embedding_backward(const std::vector<int32_t>& ids, const Matrix& dy, int64_t rows,
                          int64_t d) {
  Matrix dtable(rows * d, 0.0);
  for (size_t t = 0; t < ids.size(); ++t) {
    for (int64_t j = 0; j < d; ++j) dtable[ids[t] * d + j] += dy[t * d + j];
  }
  return dtable;
}

CrossEntropyResult cross_entropy(const Matrix& logits, const std::vector<int32_t>& targets,
                                 int64_t tokens, int64_t classes, double label_smoothing,
                                 int32_t ignore_index, int parts) {
  CrossEntropyResult r;
  r.losses.assign(tokens, 0.0);
  r.dlogits.assign(tokens * classes, 0.0);
  r.loss_mag.assign(tokens, 0.0);
  r.dlogits_mag.assign(tokens * classes, 0.0);
  const double a = label_smoothing;
  double total = 0.0;
  for (int64_t t = 0; t < tokens; ++t) {
    if (targets[t] == ignore_index) continue;
    const double* row = &logits[t * classes];
    const double m = *std::max_element(row, row + classes);
    double s = 0.0;
    for (int64_t j = 0; j < classes; ++j) s += std::exp(row[j] - m);
    const double lse = m + std::log(s);
    double loss = 0.0, p_abs_z = 0.0, mean_abs_z = 0.0;
    for (int64_t j = 0; j < classes; ++j) {
      const double log_p = row[j] - lse;
      const double onehot = j == targets[t] ? 1.0 : 0.0;
      // Terms of weight 0 and of probability 0 are skipped, not multiplied:
      // a -inf logit has log p = -inf and |z| = inf (0 * inf would be NaN).
      const double weight = (1.0 - a) * onehot + a / classes;
      if (weight != 0.0) loss -= weight * log_p;
      const double p = std::exp(log_p);
      r.dlogits[t * classes + j] = p - (1.0 - a) * onehot - a / classes;
      if (p > 0.0) p_abs_z += p * (m - row[j]);
      mean_abs_z += (m - row[j]) / classes;
    }
    r.losses[t] = loss;
    total += loss;
    ++r.counted;
    const double sigma = parts + 2 + p_abs_z;
    r.loss_mag[t] = sigma + (m - row[targets[t]]) + (a > 0.0 ? (parts + 1) * a * mean_abs_z : 0.0) +
                    std::fabs(loss);
    for (int64_t j = 0; j < classes; ++j) {
      const double p = std::exp(row[j] - lse);
      r.dlogits_mag[t * classes + j] =
          (p > 0.0 ? p * (4.0 + (m - row[j]) + sigma) : 0.0) + std::fabs(p - a / classes) +
          2.0 * std::fabs(r.dlogits[t * classes + j]) + (j == targets[t] ? 1.0 : 0.0) + 0x1p-100;
    }
  }
  r.mean = r.counted > 0 ? total / r.counted : std::numeric_limits<double>::quiet_NaN();
  return r;
}

}  // namespace colrow::reference
