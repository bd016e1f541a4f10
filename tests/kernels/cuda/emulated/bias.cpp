// The launches of kernels/cuda/bias.cu, on the host through the warp
// emulation: the add's threads never meet (launch_independent); the
// gradient's first stage sums through shared memory behind a barrier
// (launch), its second is column_sums.h's.
#include "support/warp_emulation.h"
// After the emulation, which the kernels' header then uses.
#include "kernels/cuda/bias_kernels.cuh"

#include "kernels/checks/bias.h"
#include "kernels/cuda/emulated/bias.h"
#include "kernels/cuda/emulated/column_sums.h"
#include "kernels/cuda/emulated/launches.h"
#include "kernels/elements.h"

namespace colrow::testing::emulated {

namespace bk = kernels::cuda::bias_kernels;
namespace cs = kernels::cuda::column_sums;
using kernels::elements;

void add_bias(Tensor& y, const Tensor& b) {
  kernels::check_bias(y, b, "add_bias");
  require_host("add_bias", {&y, &b});
  const int64_t tokens = y.size(0), features = y.size(1);
  if (tokens * features == 0) return;
  kernels::with_element_type("add_bias", {&y, &b}, [&](auto e) {
    using E = decltype(e);
    if (kernels::cuda::rows_in_vectors({&y, &b})) {
      const unsigned blocks =
          colrow::cuda::blocks_for(features / kernels::cuda::kPerVector<E>, bk::kThreads);
      bk::for_each_grid_of_rows(tokens, [&](int64_t t0, int64_t rows) {
        emulation::launch_independent(dim3(blocks, static_cast<unsigned>(rows)), bk::kThreads, [&] {
          bk::add_bias_vectors<E>(elements<E>(y) + t0 * y.row_stride(), elements<E>(b), rows,
                                  features, y.row_stride());
        });
      });
      return;
    }
    over_elements(tokens * features, bk::kThreads, [&] {
      bk::add_bias_kernel<E>(elements<E>(y), elements<E>(b), tokens, features, y.row_stride());
    });
  });
}

void accumulate_bias_grad(const Tensor& dy, Tensor& db) {
  kernels::check_bias(dy, db, "accumulate_bias_grad");
  require_host("accumulate_bias_grad", {&dy, &db});
  const int64_t tokens = dy.size(0), features = dy.size(1);
  if (tokens * features == 0) return;
  kernels::with_element_type("accumulate_bias_grad", {&dy}, [&](auto e) {
    using E = decltype(e);
    kernels::cuda::with_chunk<E>(kernels::cuda::rows_in_vectors({&dy}), [&](auto v) {
      constexpr int V = decltype(v)::value;
      const cs::Layout layout = cs::layout<V>(tokens, features);
      Tensor partial = Tensor::empty({layout.chunks, features});
      emulation::launch(layout.grid, layout.block, 0, [&] {
        bk::bias_grad_partials<E, V>(elements<E>(dy), tokens, features, dy.row_stride(),
                                     layout.chunk_rows, partial.data());
      });
      add_column_partials(partial.data(), layout.chunks, features, db.data());
    });
  });
}

}  // namespace colrow::testing::emulated
