// RoPE tables and the rotate-half rotation, forward and backward.
#include "kernels/cpu/rope.h"

#include <cmath>
#include <string>

#include "colrow/core/error.h"

namespace colrow::kernels::cpu {
namespace {

// Below this many elements one thread is faster.
constexpr int64_t kParallelElements = 1 << 15;

void require_operands(const Tensor& x, const Tensor& cos, const Tensor& sin, const Tensor& y,
                      const char* what) {
  const bool ok = x.ndim() == 2 && x.is_contiguous() && y.is_contiguous() &&
                  x.shape() == y.shape() && cos.ndim() == 2 && cos.is_contiguous() &&
                  sin.shape() == cos.shape() && sin.is_contiguous() && cos.size(0) > 0 &&
                  cos.size(1) > 0 && x.size(0) % cos.size(0) == 0 &&
                  x.size(1) % (2 * cos.size(1)) == 0;
  if (!ok) {
    throw InternalError(std::string("[rope] ") + what +
                        ": need contiguous x, y [tokens, heads * head_dim] of one shape and "
                        "cos, sin [seq, head_dim / 2] with seq dividing tokens; got x " +
                        shape_to_string(x.shape()) + ", y " + shape_to_string(y.shape()) +
                        ", cos " + shape_to_string(cos.shape()) + ", sin " +
                        shape_to_string(sin.shape()));
  }
}

// y = R(sign * angle) x for every head of every token. Each pair (i, i + half)
// is read before it is written, so y may alias x.
void rotate(const Tensor& x, const Tensor& cos, const Tensor& sin, float sign, Tensor& y) {
  const int64_t tokens = x.size(0), width = x.size(1);
  const int64_t seq = cos.size(0), half = cos.size(1), head_dim = 2 * half;
  const int64_t heads = width / head_dim;
  const float* in = x.data();
  const float* c = cos.data();
  const float* s = sin.data();
  float* out = y.data();
#pragma omp parallel for schedule(static) if (tokens * width > kParallelElements)
  for (int64_t t = 0; t < tokens; ++t) {
    const float* ct = c + (t % seq) * half;
    const float* st = s + (t % seq) * half;
    for (int64_t h = 0; h < heads; ++h) {
      const float* xh = in + t * width + h * head_dim;
      float* yh = out + t * width + h * head_dim;
#pragma omp simd
      for (int64_t i = 0; i < half; ++i) {
        const float x1 = xh[i], x2 = xh[i + half];
        const float sn = sign * st[i];
        yh[i] = x1 * ct[i] - x2 * sn;
        yh[i + half] = x2 * ct[i] + x1 * sn;
      }
    }
  }
}

}  // namespace

void rope_table(int64_t seq, int64_t head_dim, double rope_theta, Tensor& cos, Tensor& sin) {
  if (seq < 1 || head_dim < 2 || head_dim % 2 != 0 || !(rope_theta > 0.0)) {
    throw InternalError(
        "[rope] table needs seq >= 1, an even head_dim >= 2 and rope_theta > 0; "
        "got seq " +
        std::to_string(seq) + ", head_dim " + std::to_string(head_dim) + ", rope_theta " +
        std::to_string(rope_theta));
  }
  const int64_t half = head_dim / 2;
  ensure_shape(cos, {seq, half}, Device::cpu());
  ensure_shape(sin, {seq, half}, Device::cpu());
  for (int64_t i = 0; i < half; ++i) {
    const double inv_freq = std::pow(rope_theta, -2.0 * static_cast<double>(i) / head_dim);
    for (int64_t p = 0; p < seq; ++p) {
      const double angle = static_cast<double>(p) * inv_freq;
      cos.data()[p * half + i] = static_cast<float>(std::cos(angle));
      sin.data()[p * half + i] = static_cast<float>(std::sin(angle));
    }
  }
}

void rope_forward(const Tensor& x, const Tensor& cos, const Tensor& sin, Tensor& y) {
  require_operands(x, cos, sin, y, "rope_forward");
  rotate(x, cos, sin, 1.0f, y);
}

void rope_backward(const Tensor& dy, const Tensor& cos, const Tensor& sin, Tensor& dx) {
  require_operands(dy, cos, sin, dx, "rope_backward");
  rotate(dy, cos, sin, -1.0f, dx);
}

}  // namespace colrow::kernels::cpu
