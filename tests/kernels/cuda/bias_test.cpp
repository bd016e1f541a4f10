// gpu::add_bias and accumulate_bias_grad against kernels::cpu on the
// same inputs: add_bias bit for bit (one fp32 add per element), the gradient
// within Higham's bound on random floats and bit for bit on small integers,
// accumulation into a non-zero db, the same bits on a repeated run (no atomics),
// token counts around the 128-token chunks, column blocks of wider matrices
// (row stride > features, neighbours untouched), zero tokens, and
// InternalError on mismatched shapes.
// Built twice: on a GPU (label gpu), and with COLROW_WARP_EMULATION, where
// the same kernels run on the CPU through the warp emulation
// (emulated/bias.h), so CI checks them without a GPU.
#ifdef COLROW_WARP_EMULATION
#include "kernels/cuda/emulated/bias.h"
#else
#include "kernels/cuda/bias.h"
#endif

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "colrow/core/error.h"
#include "kernels/cpu/bias.h"
#include "kernels/cuda/cuda_test_helpers.h"
#include "support/gpu.h"

namespace colrow {
namespace {

#ifdef COLROW_WARP_EMULATION
namespace gpu = testing::emulated;
#else
namespace gpu = kernels::cuda;
#endif

using testing::higham_gamma;
using testing::random_exact;
using testing::random_integers;

std::string dims(int64_t tokens, int64_t features) {
  return "[" + std::to_string(tokens) + ", " + std::to_string(features) + "]";
}

struct Dims {
  int64_t tokens, features;
};
// Tokens 1 .. 1000 (one, several and a ragged last 128-token chunk), features
// neither multiples of 32 nor of 128.
const Dims kDims[] = {{1, 1},      {1, 3},    {7, 65},    {37, 257},
                      {129, 1000}, {300, 33}, {1000, 65}, {257, 3}};

TEST(CudaBiasTest, AddBiasIsBitwiseEqualToCpu) {
  COLROW_REQUIRE_GPU();
  const Device gpu = testing::test_gpu();
  for (const Dims& d : kDims) {
    const Tensor y0 = random_exact({d.tokens, d.features}, 1);
    const Tensor b = random_exact({d.features}, 2);
    Tensor y_cpu = y0.clone(), y_gpu = testing::copy_to(y0, gpu);
    kernels::cpu::add_bias(y_cpu, b);
    gpu::add_bias(y_gpu, testing::copy_to(b, gpu));
    ASSERT_EQ(y_gpu.to_vector(), y_cpu.to_vector()) << dims(d.tokens, d.features);
  }
}

// The 16-byte path (rows of whole vectors: 4 fp32 or 8 bf16) and the
// element path, fp32 and bf16, bit for bit: bf16 read natively, each sum
// rounded once, as on the CPU. 70001 rows are more than one launch's 65535
// grid rows, so the vector add runs in several launches.
TEST(CudaBiasTest, AddBiasVectorsAndBf16AreBitwiseEqualToCpu) {
  COLROW_REQUIRE_GPU();
  const Device gpu = testing::test_gpu();
  const Dims shapes[] = {{70001, 8}, {5, 24}, {3, 1000}, {7, 65}, {9, 4}};
  for (DType dtype : {DType::kF32, DType::kBF16}) {
    for (const Dims& d : shapes) {
      SCOPED_TRACE(std::string(dtype_name(dtype)) + " " + dims(d.tokens, d.features));
      const Tensor y0 = random_exact({d.tokens, d.features}, 11).to(dtype);
      const Tensor b = random_exact({d.features}, 12).to(dtype);
      Tensor y_cpu = y0.clone(), y_gpu = testing::copy_to(y0, gpu);
      kernels::cpu::add_bias(y_cpu, b);
      gpu::add_bias(y_gpu, testing::copy_to(b, gpu));
      ASSERT_EQ(y_gpu.to_vector(), y_cpu.to_vector());
    }
  }
}

TEST(CudaBiasTest, AddBiasOnColumnBlock) {
  // y is a rank's column block of a wider activation: only the block changes.
  COLROW_REQUIRE_GPU();
  const Device gpu = testing::test_gpu();
  const int64_t tokens = 129, width = 300, start = 37, features = 257;
  const Tensor wide = random_exact({tokens, width}, 3);
  const Tensor b = random_exact({features}, 4);
  Tensor wide_cpu = wide.clone(), wide_gpu = testing::copy_to(wide, gpu);
  Tensor y_cpu = wide_cpu.slice(-1, start, features), y_gpu = wide_gpu.slice(-1, start, features);
  ASSERT_GT(y_gpu.row_stride(), y_gpu.size(1));
  kernels::cpu::add_bias(y_cpu, b);
  gpu::add_bias(y_gpu, testing::copy_to(b, gpu));
  EXPECT_EQ(wide_gpu.to_vector(), wide_cpu.to_vector());
}

TEST(CudaBiasTest, BiasGradWithinHighamBoundOfCpuAndDeterministic) {
  // Each side sums T + 1 fp32 terms (db0 and dy[t, j] for every t) in its own
  // order, so each is within gamma_T (|db0| + sum_t |dy[t, j]|) of the exact
  // sum and the two differ by at most twice that. The CUDA order depends only
  // on the shape: a second run from the same db0 gives the same bits.
  COLROW_REQUIRE_GPU();
  const Device gpu = testing::test_gpu();
  for (const Dims& d : kDims) {
    const Tensor dy = random_exact({d.tokens, d.features}, 5);
    const Tensor db0 = random_exact({d.features}, 6);
    Tensor db_cpu = db0.clone(), db_gpu = testing::copy_to(db0, gpu),
           db_again = testing::copy_to(db0, gpu);
    const Tensor dy_gpu = testing::copy_to(dy, gpu);
    kernels::cpu::accumulate_bias_grad(dy, db_cpu);
    gpu::accumulate_bias_grad(dy_gpu, db_gpu);
    gpu::accumulate_bias_grad(dy_gpu, db_again);
    const std::vector<float> got = db_gpu.to_vector(), want = db_cpu.to_vector();
    ASSERT_EQ(db_again.to_vector(), got) << "not deterministic " << dims(d.tokens, d.features);
    for (int64_t j = 0; j < d.features; ++j) {
      double abs_sum = std::fabs(db0.data()[j]);
      for (int64_t t = 0; t < d.tokens; ++t) abs_sum += std::fabs(dy(t, j));
      ASSERT_NEAR(got[j], want[j], 2.0 * higham_gamma(d.tokens) * abs_sum)
          << dims(d.tokens, d.features) << " at " << j;
    }
  }
}

TEST(CudaBiasTest, BiasGradOfSmallIntegersIsBitwiseEqualToCpu) {
  // Integers |.| <= 8 over <= 1000 tokens: every partial sum is an integer
  // below 2^24, exact in any order. Two calls accumulate.
  COLROW_REQUIRE_GPU();
  const Device gpu = testing::test_gpu();
  for (const Dims& d : kDims) {
    const Tensor dy = random_integers({d.tokens, d.features}, 7, 8);
    const Tensor db0 = random_integers({d.features}, 8, 8);
    Tensor db_cpu = db0.clone(), db_gpu = testing::copy_to(db0, gpu);
    const Tensor dy_gpu = testing::copy_to(dy, gpu);
    for (int call = 0; call < 2; ++call) {
      kernels::cpu::accumulate_bias_grad(dy, db_cpu);
      gpu::accumulate_bias_grad(dy_gpu, db_gpu);
      ASSERT_EQ(db_gpu.to_vector(), db_cpu.to_vector())
          << "call " << call << " " << dims(d.tokens, d.features);
    }
  }
}

TEST(CudaBiasTest, BiasGradOfColumnBlock) {
  // dy is a column block of a wider gradient: the sums follow the row stride
  // and never read the neighbouring columns.
  COLROW_REQUIRE_GPU();
  const Device gpu = testing::test_gpu();
  for (const Dims& d : {Dims{7, 3}, Dims{37, 257}, Dims{300, 65}}) {
    const int64_t width = d.features + 11, start = 6;
    const Tensor wide = random_integers({d.tokens, width}, 9, 8);
    const Tensor dy = wide.slice(-1, start, d.features);
    const Tensor dy_gpu = testing::copy_to(wide, gpu).slice(-1, start, d.features);
    ASSERT_GT(dy_gpu.row_stride(), dy_gpu.size(1));
    Tensor db_cpu = Tensor::zeros({d.features}), db_gpu = Tensor::zeros({d.features}, gpu);
    kernels::cpu::accumulate_bias_grad(dy, db_cpu);
    gpu::accumulate_bias_grad(dy_gpu, db_gpu);
    ASSERT_EQ(db_gpu.to_vector(), db_cpu.to_vector()) << dims(d.tokens, d.features);
  }
}

TEST(CudaBiasTest, BiasGradReadInVectorsGivesTheScalarReadsBits) {
  // Where dy's rows allow it, stage 1 reads 16 bytes of them at a time; each
  // feature's sum keeps its order (column_sums.cuh), so the bits equal those
  // of one element at a time, here from dy as a column block one element in
  // (rows off 16 bytes), in fp32 and bf16, tokens around the 128-token chunks.
  COLROW_REQUIRE_GPU();
  const Device gpu = testing::test_gpu();
  for (DType dtype : {DType::kF32, DType::kBF16}) {
    for (const Dims& d : {Dims{1, 8}, Dims{129, 1000}, Dims{257, 264}, Dims{1000, 40}}) {
      SCOPED_TRACE(std::string(dtype_name(dtype)) + " " + dims(d.tokens, d.features));
      const Tensor dy = testing::copy_to(random_exact({d.tokens, d.features}, 21).to(dtype), gpu);
      Tensor wide = Tensor::zeros({d.tokens, d.features + 1}, gpu, dtype);
      Tensor dy_off = wide.slice(1, 1, d.features);
      dy_off.copy_from(dy);
      const Tensor db0 = testing::copy_to(random_exact({d.features}, 22), gpu);
      Tensor db_vec = db0.clone(), db_one = db0.clone();
      gpu::accumulate_bias_grad(dy, db_vec);
      gpu::accumulate_bias_grad(dy_off, db_one);
      EXPECT_EQ(db_vec.to_vector(), db_one.to_vector());
      EXPECT_NE(db_vec.to_vector(), db0.to_vector());  // it did sum
    }
  }
}

TEST(CudaBiasTest, ZeroTokens) {
  COLROW_REQUIRE_GPU();
  const Device gpu = testing::test_gpu();
  Tensor y = Tensor::empty({0, 6}, gpu);
  EXPECT_NO_THROW(gpu::add_bias(y, Tensor::full({6}, 1.0f, gpu)));
  Tensor db = Tensor::full({6}, 2.5f, gpu);
  gpu::accumulate_bias_grad(y, db);
  EXPECT_EQ(db.to_vector(), std::vector<float>(6, 2.5f));
}

TEST(CudaBiasTest, ShapeMismatchThrows) {
  COLROW_REQUIRE_GPU();
  const Device gpu = testing::test_gpu();
  Tensor y = Tensor::zeros({4, 6}, gpu);
  Tensor short_bias = Tensor::zeros({5}, gpu), matrix_bias = Tensor::zeros({1, 6}, gpu);
  Tensor flat = Tensor::zeros({24}, gpu), cube = Tensor::zeros({2, 2, 6}, gpu);
  Tensor b = Tensor::zeros({6}, gpu);
  EXPECT_THROW(gpu::add_bias(y, short_bias), InternalError);
  EXPECT_THROW(gpu::add_bias(y, matrix_bias), InternalError);
  EXPECT_THROW(gpu::add_bias(flat, b), InternalError);
  EXPECT_THROW(gpu::add_bias(cube, b), InternalError);
  EXPECT_THROW(gpu::accumulate_bias_grad(y, short_bias), InternalError);
  EXPECT_THROW(gpu::accumulate_bias_grad(y, matrix_bias), InternalError);
  EXPECT_THROW(gpu::accumulate_bias_grad(cube, b), InternalError);
  // A host bias is refused rather than read as device memory.
  if (!testing::kGpuIsHost) {
    Tensor host_b = Tensor::zeros({6});
    EXPECT_THROW(gpu::add_bias(y, host_b), InternalError);
  }
  // A failed call leaves its outputs alone.
  EXPECT_EQ(y.to_vector(), std::vector<float>(24, 0.0f));
}

}  // namespace
}  // namespace colrow
