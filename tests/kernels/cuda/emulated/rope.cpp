// The launches of kernels/cuda/rope.cu, on the host through the warp
// emulation: the table is the CPU's, as the GPU's is a copy of it; the
// rotation's threads never meet (launch_independent).
#include "support/warp_emulation.h"
// After the emulation, which the kernels' header then uses.
#include "kernels/cuda/rope_kernels.cuh"

#include "kernels/checks/rope.h"
#include "kernels/cpu/rope.h"
#include "kernels/cuda/emulated/launches.h"
#include "kernels/cuda/emulated/rope.h"
#include "kernels/elements.h"

namespace colrow::testing::emulated {
namespace {

namespace rk = kernels::cuda::rope_kernels;
using kernels::elements;

void rotate(const Tensor& x, const Tensor& cos, const Tensor& sin, float sign, Tensor& y,
            const char* what) {
  require_host(what, {&x, &cos, &sin, &y});
  const rk::Rotation r = rk::rotation_of(x, cos);
  if (r.pairs == 0) return;
  kernels::with_element_type(what, {&x, &y}, [&](auto e) {
    using E = decltype(e);
    over_elements(r.pairs, rk::kThreads, [&] {
      rk::rotate_kernel<E>(elements<E>(x), x.row_stride(), cos.data(), sin.data(), elements<E>(y),
                           y.row_stride(), r.pairs, r.seq, r.half, r.heads, sign);
    });
  });
}

}  // namespace

void rope_table(int64_t seq, const std::vector<double>& inv_freq, Tensor& cos, Tensor& sin) {
  require_host("rope_table", {&cos, &sin});
  kernels::cpu::rope_table(seq, inv_freq, cos, sin);
}

void rope_forward(const Tensor& x, const Tensor& cos, const Tensor& sin, Tensor& y) {
  kernels::check_rope(x, cos, sin, y, "rope_forward");
  rotate(x, cos, sin, 1.0f, y, "rope_forward");
}

void rope_backward(const Tensor& dy, const Tensor& cos, const Tensor& sin, Tensor& dx) {
  kernels::check_rope(dy, cos, sin, dx, "rope_backward");
  rotate(dy, cos, sin, -1.0f, dx, "rope_backward");
}

}  // namespace colrow::testing::emulated
