// RoPE tables and the rotate-half rotation, forward and backward.
#include "kernels/cpu/rope.h"

#include <cmath>

#include "colrow/core/bfloat16.h"
#include "kernels/checks/rope.h"
#include "kernels/cpu/parallel.h"
#include "kernels/elements.h"

namespace colrow::kernels::cpu {
namespace {

// y = R(sign * angle) x for every head of every token. Each pair (i, i + half)
// is read before it is written, so y may alias x. x and y are fp32 or bf16
// (read natively, each output rounded once); the tables are fp32. Rows may be
// strided (row_stride), a block of a wider tensor's columns.
void rotate(const Tensor& x, const Tensor& cos, const Tensor& sin, float sign, Tensor& y,
            const char* what) {
  const int64_t tokens = x.size(0), width = x.size(1);
  const int64_t ldx = x.row_stride(), ldy = y.row_stride();
  const int64_t seq = cos.size(0), half = cos.size(1), head_dim = 2 * half;
  const int64_t heads = width / head_dim;
  const float* c = cos.data();
  const float* s = sin.data();
  with_element_type(what, {&x, &y}, [&](auto e) {
    using E = decltype(e);
    const E* in = elements<E>(x);
    E* out = elements<E>(y);
#pragma omp parallel for schedule(static) if (tokens * width > kParallelElements)
    for (int64_t t = 0; t < tokens; ++t) {
      const float* ct = c + (t % seq) * half;
      const float* st = s + (t % seq) * half;
      for (int64_t h = 0; h < heads; ++h) {
        const E* xh = in + t * ldx + h * head_dim;
        E* yh = out + t * ldy + h * head_dim;
#pragma omp simd
        for (int64_t i = 0; i < half; ++i) {
          const float x1 = widen(xh[i]), x2 = widen(xh[i + half]);
          const float sn = sign * st[i];
          // Which product is fused into the add, spelled out as the GPU's
          // rope.cu does: the same bits on both, whatever a compiler fuses.
          yh[i] = narrow<E>(std::fma(x1, ct[i], -(x2 * sn)));
          yh[i + half] = narrow<E>(std::fma(x2, ct[i], x1 * sn));
        }
      }
    }
  });
}

}  // namespace

void rope_table(int64_t seq, const std::vector<double>& inv_freq, Tensor& cos, Tensor& sin) {
  check_rope_table(seq, inv_freq);
  const int64_t half = static_cast<int64_t>(inv_freq.size());
  ensure_shape(cos, {seq, half}, Device::cpu());
  ensure_shape(sin, {seq, half}, Device::cpu());
  float *c = cos.data(), *s = sin.data();
  // Parallel over positions: a long context's table is millions of double
  // cos and sin, each computed alone (no sums), so the split changes no bits.
#pragma omp parallel for schedule(static) if (seq * half > kParallelElements)
  for (int64_t p = 0; p < seq; ++p) {
    for (int64_t i = 0; i < half; ++i) {
      const double angle = static_cast<double>(p) * inv_freq[i];
      c[p * half + i] = static_cast<float>(std::cos(angle));
      s[p * half + i] = static_cast<float>(std::sin(angle));
    }
  }
}

void rope_forward(const Tensor& x, const Tensor& cos, const Tensor& sin, Tensor& y) {
  check_rope(x, cos, sin, y, "rope_forward");
  rotate(x, cos, sin, 1.0f, y, "rope_forward");
}

void rope_backward(const Tensor& dy, const Tensor& cos, const Tensor& sin, Tensor& dx) {
  check_rope(dy, cos, sin, dx, "rope_backward");
  rotate(dy, cos, sin, -1.0f, dx, "rope_backward");
}

}  // namespace colrow::kernels::cpu
