// Embedding gathers and deterministic scatter-adds (see embedding.h). Tables
// and activations are fp32 or bf16, read natively; gradients are fp32.
#include "kernels/cpu/embedding.h"

#include <algorithm>
#include <cstring>
#include <utility>
#include <vector>

#include "colrow/core/bfloat16.h"
#include "colrow/core/error.h"
#include "kernels/checks/embedding.h"
#include "kernels/cpu/parallel.h"
#include "kernels/elements.h"

namespace colrow::kernels::cpu {
namespace {

// Features per task in the gradient scatter-adds: a long stretch of each row,
// and still one task per (id or position, block). Sets no sum order.
constexpr int64_t kFeatureBlock = 256;

}  // namespace

void embedding_forward(const std::vector<int32_t>& ids, int64_t vocab_start,
                       const Tensor& table_local, Tensor& y) {
  const int64_t tokens = static_cast<int64_t>(ids.size());
  check_embedding_forward(table_local, y, tokens);
  const int64_t rows = table_local.size(0), d = table_local.size(1);
  const int64_t ld_table = table_local.row_stride(), ld_y = y.row_stride();
  with_element_type("embedding_forward", {&table_local, &y}, [&](auto e) {
    using E = decltype(e);
    const E* table = elements<E>(table_local);
    E* out = elements<E>(y);
#pragma omp parallel for schedule(static) if (tokens * d > kParallelElements)
    for (int64_t t = 0; t < tokens; ++t) {
      const int64_t row = ids[t] - vocab_start;
      if (row >= 0 && row < rows) {
        std::memcpy(out + t * ld_y, table + row * ld_table, d * sizeof(E));
      } else {
        std::memset(out + t * ld_y, 0, d * sizeof(E));  // +0 in either dtype
      }
    }
  });
}

void embedding_backward(const std::vector<int32_t>& ids, int64_t vocab_start, const Tensor& dy,
                        Tensor& dtable_local) {
  const int64_t tokens = static_cast<int64_t>(ids.size());
  check_embedding_backward(dy, dtable_local, tokens);
  const int64_t rows = dtable_local.size(0), d = dtable_local.size(1);
  const int64_t ld = dy.row_stride(), ld_table = dtable_local.row_stride();
  float* dw = dtable_local.data();
  // The local tokens grouped by table row, each row's tokens in token order:
  // one task per (row, feature block) adds its tokens in that order, so repeated
  // ids never race and the sum order is the token order whatever the thread
  // count, with as many tasks as distinct ids (not just feature blocks).
  std::vector<std::pair<int64_t, int64_t>> by_row;  // (row, token), sorted
  by_row.reserve(ids.size());
  for (int64_t t = 0; t < tokens; ++t) {
    const int64_t row = ids[t] - vocab_start;
    if (row >= 0 && row < rows) by_row.emplace_back(row, t);
  }
  std::sort(by_row.begin(), by_row.end());
  std::vector<int64_t> run_starts;  // runs of one row in by_row, then the end
  for (size_t i = 0; i < by_row.size(); ++i) {
    if (i == 0 || by_row[i].first != by_row[i - 1].first) run_starts.push_back(i);
  }
  run_starts.push_back(static_cast<int64_t>(by_row.size()));
  const int64_t runs = static_cast<int64_t>(run_starts.size()) - 1;
  const int64_t col_blocks = ceil_div(d, kFeatureBlock);
  with_elements(dy, [&](const auto* grad) {
  // Round-robin over tasks: a frequent id's feature blocks go to different threads.
#pragma omp parallel for schedule(static, 1) if (tokens * d > kParallelElements)
    for (int64_t task = 0; task < runs * col_blocks; ++task) {
      const int64_t run = task / col_blocks, cb = task % col_blocks;
      const int64_t j0 = cb * kFeatureBlock, j1 = std::min(d, j0 + kFeatureBlock);
      float* dst = dw + by_row[run_starts[run]].first * ld_table;
      for (int64_t i = run_starts[run]; i < run_starts[run + 1]; ++i) {
        const auto* src = grad + by_row[i].second * ld;
#pragma omp simd
        for (int64_t j = j0; j < j1; ++j) dst[j] += widen(src[j]);
      }
    }
  });
}

void position_embedding_forward(Tensor& x, const Tensor& table, int64_t seq) {
  const int64_t d = x.size(1), tokens = x.size(0);
  if (!x.is_contiguous() || !table.is_contiguous() || table.size(1) != d || seq < 1 ||
      table.size(0) < seq || tokens % seq != 0) {
    throw InternalError("[position_embedding] x " + shape_to_string(x.shape()) + " and table " +
                        shape_to_string(table.shape()) +
                        " must be contiguous [tokens, d] and [>= seq, d], tokens a multiple of "
                        "seq (" +
                        std::to_string(seq) + ")");
  }
  with_element_type("position_embedding_forward", {&x, &table}, [&](auto e) {
    using E = decltype(e);
    const E* rows = elements<E>(table);
    E* out = elements<E>(x);
#pragma omp parallel for schedule(static) if (tokens * d > kParallelElements)
    for (int64_t token = 0; token < tokens; ++token) {
      const E* row = rows + (token % seq) * d;
      E* dst = out + token * d;
#pragma omp simd
      for (int64_t j = 0; j < d; ++j) dst[j] = narrow<E>(widen(dst[j]) + widen(row[j]));
    }
  });
}

void position_embedding_backward(const Tensor& dx, int64_t seq, Tensor& dtable) {
  const int64_t d = dx.size(1), tokens = dx.size(0);
  if (!dx.is_contiguous() || !dtable.is_contiguous() || dtable.size(1) != d || seq < 1 ||
      dtable.size(0) < seq || tokens % seq != 0) {
    throw InternalError("[position_embedding] dx " + shape_to_string(dx.shape()) + " and dtable " +
                        shape_to_string(dtable.shape()) +
                        " must be contiguous [tokens, d] and [>= seq, d], tokens a multiple of "
                        "seq (" +
                        std::to_string(seq) + ")");
  }
  const int64_t batch = tokens / seq;
  float* grad = dtable.data();
  // Parallel over (position, feature block): each element is owned by one
  // thread, and sums its sequences in order.
  const int64_t col_blocks = ceil_div(d, kFeatureBlock);
  with_elements(dx, [&](const auto* in) {
#pragma omp parallel for schedule(static) if (tokens * d > kParallelElements)
    for (int64_t task = 0; task < seq * col_blocks; ++task) {
      const int64_t t = task / col_blocks, cb = task % col_blocks;
      const int64_t j0 = cb * kFeatureBlock, j1 = std::min(d, j0 + kFeatureBlock);
      float* row = grad + t * d;
      for (int64_t b = 0; b < batch; ++b) {
        const auto* src = in + (b * seq + t) * d;
#pragma omp simd
        for (int64_t j = j0; j < j1; ++j) row[j] += widen(src[j]);
      }
    }
  });
}

}  // namespace colrow::kernels::cpu
