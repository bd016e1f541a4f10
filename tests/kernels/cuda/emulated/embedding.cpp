// The launches of kernels/cuda/embedding.cu, on the host through the warp
// emulation: ids and the scatter-add's plan read where they are (the GPU
// uploads them); every kernel's threads are independent (launch_independent).
#include "support/warp_emulation.h"
// After the emulation, which the kernels' header then uses.
#include "kernels/cuda/embedding_kernels.cuh"

#include "kernels/checks/embedding.h"
#include "kernels/cuda/emulated/embedding.h"
#include "kernels/cuda/emulated/launches.h"
#include "kernels/elements.h"

namespace colrow::testing::emulated {

namespace ek = kernels::cuda::embedding_kernels;
using kernels::elements;

void embedding_forward(const std::vector<int32_t>& ids, int64_t vocab_start,
                       const Tensor& table_local, Tensor& y) {
  const char* what = "embedding_forward";
  const int64_t tokens = static_cast<int64_t>(ids.size());
  kernels::check_embedding_forward(table_local, y, tokens);
  require_host(what, {&y, &table_local});
  const int64_t d = y.size(1);
  if (tokens * d == 0) return;
  kernels::with_element_type(what, {&table_local, &y}, [&](auto e) {
    using E = decltype(e);
    over_elements(tokens * d, ek::kThreads, [&] {
      ek::gather_rows<E>(ids.data(), vocab_start, table_local.size(0), elements<E>(table_local),
                         table_local.row_stride(), elements<E>(y), y.row_stride(), tokens, d);
    });
  });
}

void embedding_backward(const std::vector<int32_t>& ids, int64_t vocab_start, const Tensor& dy,
                        Tensor& dtable_local) {
  const char* what = "embedding_backward";
  const int64_t tokens = static_cast<int64_t>(ids.size());
  kernels::check_embedding_backward(dy, dtable_local, tokens);
  require_host(what, {&dtable_local, &dy});
  const int64_t d = dy.size(1);
  if (tokens * d == 0) return;
  const std::vector<int32_t> plan = ek::backward_plan(ids, vocab_start, dtable_local.size(0));
  kernels::with_elements(dy, [&](const auto* g) {
    emulation::launch_independent(ek::scatter_grid(tokens, d), ek::kRowThreads, [&] {
      ek::scatter_add_rows(plan.data(), g, dy.row_stride(), dtable_local.data(),
                           dtable_local.row_stride(), d);
    });
  });
}

void position_embedding_forward(Tensor& x, const Tensor& table, int64_t seq) {
  const char* what = "position_embedding_forward";
  ek::check_positions(what, "x", x, "table", table, seq);
  require_host(what, {&x, &table});
  const int64_t tokens = x.size(0), d = x.size(1);
  if (tokens * d == 0) return;
  kernels::with_element_type(what, {&x, &table}, [&](auto e) {
    using E = decltype(e);
    over_elements(tokens * d, ek::kThreads, [&] {
      ek::add_positions<E>(elements<E>(x), elements<E>(table), table.row_stride(), tokens, seq, d);
    });
  });
}

void position_embedding_backward(const Tensor& dx, int64_t seq, Tensor& dtable) {
  const char* what = "position_embedding_backward";
  ek::check_positions(what, "dx", dx, "dtable", dtable, seq);
  require_host(what, {&dtable, &dx});
  const int64_t batch = dx.size(0) / seq, d = dx.size(1);
  if (batch * d == 0) return;
  kernels::with_elements(dx, [&](const auto* g) {
    over_elements(seq * d, ek::kThreads,
                  [&] { ek::sum_positions(g, batch, seq, d, dtable.data(), dtable.row_stride()); });
  });
}

}  // namespace colrow::testing::emulated
