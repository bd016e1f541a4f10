// Whole-tensor reductions and scalings (see reduce.h).
#include "kernels/cpu/reduce.h"

#include "colrow/core/error.h"
#include "kernels/cpu/parallel.h"

namespace colrow::kernels::cpu {
namespace {

void require_contiguous(const Tensor& t, const char* what) {
  if (!t.is_contiguous()) {
    throw InternalError(std::string("[reduce] ") + what + ": tensor " + shape_to_string(t.shape()) +
                        " must be contiguous");
  }
}

// sum of x_i^2 over one chunk, in double, in an order set by i alone: lane
// i % kLanes, then the lanes in order. (Each x_i^2 is exact in double, so
// contracting to an FMA changes nothing; the lanes let the loop vectorize
// without -ffast-math.)
double chunk_sum_of_squares(const float* x, int64_t n) {
  constexpr int64_t kLanes = 16;
  double lane[kLanes] = {};
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes) {
    for (int64_t l = 0; l < kLanes; ++l) lane[l] += static_cast<double>(x[i + l]) * x[i + l];
  }
  for (int64_t l = 0; i + l < n; ++l) lane[l] += static_cast<double>(x[i + l]) * x[i + l];
  double sum = 0.0;
  for (int64_t l = 0; l < kLanes; ++l) sum += lane[l];
  return sum;
}

}  // namespace

double sum_of_squares(const std::vector<Tensor>& parts) {
  // Chunks of kChunkElements (parallel.h) summed in parallel, then the chunk
  // sums in order: the result depends on the values and the part lengths only.
  std::vector<int64_t> lengths;
  lengths.reserve(parts.size());
  for (const Tensor& part : parts) {
    require_contiguous(part, "sum_of_squares");
    lengths.push_back(part.numel());
  }
  const std::vector<Chunk> chunks = fixed_chunks(lengths);
  const int64_t n_chunks = static_cast<int64_t>(chunks.size());
  std::vector<double> partial(chunks.size());
  int64_t total = 0;
  for (int64_t length : lengths) total += length;
#pragma omp parallel for schedule(static) if (total > kParallelElements)
  for (int64_t c = 0; c < n_chunks; ++c) {
    const Chunk& chunk = chunks[c];
    partial[c] =
        chunk_sum_of_squares(parts[chunk.part].data() + chunk.begin, chunk.end - chunk.begin);
  }
  double sum = 0.0;
  for (double p : partial) sum += p;
  return sum;
}

void divide(Tensor& x, float divisor) {
  require_contiguous(x, "divide");
  float* p = x.data();
  const int64_t n = x.numel();
#pragma omp parallel for simd schedule(static) if (parallel : n > kParallelElements)
  for (int64_t i = 0; i < n; ++i) p[i] /= divisor;
}

}  // namespace colrow::kernels::cpu
