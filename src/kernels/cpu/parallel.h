// How the CPU kernels split their work over OpenMP threads. Two rules:
//   - below kParallelElements elements of work (core/parallel_threshold.h),
//     OpenMP's fork and join cost more than the threads save;
//   - every sum is split by the shape of the data, never by the thread count
//     or the schedule: fixed-size chunks and row blocks, partial sums added in
//     chunk / block order. The same inputs give the same bits on 1 thread or 16.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <utility>
#include <vector>
#if defined(_OPENMP)
#include <omp.h>
#endif

#include "core/parallel_threshold.h"

namespace colrow::kernels::cpu {

using colrow::kParallelElements;

// Rows (tokens) per block when a kernel sums over rows (bias and norm parameter
// gradients): a partial sum per block, then the partials in block order. Up to
// this many tokens (a short sequence, a small batch) take one block and sum in
// plain token order.
constexpr int64_t kRowBlock = 256;
// Columns per task in those sums: at most a kernel's own width (what streams
// its rows fastest), halved down to kColumnBlockMin while the tasks are fewer
// than the threads. Each column is summed by one task, so the width sets the
// parallelism, never the order.
constexpr int64_t kColumnBlockMin = 16;
// Elements per chunk of a long flat reduction (sum_of_squares) or update
// (AdamW): 256 KiB of fp32, enough to hide a task's cost, and ~1500 tasks for a
// 100M-parameter gradient.
constexpr int64_t kChunkElements = int64_t{1} << 16;
// Elements per task of an element-wise loop whose vector and scalar code round
// differently (libmvec's expf / tanhf under -ffast-math): a multiple of every
// vector width, so the code an element runs depends on its index alone.
constexpr int64_t kElementBlock = int64_t{1} << 12;
// Query rows per block in attention (training and the KV cache): the GEMMs of
// query block [r0, r1) read keys [0, r1) only, so about kQueryBlock / (2 T)
// of the masked triangle is computed, not half of it. Also the unit of
// parallel work within a head, and the key block of attention's backward.
constexpr int64_t kQueryBlock = 64;
// Vocabulary columns per task in the cross-entropy: a few tokens over a large
// vocabulary still make many tasks, and at most this many logits are summed
// in one chain before the chunks' partials are added in order.
constexpr int64_t kVocabChunk = 8192;

constexpr int64_t ceil_div(int64_t a, int64_t b) {
  return (a + b - 1) / b;
}

// [begin, end) of part `part`: one chunk of a list of flat arrays.
struct Chunk {
  size_t part;
  int64_t begin, end;
};

// The arrays of the given lengths cut into chunks of kChunkElements, in array
// order then element order (an array's last chunk may be shorter).
inline std::vector<Chunk> fixed_chunks(const std::vector<int64_t>& lengths) {
  std::vector<Chunk> chunks;
  for (size_t p = 0; p < lengths.size(); ++p) {
    for (int64_t i = 0; i < lengths[p]; i += kChunkElements) {
      chunks.push_back({p, i, std::min(lengths[p], i + kChunkElements)});
    }
  }
  return chunks;
}

// The helpers below carry OpenMP pragmas: they exist in the kernels, which are
// built with OpenMP; tests, built without, include this header for the constants.
#if defined(_OPENMP)

// The sum over j in [0, n) of term(j), in double: element j goes to lane
// j % kSumLanes in order, then the lanes are added in order. One order for
// either element type and any vector width (an `omp simd reduction` lets the
// vectorizer pick its lanes from the element type's width, so fp32 and bf16
// rows, or two machines, would sum differently). Row sums of the norms and
// the cross-entropy.
constexpr int kSumLanes = 8;
template <typename Term>
double lane_sum(int64_t n, Term&& term) {
  double lanes[kSumLanes] = {};
  int64_t j = 0;
  for (; j + kSumLanes <= n; j += kSumLanes) {
#pragma omp simd
    for (int k = 0; k < kSumLanes; ++k) lanes[k] += term(j + k);
  }
  for (int k = 0; j + k < n; ++k) lanes[k] += term(j + k);
  double sum = 0.0;
  for (int k = 0; k < kSumLanes; ++k) sum += lanes[k];
  return sum;
}

// Two such sums in one pass: terms(j) returns {a_j, b_j}; each sum runs in
// lane_sum's order, so the bits are those of two lane_sum calls.
template <typename Terms>
std::pair<double, double> lane_sums(int64_t n, Terms&& terms) {
  double a[kSumLanes] = {}, b[kSumLanes] = {};
  int64_t j = 0;
  for (; j + kSumLanes <= n; j += kSumLanes) {
#pragma omp simd
    for (int k = 0; k < kSumLanes; ++k) {
      const std::pair<double, double> t = terms(j + k);
      a[k] += t.first;
      b[k] += t.second;
    }
  }
  for (int k = 0; j + k < n; ++k) {
    const std::pair<double, double> t = terms(j + k);
    a[k] += t.first;
    b[k] += t.second;
  }
  double sum_a = 0.0, sum_b = 0.0;
  for (int k = 0; k < kSumLanes; ++k) {
    sum_a += a[k];
    sum_b += b[k];
  }
  return {sum_a, sum_b};
}

// body(i0, i1) over [0, n) in blocks of kElementBlock, in parallel above
// kParallelElements.
template <typename Body>
void for_each_element_block(int64_t n, Body&& body) {
  const int64_t blocks = ceil_div(n, kElementBlock);
#pragma omp parallel for schedule(static) if (n > kParallelElements)
  for (int64_t b = 0; b < blocks; ++b) {
    body(b * kElementBlock, std::min(n, (b + 1) * kElementBlock));
  }
}

// body(r, i0, i1) over columns [i0, i1) of each row r < rows, in blocks of at
// most kElementBlock columns, in parallel above kParallelElements elements.
// One row is for_each_element_block's blocks.
template <typename Body>
void for_each_row_block(int64_t rows, int64_t cols, Body&& body) {
  const int64_t per_row = ceil_div(cols, kElementBlock);
#pragma omp parallel for schedule(static) if (rows * cols > kParallelElements)
  for (int64_t b = 0; b < rows * per_row; ++b) {
    const int64_t r = b / per_row, i0 = (b % per_row) * kElementBlock;
    body(r, i0, std::min(cols, i0 + kElementBlock));
  }
}

// Column sums over rows in the fixed order of kRowBlock: kSums sums per column,
// accumulated in Acc, in column blocks of kColumnBlockMin..kWidth columns (a
// compile-time bound, so that the kernel's loops unroll).
//   sums(r0, r1, j0, j1, out, ld): writes the sums of rows [r0, r1) for columns
//     [j0, j1) to out[s * ld + (j - j0)], s < kSums, each summed from zero in
//     row order.
//   finish(j0, j1, total, ld): the totals, total[s * ld + (j - j0)].
// One row block: each column block's sums are the totals, as a plain loop over
// rows would give. More: one task per (row block, column block) writes its
// sums into scratch, then each column adds them in row-block order.
template <int64_t kWidth, typename Acc, int kSums, typename Sums, typename Finish>
void column_sums(int64_t rows, int64_t cols, Sums&& sums, Finish&& finish) {
  const int64_t row_blocks = ceil_div(rows, kRowBlock);
  const bool parallel = rows * cols > kParallelElements;
  // Wide column blocks stream each row best; narrower ones only where the
  // tasks would be fewer than the threads. The width never changes the order.
  int64_t width = kWidth;
  while (parallel && width > kColumnBlockMin &&
         row_blocks * ceil_div(cols, width) < omp_get_max_threads()) {
    width /= 2;
  }
  const int64_t col_blocks = ceil_div(cols, width);
  if (row_blocks <= 1) {
#pragma omp parallel for schedule(static) if (parallel)
    for (int64_t cb = 0; cb < col_blocks; ++cb) {
      const int64_t j0 = cb * width, j1 = std::min(cols, j0 + width);
      Acc total[kSums * kWidth];
      sums(0, rows, j0, j1, total, kWidth);
      finish(j0, j1, static_cast<const Acc*>(total), kWidth);
    }
    return;
  }
  // partial[rb][s][j]: the sums of row block rb.
  const int64_t ld = cols, block_size = kSums * cols;
  std::vector<Acc> partial(static_cast<size_t>(row_blocks * block_size));
  Acc* scratch = partial.data();
#pragma omp parallel if (parallel)
  {
    // Column block major: a thread's static share walks whole columns, which
    // streams memory better than whole row blocks (measured).
#pragma omp for schedule(static)
    for (int64_t task = 0; task < row_blocks * col_blocks; ++task) {
      const int64_t cb = task / row_blocks, rb = task % row_blocks;
      const int64_t r0 = rb * kRowBlock, r1 = std::min(rows, r0 + kRowBlock);
      const int64_t j0 = cb * width, j1 = std::min(cols, j0 + width);
      sums(r0, r1, j0, j1, scratch + rb * block_size + j0, ld);
    }
#pragma omp for schedule(static)
    for (int64_t cb = 0; cb < col_blocks; ++cb) {
      const int64_t j0 = cb * width, j1 = std::min(cols, j0 + width);
      Acc* total = scratch + j0;  // block 0's sums become the totals
      for (int64_t rb = 1; rb < row_blocks; ++rb) {
        const Acc* part = scratch + rb * block_size + j0;
        for (int64_t s = 0; s < kSums; ++s) {
#pragma omp simd
          for (int64_t j = 0; j < j1 - j0; ++j) total[s * ld + j] += part[s * ld + j];
        }
      }
      finish(j0, j1, static_cast<const Acc*>(total), ld);
    }
  }
}

#endif  // _OPENMP

}  // namespace colrow::kernels::cpu
