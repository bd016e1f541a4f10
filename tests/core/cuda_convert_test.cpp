// Tensor::convert_from on a GPU (core/cuda/device_runtime.cu's kernels)
// against the CPU's: the same bits for every element both ways, on odd sizes
// and on inputs that exercise ties, NaN payloads, infinities, overflow and
// subnormals; the same dtype copies; errors as on the CPU.
#include "colrow/core/tensor.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "colrow/core/error.h"
#include "kernels/cuda/cuda_test_helpers.h"
#include "support/gpu.h"

namespace colrow {
namespace {

// Random bit patterns: every class of fp32 value, NaNs with payloads included.
Tensor random_bits(int64_t n, uint32_t seed) {
  std::mt19937 gen(seed);
  std::vector<float> v(static_cast<size_t>(n));
  for (float& x : v) {
    const uint32_t bits = gen();
    std::memcpy(&x, &bits, sizeof x);
  }
  return Tensor::from_vector({n}, v);
}

std::vector<uint16_t> bits_of(const Tensor& bf16) {
  const Tensor host = bf16.to(Device::cpu());
  return std::vector<uint16_t>(host.bf16_data(), host.bf16_data() + host.numel());
}

TEST(CudaTensorConvertTest, BothWaysBitwiseEqualToCpu) {
  COLROW_REQUIRE_GPU();
  const Device gpu = testing::test_gpu();
  for (int64_t n : {1, 255, 257, 100003}) {
    const Tensor src = random_bits(n, static_cast<uint32_t>(n));
    Tensor half = Tensor::empty({n}, Device::cpu(), DType::kBF16);
    half.convert_from(src);
    Tensor half_gpu = Tensor::empty({n}, gpu, DType::kBF16);
    half_gpu.convert_from(src.to(gpu));
    ASSERT_EQ(bits_of(half_gpu), bits_of(half)) << n;
    Tensor back = Tensor::empty({n}), back_gpu = Tensor::empty({n}, gpu);
    back.convert_from(half);
    back_gpu.convert_from(half_gpu);
    ASSERT_TRUE(testing::same_bits(back_gpu, back)) << n;
  }
}

TEST(CudaTensorConvertTest, SameDtypeCopiesAndErrors) {
  COLROW_REQUIRE_GPU();
  const Device gpu = testing::test_gpu();
  const Tensor src = random_bits(64, 3).view({8, 8}).to(gpu);
  Tensor dst = Tensor::empty({8, 8}, gpu);
  dst.convert_from(src);
  EXPECT_TRUE(testing::same_bits(dst, src));
  Tensor wrong = Tensor::empty({4, 16}, gpu, DType::kBF16);
  EXPECT_THROW(wrong.convert_from(src), InternalError);
  Tensor host = Tensor::empty({8, 8}, Device::cpu(), DType::kBF16);
  EXPECT_THROW(host.convert_from(src), InternalError);
}

}  // namespace
}  // namespace colrow
