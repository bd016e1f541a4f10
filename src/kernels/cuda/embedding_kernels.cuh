// The embedding kernels on the GPU (embedding.h; launched by embedding.cu):
// lookups and their gradients. The vocabulary gradient
// is a scatter-add with repeated ids: the host (which holds the ids) groups
// the local tokens by table row, keeping token order within each row, and one
// thread per (row, feature) adds that row's tokens in order. Position
// gradients: one thread per (position, feature) adds the sequences in order.
// Both are the CPU's additions in the CPU's order, so the bits match it and
// repeat from run to run; no atomics. The table, y, x and the gradients dy
// and dx are fp32 or bf16 (E, kernels/elements.h), bf16 read natively and
// each output rounded once (a gather copies the bits); dtable stays fp32.
// A host compiler takes this header too: tests/kernels/cuda/embedding_test
// runs these kernels on the CPU through the warp emulation as well as on a
// GPU.
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <climits>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "colrow/core/bfloat16.h"
#include "colrow/core/error.h"
#include "colrow/core/tensor.h"
#include "core/cuda/cuda_context.h"
#include "kernels/checks/embedding.h"

namespace colrow::kernels::cuda::embedding_kernels {

constexpr int kThreads = 256;
constexpr int kRowThreads = 128;  // features per block in the scatter-add
// Blocks along the table rows of the scatter-add: each takes rows u, u +
// kMaxRowBlocks, ... (a batch of B x T tokens has at most that many rows).
constexpr int64_t kMaxRowBlocks = 4096;

[[noreturn]] inline void fail(const char* what, const std::string& detail) {
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

// The scatter-add's plan (scatter_add_rows): my tokens grouped by table row,
// rows ascending, tokens ascending within a row.
inline std::vector<int32_t> backward_plan(const std::vector<int32_t>& ids, int64_t vocab_start,
                                          int64_t rows_local) {
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
  return plan;
}

// The scatter-add's grid: table rows over x (at most kMaxRowBlocks, then
// each block takes several), blocks of features over y. It follows the
// batch's size, never its ids, so a CUDA graph of it serves every batch.
inline dim3 scatter_grid(int64_t tokens, int64_t d) {
  const int64_t feature_blocks = (d + kRowThreads - 1) / kRowThreads;
  if (feature_blocks > 65535) fail("embedding_backward", "d is too large");
  return dim3(static_cast<unsigned int>(std::min<int64_t>(tokens, kMaxRowBlocks)),
              static_cast<unsigned int>(feature_blocks));
}

// The position embedding's operands (x or dx, table or dtable): x contiguous
// [tokens, d] with tokens a multiple of seq, the table [>= seq, d] read
// through its row stride.
inline void check_positions(const char* what, const char* x_name, const Tensor& x,
                            const char* table_name, const Tensor& table, int64_t seq) {
  if (x.ndim() != 2 || !x.is_contiguous() || seq < 1 || x.size(0) % seq != 0 ||
      !has_embedding_rows(table) || table.size(0) < seq || table.size(1) != x.size(1)) {
    fail(what, std::string(x_name) + " " + shape_to_string(x.shape()) +
                   " must be contiguous [tokens, d] with tokens a multiple of seq (" +
                   std::to_string(seq) + "), " + table_name + " " + shape_to_string(table.shape()) +
                   " [max_positions >= seq, d]");
  }
}

}  // namespace colrow::kernels::cuda::embedding_kernels
