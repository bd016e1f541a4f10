// The launches of kernels/cuda/norm.cu, on the host through the warp
// emulation. The row kernels' warps meet in shuffles and the parameter
// gradients' first stage behind a barrier (launch); the second stage never
// meets (launch_independent, column_sums.h). Partials live in host scratch
// where norm.cu keeps a device buffer.
#include "support/warp_emulation.h"
// After the emulation, which the kernels' header then uses.
#include "kernels/cuda/norm_kernels.cuh"

#include "kernels/checks/norm.h"
#include "kernels/cuda/emulated/column_sums.h"
#include "kernels/cuda/emulated/launches.h"
#include "kernels/cuda/emulated/norm.h"
#include "kernels/elements.h"

namespace colrow::testing::emulated {
namespace {

namespace nk = kernels::cuda::norm_kernels;
namespace cs = kernels::cuda::column_sums;
using kernels::elements;
using kernels::with_element_type;
using kernels::cuda::rows_in_vectors;
using nk::or_x;

// A row kernel: one warp per token row, as norm.cu's grid.
void over_rows(int64_t tokens, const std::function<void()>& warp_threads) {
  emulation::launch(nk::row_blocks(tokens), nk::kRowBlock, 0, warp_threads);
}

// As norm.cu's accumulate_param_grads, partials in host memory.
template <typename E>
void accumulate_param_grads(const Tensor& x, const float* mean, const Tensor& rstd,
                            const Tensor& dy, Tensor& dgamma, Tensor* dbeta) {
  const int64_t tokens = x.size(0), d = x.size(1);
  if (tokens == 0 || d == 0) return;
  kernels::cuda::with_chunk<E>(rows_in_vectors({&x, &dy}), [&](auto v) {
    constexpr int V = decltype(v)::value;
    const cs::Layout layout = cs::layout<V>(tokens, d);
    const size_t count = static_cast<size_t>(layout.chunks * d);
    std::vector<double> partial_gamma(count), partial_beta(dbeta != nullptr ? count : 0);
    emulation::launch(layout.grid, layout.block, 0, [&] {
      nk::norm_param_grad_partials<E, V>(elements<E>(x), x.row_stride(), mean, rstd.data(),
                                         elements<E>(dy), dy.row_stride(), tokens, d,
                                         layout.chunk_rows, partial_gamma.data(),
                                         dbeta != nullptr ? partial_beta.data() : nullptr);
    });
    add_column_partials(partial_gamma.data(), layout.chunks, d, dgamma.data());
    if (dbeta != nullptr) add_column_partials(partial_beta.data(), layout.chunks, d, dbeta->data());
  });
}

}  // namespace

void layer_norm_forward(const Tensor& x, const Tensor& gamma, const Tensor& beta, float eps,
                        Tensor& y, Tensor& mean, Tensor& rstd, const Tensor* residual,
                        Tensor* sum) {
  kernels::check_layer_norm_forward(x, gamma, beta, y, mean, rstd);
  kernels::check_norm_residual(x, residual, sum, "layer_norm_forward");
  require_host("layer_norm_forward", {&x, &gamma, &beta, &y, &mean, &rstd, residual, sum});
  const int64_t tokens = x.size(0), d = x.size(1);
  if (tokens == 0) return;
  with_element_type(
      "layer_norm_forward", {&x, &gamma, &beta, &y, or_x(residual, x), or_x(sum, x)}, [&](auto e) {
        using E = decltype(e);
        kernels::cuda::with_chunk<E>(
            rows_in_vectors({&x, &gamma, &beta, &y, residual, sum}), [&](auto v) {
              over_rows(tokens, [&] {
                nk::layer_norm_forward_kernel<E, decltype(v)::value>(
                    elements<E>(x), x.row_stride(), nk::residual_rows<E>(residual, sum),
                    elements<E>(gamma), elements<E>(beta), eps, tokens, d, elements<E>(y),
                    y.row_stride(), mean.data(), rstd.data());
              });
            });
      });
}

void layer_norm_backward(const Tensor& x, const Tensor& gamma, const Tensor& mean,
                         const Tensor& rstd, const Tensor& dy, Tensor& dx, Tensor& dgamma,
                         Tensor& dbeta, const Tensor* dresidual) {
  kernels::check_layer_norm_backward(x, gamma, mean, rstd, dy, dx, dgamma, dbeta);
  kernels::check_norm_dresidual(dx, dresidual, "layer_norm_backward");
  require_host("layer_norm_backward",
               {&x, &gamma, &mean, &rstd, &dy, &dx, &dgamma, &dbeta, dresidual});
  const int64_t tokens = x.size(0), d = x.size(1);
  if (tokens == 0) return;
  with_element_type("layer_norm_backward", {&x, &gamma, &dy, &dx, or_x(dresidual, x)}, [&](auto e) {
    using E = decltype(e);
    kernels::cuda::with_chunk<E>(rows_in_vectors({&x, &gamma, &dy, &dx, dresidual}), [&](auto v) {
      over_rows(tokens, [&] {
        nk::layer_norm_dx_kernel<E, decltype(v)::value>(
            elements<E>(x), x.row_stride(), elements<E>(gamma), mean.data(), rstd.data(),
            elements<E>(dy), dy.row_stride(), tokens, d,
            dresidual != nullptr ? elements<E>(*dresidual) : nullptr,
            dresidual != nullptr ? dresidual->row_stride() : 0, elements<E>(dx), dx.row_stride());
      });
    });
    accumulate_param_grads<E>(x, mean.data(), rstd, dy, dgamma, &dbeta);
  });
}

void rms_norm_forward(const Tensor& x, const Tensor& weight, float eps, Tensor& y, Tensor& rstd,
                      const Tensor* residual, Tensor* sum) {
  kernels::check_rms_norm_forward(x, weight, y, rstd);
  kernels::check_norm_residual(x, residual, sum, "rms_norm_forward");
  require_host("rms_norm_forward", {&x, &weight, &y, &rstd, residual, sum});
  const int64_t tokens = x.size(0), d = x.size(1);
  if (tokens == 0) return;
  with_element_type("rms_norm_forward", {&x, &weight, &y, or_x(residual, x), or_x(sum, x)},
                    [&](auto e) {
                      using E = decltype(e);
                      kernels::cuda::with_chunk<E>(
                          rows_in_vectors({&x, &weight, &y, residual, sum}), [&](auto v) {
                            over_rows(tokens, [&] {
                              nk::rms_norm_forward_kernel<E, decltype(v)::value>(
                                  elements<E>(x), x.row_stride(),
                                  nk::residual_rows<E>(residual, sum), elements<E>(weight), eps,
                                  tokens, d, elements<E>(y), y.row_stride(), rstd.data());
                            });
                          });
                    });
}

void rms_norm_backward(const Tensor& x, const Tensor& weight, const Tensor& rstd, const Tensor& dy,
                       Tensor& dx, Tensor& dweight, const Tensor* dresidual) {
  kernels::check_rms_norm_backward(x, weight, rstd, dy, dx, dweight);
  kernels::check_norm_dresidual(dx, dresidual, "rms_norm_backward");
  require_host("rms_norm_backward", {&x, &weight, &rstd, &dy, &dx, &dweight, dresidual});
  const int64_t tokens = x.size(0), d = x.size(1);
  if (tokens == 0) return;
  with_element_type("rms_norm_backward", {&x, &weight, &dy, &dx, or_x(dresidual, x)}, [&](auto e) {
    using E = decltype(e);
    kernels::cuda::with_chunk<E>(rows_in_vectors({&x, &weight, &dy, &dx, dresidual}), [&](auto v) {
      over_rows(tokens, [&] {
        nk::rms_norm_dx_kernel<E, decltype(v)::value>(
            elements<E>(x), x.row_stride(), elements<E>(weight), rstd.data(), elements<E>(dy),
            dy.row_stride(), tokens, d, dresidual != nullptr ? elements<E>(*dresidual) : nullptr,
            dresidual != nullptr ? dresidual->row_stride() : 0, elements<E>(dx), dx.row_stride());
      });
    });
    accumulate_param_grads<E>(x, nullptr, rstd, dy, dweight, nullptr);
  });
}

}  // namespace colrow::testing::emulated
