// Embedding lookups and their gradients on the GPU. The vocabulary gradient
// is a scatter-add with repeated ids: the host (which holds the ids) groups
// the local tokens by table row, keeping token order within each row, and one
// thread per (row, feature) adds that row's tokens in order. Position
// gradients: one thread per (position, feature) adds the sequences in order.
// Both are the CPU's additions in the CPU's order, so the bits match it and
// repeat from run to run; no atomics. The table, y, x and the gradients dy
// and dx are fp32 or bf16 (E, kernels/elements.h), bf16 read natively and
// each output rounded once (a gather copies the bits); dtable stays fp32.
#include "kernels/cuda/embedding.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <string>
#include <utility>

#include "colrow/core/bfloat16.h"
#include "colrow/core/error.h"
#include "core/cuda/cuda_check.h"
#include "core/cuda/cuda_context.h"
#include "kernels/checks/embedding.h"
#include "kernels/cuda/kept_buffers.h"
#include "kernels/cuda/operands.h"
#include "kernels/elements.h"

namespace colrow::kernels::cuda {
namespace {

constexpr int kThreads = 256;
constexpr int kRowThreads = 128;  // features per block in the scatter-add
// Blocks along the table rows of the scatter-add: each takes rows u, u +
// kMaxRowBlocks, ... (a batch of B x T tokens has at most that many rows).
constexpr int64_t kMaxRowBlocks = 4096;

[[noreturn]] void fail(const char* what, const std::string& detail) {
  throw InternalError(std::string("[embedding] ") + what + ": " + detail);
}

template <typename E>
__global__ void gather_rows(const int32_t* ids, int64_t vocab_start, int64_t rows_local,
                            const E* table, int64_t ld_table, E* y, int64_t ld_y, int64_t tokens,
                            int64_t d) {
  const int64_t idx = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (idx >= tokens * d) return;
  const int64_t t = idx / d, j = idx % d;
  const int64_t row = static_cast<int64_t>(ids[t]) - vocab_start;
  y[t * ld_y + j] = row >= 0 && row < rows_local ? table[row * ld_table + j] : narrow<E>(0.0f);
}

// plan = [n][rows: n][offsets: n + 1][tokens]: table row rows[u] receives the
// dy rows tokens[offsets[u] .. offsets[u + 1]), in that (token) order. The
// count n is read here, not passed: the launch depends on the batch's size
// only, so a CUDA graph of it serves every batch of that size.
// Grid: x = rows u, u + gridDim.x, ...; y = block of features.
template <typename E>
__global__ void scatter_add_rows(const int32_t* plan, const E* dy, int64_t ld_dy, float* dtable,
                                 int64_t ld_table, int64_t d) {
  const int64_t j = static_cast<int64_t>(blockIdx.y) * blockDim.x + threadIdx.x;
  if (j >= d) return;
  const int64_t n = plan[0];
  const int32_t* rows = plan + 1;
  const int32_t* offsets = rows + n;
  const int32_t* tokens = offsets + n + 1;
  for (int64_t u = blockIdx.x; u < n; u += gridDim.x) {
    float* dst = dtable + static_cast<int64_t>(rows[u]) * ld_table + j;
    float acc = *dst;
    for (int32_t k = offsets[u]; k < offsets[u + 1]; ++k) {
      acc += widen(dy[static_cast<int64_t>(tokens[k]) * ld_dy + j]);
    }
    *dst = acc;
  }
}

template <typename E>
__global__ void add_positions(E* x, const E* table, int64_t ld_table, int64_t tokens, int64_t seq,
                              int64_t d) {
  const int64_t idx = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (idx >= tokens * d) return;
  const int64_t t = idx / d, j = idx % d;
  x[idx] = narrow<E>(widen(x[idx]) + widen(table[(t % seq) * ld_table + j]));
}

// One thread per (position p, feature j): dtable[p, j] += dx[b * seq + p, j], b in order.
template <typename E>
__global__ void sum_positions(const E* dx, int64_t batch, int64_t seq, int64_t d, float* dtable,
                              int64_t ld_table) {
  const int64_t idx = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (idx >= seq * d) return;
  const int64_t p = idx / d, j = idx % d;
  float* dst = dtable + p * ld_table + j;
  float acc = *dst;
  for (int64_t b = 0; b < batch; ++b) acc += widen(dx[(b * seq + p) * d + j]);
  *dst = acc;
}

// The uploads of one batch's ids and of their backward plan, shared by the
// kernels and stage_embedding_ids (what the kernels then find in place).
const int32_t* upload_ids(int device, const std::vector<int32_t>& ids) {
  return upload_kept(device, "embedding.ids", ids);
}

// The scatter-add's plan (scatter_add_rows): my tokens grouped by table row,
// rows ascending, tokens ascending within a row. At most 3 tokens + 2 values,
// the room reserved, so the buffers stay put as the distinct ids vary.
const int32_t* upload_backward_plan(int device, const std::vector<int32_t>& ids,
                                    int64_t vocab_start, int64_t rows_local) {
  const int64_t tokens = static_cast<int64_t>(ids.size());
  if (tokens > INT32_MAX) fail("embedding_backward", "more than 2^31 - 1 tokens");
  std::vector<std::pair<int32_t, int32_t>> local;  // (row, token)
  local.reserve(ids.size());
  for (int64_t t = 0; t < tokens; ++t) {
    const int64_t row = static_cast<int64_t>(ids[t]) - vocab_start;
    if (row >= 0 && row < rows_local) {
      local.emplace_back(static_cast<int32_t>(row), static_cast<int32_t>(t));
    }
  }
  std::sort(local.begin(), local.end());
  std::vector<int32_t> rows, offsets, order;
  for (size_t k = 0; k < local.size(); ++k) {
    if (k == 0 || local[k].first != local[k - 1].first) {
      rows.push_back(local[k].first);
      offsets.push_back(static_cast<int32_t>(k));
    }
    order.push_back(local[k].second);
  }
  offsets.push_back(static_cast<int32_t>(local.size()));
  std::vector<int32_t> plan;
  plan.reserve(1 + rows.size() + offsets.size() + order.size());
  plan.push_back(static_cast<int32_t>(rows.size()));
  plan.insert(plan.end(), rows.begin(), rows.end());
  plan.insert(plan.end(), offsets.begin(), offsets.end());
  plan.insert(plan.end(), order.begin(), order.end());
  return upload_kept(device, "embedding.backward_plan", plan, static_cast<size_t>(3 * tokens + 2));
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
    gather_rows<E><<<colrow::cuda::blocks_for(tokens * d, kThreads), kThreads, 0,
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
  const int64_t feature_blocks = (d + kRowThreads - 1) / kRowThreads;
  if (feature_blocks > 65535) fail(what, "d is too large");
  // Launched even when no token falls in my rows (every block then returns):
  // the launch follows the batch's size, never its ids.
  const dim3 grid(static_cast<unsigned int>(std::min<int64_t>(tokens, kMaxRowBlocks)),
                  static_cast<unsigned int>(feature_blocks));
  with_elements(dy, [&](const auto* g) {
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
  if (x.ndim() != 2 || !x.is_contiguous() || seq < 1 || x.size(0) % seq != 0 ||
      !has_embedding_rows(table) || table.size(0) < seq || table.size(1) != x.size(1)) {
    fail(what, "x " + shape_to_string(x.shape()) +
                   " must be contiguous [tokens, d] with tokens "
                   "a multiple of seq (" +
                   std::to_string(seq) + "), table " + shape_to_string(table.shape()) +
                   " [max_positions >= seq, d]");
  }
  const int device = cuda_device_of(what, {&x, &table});
  const int64_t tokens = x.size(0), d = x.size(1);
  if (tokens * d == 0) return;
  with_element_type(what, {&x, &table}, [&](auto e) {
    using E = decltype(e);
    add_positions<E><<<colrow::cuda::blocks_for(tokens * d, kThreads), kThreads, 0,
                       colrow::cuda::compute_stream(device)>>>(elements<E>(x), elements<E>(table),
                                                               table.row_stride(), tokens, seq, d);
  });
  COLROW_CUDA_CHECK_LAUNCH();
}

void position_embedding_backward(const Tensor& dx, int64_t seq, Tensor& dtable) {
  const char* what = "position_embedding_backward";
  if (dx.ndim() != 2 || !dx.is_contiguous() || seq < 1 || dx.size(0) % seq != 0 ||
      !has_embedding_rows(dtable) || dtable.size(0) < seq || dtable.size(1) != dx.size(1)) {
    fail(what, "dx " + shape_to_string(dx.shape()) +
                   " must be contiguous [tokens, d] with tokens "
                   "a multiple of seq (" +
                   std::to_string(seq) + "), dtable " + shape_to_string(dtable.shape()) +
                   " [max_positions >= seq, d]");
  }
  const int device = cuda_device_of(what, {&dtable, &dx});
  const int64_t batch = dx.size(0) / seq, d = dx.size(1);
  if (batch * d == 0) return;
  with_elements(dx, [&](const auto* g) {
    sum_positions<<<colrow::cuda::blocks_for(seq * d, kThreads), kThreads, 0,
                    colrow::cuda::compute_stream(device)>>>(g, batch, seq, d, dtable.data(),
                                                            dtable.row_stride());
  });
  COLROW_CUDA_CHECK_LAUNCH();
}

}  // namespace colrow::kernels::cuda
