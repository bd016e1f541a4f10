// kernels::cuda add and add_into against kernels::cpu on the same inputs: one
// fp32 add per element on both sides, so bit for bit; odd sizes (1 .. 129000
// elements), 1-d to 3-d shapes, row-block views that start inside a buffer,
// outputs aliasing an input; InternalError on shape and contiguity errors.
#include "kernels/cuda/residual.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

#include "colrow/core/error.h"
#include "kernels/cpu/residual.h"
#include "kernels/cuda/cuda_test_helpers.h"
#include "support/gpu.h"

namespace colrow {
namespace {

using testing::random_exact;

const Shape kShapes[] = {{1}, {7, 3}, {37, 65}, {129, 1000}, {3, 5, 257}};

TEST(CudaResidualTest, AddIsBitwiseEqualToCpu) {
  COLROW_REQUIRE_GPU();
  const Device gpu = testing::test_gpu();
  for (const Shape& shape : kShapes) {
    const Tensor a = random_exact(shape, 1), b = random_exact(shape, 2);
    Tensor out = Tensor::empty(shape);
    kernels::cpu::add(a, b, out);
    Tensor out_gpu = Tensor::empty(shape, gpu);
    kernels::cuda::add(a.to(gpu), b.to(gpu), out_gpu);
    ASSERT_EQ(out_gpu.to_vector(), out.to_vector()) << shape_to_string(shape);
    // out may be an input.
    Tensor a_gpu = a.to(gpu);
    kernels::cuda::add(a_gpu, b.to(gpu), a_gpu);
    ASSERT_EQ(a_gpu.to_vector(), out.to_vector()) << "aliased " << shape_to_string(shape);
  }
}

TEST(CudaResidualTest, AddIntoIsBitwiseEqualToCpu) {
  COLROW_REQUIRE_GPU();
  const Device gpu = testing::test_gpu();
  for (const Shape& shape : kShapes) {
    const Tensor out0 = random_exact(shape, 3), a = random_exact(shape, 4);
    Tensor out = out0.clone(), out_gpu = out0.to(gpu);
    const Tensor a_gpu = a.to(gpu);
    for (int call = 0; call < 2; ++call) {  // accumulates
      kernels::cpu::add_into(out, a);
      kernels::cuda::add_into(out_gpu, a_gpu);
      ASSERT_EQ(out_gpu.to_vector(), out.to_vector()) << shape_to_string(shape) << " call " << call;
    }
  }
}

TEST(CudaResidualTest, RowBlockViews) {
  // Row blocks are contiguous views starting inside a larger buffer (an odd
  // offset, so no alignment beyond 4 bytes): only the block changes.
  COLROW_REQUIRE_GPU();
  const Device gpu = testing::test_gpu();
  const Tensor tall = random_exact({41, 65}, 5), a = random_exact({37, 65}, 6);
  Tensor tall_cpu = tall.clone(), tall_gpu = tall.to(gpu);
  Tensor block_cpu = tall_cpu.slice(0, 3, 37), block_gpu = tall_gpu.slice(0, 3, 37);
  kernels::cpu::add_into(block_cpu, a);
  kernels::cuda::add_into(block_gpu, a.to(gpu));
  EXPECT_EQ(tall_gpu.to_vector(), tall_cpu.to_vector());
}

TEST(CudaResidualTest, EmptyIsANoOp) {
  COLROW_REQUIRE_GPU();
  const Device gpu = testing::test_gpu();
  Tensor out = Tensor::empty({0, 8}, gpu);
  EXPECT_NO_THROW(kernels::cuda::add(out, out, out));
  EXPECT_NO_THROW(kernels::cuda::add_into(out, out));
}

TEST(CudaResidualTest, ShapeAndContiguityErrors) {
  COLROW_REQUIRE_GPU();
  const Device gpu = testing::test_gpu();
  const Tensor a = Tensor::zeros({4, 6}, gpu), wrong = Tensor::zeros({6, 4}, gpu);
  Tensor out = Tensor::zeros({4, 6}, gpu), out_wrong = Tensor::zeros({4, 5}, gpu);
  EXPECT_THROW(kernels::cuda::add(a, wrong, out), InternalError);
  EXPECT_THROW(kernels::cuda::add(a, a, out_wrong), InternalError);
  EXPECT_THROW(kernels::cuda::add_into(out_wrong, a), InternalError);
  Tensor wide = Tensor::zeros({4, 12}, gpu);
  Tensor block = wide.slice(1, 0, 6);  // strided
  EXPECT_THROW(kernels::cuda::add(a, a, block), InternalError);
  EXPECT_THROW(kernels::cuda::add_into(block, a), InternalError);
  // A host operand is refused rather than read as device memory.
  const Tensor host_a = Tensor::zeros({4, 6});
  EXPECT_THROW(kernels::cuda::add_into(out, host_a), InternalError);
}

}  // namespace
}  // namespace colrow
