// Unsharded reference for the layer tests: linear, GELU (tanh and exact erf
// forms), SiLU and the MLPs, forward and backward, in double precision with plain loops. It is
// deliberately independent of the library: it includes no colrow header and
// shares no code with src/, so a bug there cannot hide in its own reference.
// Matrices are row-major std::vector<double>; a weight W is stored [out, in].
#pragma once

#include <cstdint>
#include <vector>

namespace colrow::reference {

using Matrix = std::vector<double>;  // row-major; an empty Matrix means "no bias"

// Element-wise |a|: the magnitude companion of a linear layer is the same
// function applied to |x|, |W|, |b| (and |dy|). Its output M bounds the fp32
// rounding error of each element by gamma_K * M (Higham, Accuracy and
// Stability, eq. 3.5), gamma_K = K u / (1 - K u), u = 2^-24, K the number of
// terms summed, in any order, with or without FMA.
Matrix abs(const Matrix& a);
// u and gamma_K for fp32.
constexpr double kUnitRoundoff = 1.0 / 16777216.0;  // 2^-24
double gamma(int64_t terms);

// x: [tokens, in], w: [out, in], b: [out] or empty -> y = x w^T + b: [tokens, out]
Matrix linear_forward(const Matrix& x, const Matrix& w, const Matrix& b, int64_t tokens, int64_t in,
                      int64_t out);

struct LinearGrads {
  Matrix dx;  // [tokens, in]   = dy w
  Matrix dw;  // [out, in]      = dy^T x
  Matrix db;  // [out]          = column sums of dy (empty when has_bias is false)
};
// dy: [tokens, out]
LinearGrads linear_backward(const Matrix& x, const Matrix& w, const Matrix& dy, bool has_bias,
                            int64_t tokens, int64_t in, int64_t out);

// gelu(x) = x/2 (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))), the tanh form GPT-2 uses.
double gelu(double x);
double gelu_grad(double x);
// gelu_erf(x) = x/2 (1 + erf(x / sqrt(2))) = x Phi(x), the exact form (Hugging
// Face's activation_function "gelu"); gelu_erf'(x) = Phi(x) + x phi(x), phi the
// standard normal density.
double gelu_erf(double x);
double gelu_erf_grad(double x);
// silu(x) = x sigmoid(x).
double silu(double x);
double silu_grad(double x);

// kGelu: the tanh form (GPT-2's gelu_new); kGeluErf: the exact erf form.
enum class MlpKind { kGelu, kSwiGlu, kGeluErf };

// Weights (and, as output, gradients) of one MLP. gelu (either form) uses up (c_fc) and down
// (c_proj); swiglu uses gate (gate_proj), up (up_proj) and down (down_proj).
// Biases are empty when the MLP has none; gate_* are empty for gelu.
struct MlpWeights {
  Matrix gate_w, gate_b;  // [ffn, d_model], [ffn]
  Matrix up_w, up_b;      // [ffn, d_model], [ffn]
  Matrix down_w, down_b;  // [d_model, ffn], [d_model]
};

struct MlpResult {
  Matrix y;          // [tokens, d_model]
  Matrix dx;         // [tokens, d_model]
  MlpWeights grads;  // same shapes as the weights
};

// x: [tokens, d_model], dy: [tokens, d_model].
//   gelu:   y = gelu(x up_w^T + up_b) down_w^T + down_b (gelu_erf for kGeluErf)
//   swiglu: y = (silu(x gate_w^T + gate_b) * (x up_w^T + up_b)) down_w^T + down_b
MlpResult mlp(MlpKind kind, const MlpWeights& w, const Matrix& x, const Matrix& dy, int64_t tokens,
              int64_t d_model, int64_t ffn);

// The magnitude companion of mlp(): the same computation on |x|, |W|, |b|, |dy|,
// with each activation replaced by a proxy that bounds both its value and the
// spread of a perturbed input through it (first-order error propagation):
//   gelu:   h ~ |z|,         dz ~ (1 + |z|) |dh|        (|gelu(z)| <= |z|,
//           |gelu'| <= 1.13, |gelu''| <= 0.8: the perturbation of gelu'(z) by
//           an error e in z is at most 0.8 e <= |z| times gamma)
//   gelu_erf: the same proxy, since the exact form obeys the same bounds:
//           |gelu_erf(z)| = |z| Phi(z) <= |z|; gelu_erf'(z) = Phi(z) + z phi(z)
//           peaks at z = sqrt(2) (where gelu_erf'' = phi(z)(2 - z^2) = 0):
//           Phi(sqrt 2) + sqrt(2) phi(sqrt 2) = 0.9214 + 0.2076 = 1.129 <= 1.13
//           (its minimum, at -sqrt 2, is -0.129); |gelu_erf''| = phi(z)|2 - z^2|
//           is largest at z = 0: 2 phi(0) = 0.798 <= 0.8 (elsewhere its extrema,
//           at z = +-2, are 2 phi(2) = 0.108)
//   swiglu: h ~ |a| |b|,     da ~ (1 + |a|) |b| |dh|,  db ~ |a| |dh|
//           (|silu(a)| <= |a|, |silu'| <= 1.1, |silu''| <= 0.5)
// Then every fp32 output element of the layer lies within 4 gamma_K M of the
// exact one, K the total number of terms summed along the longest chain
// (d_model + ffn + tokens, plus a few for bias adds and the ulps of tanh/exp).
// The factor 4 covers the derivative bounds: each stage passes on at most 1.13
// times the error before it, and swiglu's product of two perturbed factors
// (a, b) doubles that once: 1.1 * (1.1 + 1.1) < 4.
MlpResult mlp_magnitude(MlpKind kind, const MlpWeights& w, const Matrix& x, const Matrix& dy,
                        int64_t tokens, int64_t d_model, int64_t ffn);

}  // namespace colrow::reference
