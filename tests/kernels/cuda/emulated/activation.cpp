// The launches of kernels/cuda/activation.cu, on the host through the warp
// emulation. The element-wise kernels' threads never meet, so they run
// through launch_independent: no fibers, and the grid of the 70001-row
// SwiGLU case stays cheap.
#include "support/warp_emulation.h"
// After the emulation, which the kernels' header then uses.
#include "kernels/cuda/activation_kernels.cuh"

#include "kernels/checks/elementwise.h"
#include "kernels/cuda/emulated/activation.h"
#include "kernels/cuda/emulated/launches.h"
#include "kernels/elements.h"

namespace colrow::testing::emulated {

namespace act = kernels::cuda::activation_kernels;
using kernels::elements;
using kernels::with_element_type;

void gelu_forward(kernels::GeluForm form, const Tensor& x, Tensor& y) {
  kernels::check_elementwise("activation", "gelu_forward", x, {&y});
  require_host("gelu_forward", {&x, &y});
  const int64_t n = x.numel();
  if (n == 0) return;
  with_element_type("gelu_forward", {&x, &y}, [&](auto e) {
    using E = decltype(e);
    over_elements(n, act::kThreads,
                  [&] { act::gelu_forward_kernel<E>(form, elements<E>(x), elements<E>(y), n); });
  });
}

void gelu_backward(kernels::GeluForm form, const Tensor& x, const Tensor& dy, Tensor& dx) {
  kernels::check_elementwise("activation", "gelu_backward", x, {&dy, &dx});
  require_host("gelu_backward", {&x, &dy, &dx});
  const int64_t n = x.numel();
  if (n == 0) return;
  with_element_type("gelu_backward", {&x, &dy, &dx}, [&](auto e) {
    using E = decltype(e);
    over_elements(n, act::kThreads, [&] {
      act::gelu_backward_kernel<E>(form, elements<E>(x), elements<E>(dy), elements<E>(dx), n);
    });
  });
}

void silu_forward(const Tensor& x, Tensor& y) {
  kernels::check_elementwise("activation", "silu_forward", x, {&y});
  require_host("silu_forward", {&x, &y});
  const int64_t n = x.numel();
  if (n == 0) return;
  with_element_type("silu_forward", {&x, &y}, [&](auto e) {
    using E = decltype(e);
    over_elements(n, act::kThreads,
                  [&] { act::silu_forward_kernel<E>(elements<E>(x), elements<E>(y), n); });
  });
}

void silu_backward(const Tensor& x, const Tensor& dy, Tensor& dx) {
  kernels::check_elementwise("activation", "silu_backward", x, {&dy, &dx});
  require_host("silu_backward", {&x, &dy, &dx});
  const int64_t n = x.numel();
  if (n == 0) return;
  with_element_type("silu_backward", {&x, &dy, &dx}, [&](auto e) {
    using E = decltype(e);
    over_elements(n, act::kThreads, [&] {
      act::silu_backward_kernel<E>(elements<E>(x), elements<E>(dy), elements<E>(dx), n);
    });
  });
}

void swiglu_forward(const Tensor& gate, const Tensor& up, Tensor& h) {
  kernels::check_elementwise_rows("activation", "swiglu_forward", gate, {&up, &h});
  require_host("swiglu_forward", {&gate, &up, &h});
  if (gate.numel() == 0) return;
  with_element_type("swiglu_forward", {&gate, &up, &h}, [&](auto e) {
    using E = decltype(e);
    const act::RowStrides s = act::row_strides(gate, up, h);
    emulation::launch_independent(act::row_grid(s), act::kThreads, [&] {
      act::swiglu_forward_kernel<E>(elements<E>(gate), elements<E>(up), elements<E>(h), s);
    });
  });
}

void swiglu_backward(const Tensor& gate, const Tensor& up, const Tensor& dh, Tensor& dgate,
                     Tensor& dup) {
  kernels::check_elementwise_rows("activation", "swiglu_backward", gate, {&up, &dh, &dgate, &dup});
  require_host("swiglu_backward", {&gate, &up, &dh, &dgate, &dup});
  if (gate.numel() == 0) return;
  with_element_type("swiglu_backward", {&gate, &up, &dh, &dgate, &dup}, [&](auto e) {
    using E = decltype(e);
    const act::RowStrides s = act::row_strides(gate, up, dh, &dgate, &dup);
    emulation::launch_independent(act::row_grid(s), act::kThreads, [&] {
      act::swiglu_backward_kernel<E>(elements<E>(gate), elements<E>(up), elements<E>(dh),
                                     elements<E>(dgate), elements<E>(dup), s);
    });
  });
}

}  // namespace colrow::testing::emulated
