// Launches of the embedding kernels on the GPU (embedding.h): the host
// holds the ids and builds the scatter-add's plan; the kernels, and the
// order they add in, are in embedding_kernels.cuh.
#include "kernels/cuda/embedding.h"

#include <cuda_runtime.h>

#include <cstdint>
#include <string>

#include "colrow/core/bfloat16.h"
#include "colrow/core/error.h"
#include "core/cuda/cuda_check.h"
#include "core/cuda/cuda_context.h"
#include "kernels/checks/embedding.h"
#include "kernels/cuda/embedding_kernels.cuh"
#include "kernels/cuda/kept_buffers.h"
#include "kernels/cuda/operands.h"
#include "kernels/elements.h"

namespace colrow::kernels::cuda {
namespace {

using embedding_kernels::kRowThreads;
using embedding_kernels::kThreads;

// The uploads of one batch's ids and of their backward plan, shared by the
// kernels and stage_embedding_ids (what the kernels then find in place).
const int32_t* upload_ids(int device, const std::vector<int32_t>& ids) {
  return upload_kept(device, "embedding.ids", ids);
}

const int32_t* upload_backward_plan(int device, const std::vector<int32_t>& ids,
                                    int64_t vocab_start, int64_t rows_local) {
  // At most 3 tokens + 2 values, the room reserved, so the buffers stay put
  // as the distinct ids vary.
  return upload_kept(device, "embedding.backward_plan",
                     embedding_kernels::backward_plan(ids, vocab_start, rows_local),
                     3 * ids.size() + 2);
}

}  // namespace

void embedding_forward(const std::vector<int32_t>& ids, int64_t vocab_start,
                       const Tensor& table_local, Tensor& y) {
  const char* what = "embedding_forward";
  const int64_t tokens = static_cast<int64_t>(ids.size());
  check_embedding_forward(table_local, y, tokens);
  const int device = cuda_device_of(what, {&y, &table_local});
  const int64_t d = y.size(1);
  if (tokens * d == 0) return;
  const int32_t* ids_gpu = upload_ids(device, ids);
  with_element_type(what, {&table_local, &y}, [&](auto e) {
    using E = decltype(e);
    embedding_kernels::gather_rows<E><<<colrow::cuda::blocks_for(tokens * d, kThreads), kThreads, 0,
                                        colrow::cuda::compute_stream(device)>>>(
        ids_gpu, vocab_start, table_local.size(0), elements<E>(table_local),
        table_local.row_stride(), elements<E>(y), y.row_stride(), tokens, d);
  });
  COLROW_CUDA_CHECK_LAUNCH();
}

void embedding_backward(const std::vector<int32_t>& ids, int64_t vocab_start, const Tensor& dy,
                        Tensor& dtable_local) {
  const char* what = "embedding_backward";
  const int64_t tokens = static_cast<int64_t>(ids.size());
  check_embedding_backward(dy, dtable_local, tokens);
  const int device = cuda_device_of(what, {&dtable_local, &dy});
  const int64_t d = dy.size(1);
  if (tokens * d == 0) return;
  const int32_t* plan_gpu = upload_backward_plan(device, ids, vocab_start, dtable_local.size(0));
  // Launched even when no token falls in my rows (every block then returns).
  const dim3 grid = embedding_kernels::scatter_grid(tokens, d);
  with_elements(dy, [&](const auto* g) {
    embedding_kernels::
        scatter_add_rows<<<grid, kRowThreads, 0, colrow::cuda::compute_stream(device)>>>(
            plan_gpu, g, dy.row_stride(), dtable_local.data(), dtable_local.row_stride(), d);
  });
  COLROW_CUDA_CHECK_LAUNCH();
}

void stage_embedding_ids(int device, const std::vector<int32_t>& ids, int64_t vocab_start,
                         int64_t rows_local) {
  if (ids.empty()) return;
  upload_ids(device, ids);
  upload_backward_plan(device, ids, vocab_start, rows_local);
}

void position_embedding_forward(Tensor& x, const Tensor& table, int64_t seq) {
  const char* what = "position_embedding_forward";
  embedding_kernels::check_positions(what, "x", x, "table", table, seq);
  const int device = cuda_device_of(what, {&x, &table});
  const int64_t tokens = x.size(0), d = x.size(1);
  if (tokens * d == 0) return;
  with_element_type(what, {&x, &table}, [&](auto e) {
    using E = decltype(e);
    embedding_kernels::add_positions<E><<<colrow::cuda::blocks_for(tokens * d, kThreads), kThreads,
                                          0, colrow::cuda::compute_stream(device)>>>(
        elements<E>(x), elements<E>(table), table.row_stride(), tokens, seq, d);
  });
  COLROW_CUDA_CHECK_LAUNCH();
}

void position_embedding_backward(const Tensor& dx, int64_t seq, Tensor& dtable) {
  const char* what = "position_embedding_backward";
  embedding_kernels::check_positions(what, "dx", dx, "dtable", dtable, seq);
  const int device = cuda_device_of(what, {&dtable, &dx});
  const int64_t batch = dx.size(0) / seq, d = dx.size(1);
  if (batch * d == 0) return;
  with_elements(dx, [&](const auto* g) {
    embedding_kernels::sum_positions<<<colrow::cuda::blocks_for(seq * d, kThreads), kThreads, 0,
                                       colrow::cuda::compute_stream(device)>>>(
        g, batch, seq, d, dtable.data(), dtable.row_stride());
  });
  COLROW_CUDA_CHECK_LAUNCH();
}

}  // namespace colrow::kernels::cuda
