// Bias add and bias-gradient column sums, parallel over tokens / feature blocks.
#include "kernels/cpu/bias.h"

#include <algorithm>
#include <vector>

#include "kernels/checks/bias.h"
#include "kernels/cpu/parallel.h"

namespace colrow::kernels::cpu {
namespace {

constexpr int64_t kColumnBlock = 256;  // features per task in the gradient sum

}  // namespace

void add_bias(Tensor& y, const Tensor& b) {
  check_bias(y, b, "add_bias");
  const int64_t tokens = y.size(0), features = y.size(1), ld = y.row_stride();
  float* out = y.data();
  const float* bias = b.data();
#pragma omp parallel for schedule(static) if (tokens * features > kParallelElements)
  for (int64_t t = 0; t < tokens; ++t) {
    float* row = out + t * ld;
#pragma omp simd
    for (int64_t j = 0; j < features; ++j) row[j] += bias[j];
  }
}

void accumulate_bias_grad(const Tensor& dy, Tensor& db) {
  check_bias(dy, db, "accumulate_bias_grad");
  const int64_t tokens = dy.size(0), features = dy.size(1), ld = dy.row_stride();
  const float* grad = dy.data();
  float* out = db.data();
  const int64_t blocks = (features + kColumnBlock - 1) / kColumnBlock;
  // Each task owns a block of features and walks every token: no shared writes.
#pragma omp parallel for schedule(static) if (tokens * features > kParallelElements)
  for (int64_t blk = 0; blk < blocks; ++blk) {
    const int64_t j0 = blk * kColumnBlock, j1 = std::min(features, j0 + kColumnBlock);
    float sum[kColumnBlock] = {};
    for (int64_t t = 0; t < tokens; ++t) {
      const float* row = grad + t * ld;
#pragma omp simd
      for (int64_t j = j0; j < j1; ++j) sum[j - j0] += row[j];
    }
    for (int64_t j = j0; j < j1; ++j) out[j] += sum[j - j0];
  }
}

}  // namespace colrow::kernels::cpu
