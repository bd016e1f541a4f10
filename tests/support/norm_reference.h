// Double-precision reference for LayerNorm (torch.nn.LayerNorm) and RMSNorm
// (Hugging Face's LlamaRMSNorm), forward and backward, with plain loops. Like
// reference.h it includes no colrow header and shares no code with src/.
// Alongside each result, a magnitude M per element that bounds the fp32
// rounding error of an implementation keeping fp32 mean/rstd (accumulated in
// higher precision) as |got - exact| <= c u M, u = 2^-24, for a small constant c
// that counts the roundings along the longest path (the tests state theirs).
#pragma once

#include <cstdint>
#include <vector>

namespace colrow::reference {

using Matrix = std::vector<double>;  // row-major

struct NormResult {
  Matrix y;       // [tokens, d]
  Matrix dx;      // [tokens, d]
  Matrix dgamma;  // [d]: d loss / d weight, loss = sum(y * dy)
  Matrix dbeta;   // [d]: d loss / d bias (LayerNorm only; empty for RMSNorm)
  Matrix mean;    // [tokens] (LayerNorm only)
  Matrix rstd;    // [tokens]
  // Error magnitudes, same shapes. With xa = rstd (|x - mean| + |mean|) (RMSNorm:
  // rstd |x|), the size of xhat and of the error a rounded mean puts on it:
  //   y:      |gamma| xa + |beta|
  //   dx:     rstd (|g| + mean_j |g| + xa mean_j(|g| xa)),  g = dy gamma
  //   dgamma: sum_t |dy| xa;   dbeta: sum_t |dy|
  Matrix y_mag, dx_mag, dgamma_mag, dbeta_mag;
};

// x, dy: [tokens, d]; gamma, beta: [d].
NormResult layer_norm(const Matrix& x, const Matrix& gamma, const Matrix& beta, const Matrix& dy,
                      int64_t tokens, int64_t d, double eps);
// x, dy: [tokens, d]; weight: [d].
NormResult rms_norm(const Matrix& x, const Matrix& weight, const Matrix& dy, int64_t tokens,
                    int64_t d, double eps);

}  // namespace colrow::reference
