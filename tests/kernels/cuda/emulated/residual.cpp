// The launches of kernels/cuda/residual.cu, on the host through the warp
// emulation; one thread per element, never meeting (launch_independent).
#include "support/warp_emulation.h"
// After the emulation, which the kernels' header then uses.
#include "kernels/cuda/residual_kernels.cuh"

#include "kernels/checks/elementwise.h"
#include "kernels/cuda/emulated/launches.h"
#include "kernels/cuda/emulated/residual.h"
#include "kernels/elements.h"

namespace colrow::testing::emulated {

namespace rk = kernels::cuda::residual_kernels;
using kernels::elements;
using kernels::with_element_type;

void add(const Tensor& a, const Tensor& b, Tensor& out) {
  kernels::check_elementwise("residual", "add", a, {&b, &out});
  require_host("add", {&a, &b, &out});
  const int64_t n = a.numel();
  if (n == 0) return;
  with_element_type("add", {&a, &b, &out}, [&](auto e) {
    using E = decltype(e);
    over_elements(n, rk::kThreads,
                  [&] { rk::add_kernel<E>(elements<E>(a), elements<E>(b), elements<E>(out), n); });
  });
}

void add_into(Tensor& out, const Tensor& a) {
  kernels::check_elementwise("residual", "add_into", out, {&a});
  require_host("add_into", {&out, &a});
  const int64_t n = a.numel();
  if (n == 0) return;
  with_element_type("add_into", {&out, &a}, [&](auto e) {
    using E = decltype(e);
    over_elements(n, rk::kThreads,
                  [&] { rk::add_into_kernel<E>(elements<E>(out), elements<E>(a), n); });
  });
}

}  // namespace colrow::testing::emulated
