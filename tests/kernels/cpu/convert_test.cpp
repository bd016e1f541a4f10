// kernels::cpu::convert: fp32 -> bf16 equals core/bfloat16.h's rounding per
// element (itself tested against a reference in core/bfloat16_test), on sizes
// below and above the parallel threshold and through a tie, NaN, infinity and
// overflow; bf16 -> fp32 is exact, so the round trip gives back a bf16-exact
// input bit for bit; the same dtype copies; shape and contiguity errors.
#include "kernels/cpu/convert.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "colrow/core/bfloat16.h"
#include "colrow/core/error.h"

namespace colrow {
namespace {

std::vector<float> random_values(int64_t n, uint32_t seed) {
  std::mt19937 gen(seed);
  std::normal_distribution<float> normal(0.0f, 3.0f);
  std::vector<float> v(static_cast<size_t>(n));
  for (float& x : v) x = normal(gen);
  return v;
}

TEST(CpuConvertTest, ToBf16RoundsEachElement) {
  for (int64_t n : {1, 7, 1000, 300001}) {  // the last one runs in parallel
    std::vector<float> v = random_values(n, static_cast<uint32_t>(n));
    v[0] = 1.0f + 0x1p-8f;  // a tie
    if (n > 4) {
      v[1] = std::numeric_limits<float>::quiet_NaN();
      v[2] = -std::numeric_limits<float>::infinity();
      v[3] = std::numeric_limits<float>::max();  // overflows to infinity
    }
    const Tensor src = Tensor::from_vector({n}, v);
    Tensor dst = Tensor::empty({n}, Device::cpu(), DType::kBF16);
    kernels::cpu::convert(src, dst);
    for (int64_t i = 0; i < n; ++i) {
      ASSERT_EQ(dst.bf16_data()[i], float_to_bf16(v[i])) << "n " << n << " i " << i;
    }
    EXPECT_EQ(bf16_to_float(dst.bf16_data()[0]), 1.0f);
  }
}

TEST(CpuConvertTest, RoundTripIsExactForBf16Values) {
  const int64_t n = 4099;
  std::vector<float> v = random_values(n, 11);
  for (float& x : v) x = bf16_to_float(float_to_bf16(x));  // bf16-exact
  const Tensor src = Tensor::from_vector({n}, v);
  Tensor half = Tensor::empty({n}, Device::cpu(), DType::kBF16);
  Tensor back = Tensor::empty({n});
  kernels::cpu::convert(src, half);
  kernels::cpu::convert(half, back);
  ASSERT_EQ(std::memcmp(back.data(), src.data(), static_cast<size_t>(src.bytes())), 0);
}

TEST(CpuConvertTest, SameDtypeCopies) {
  const Tensor src = Tensor::from_vector({2, 3}, {1, 2, 3, 4, 5, 6});
  Tensor dst = Tensor::zeros({2, 3});
  kernels::cpu::convert(src, dst);
  EXPECT_EQ(dst.to_vector(), src.to_vector());
}

TEST(CpuConvertTest, ShapeAndContiguityErrors) {
  const Tensor src = Tensor::zeros({4, 6});
  Tensor wrong = Tensor::empty({6, 4}, Device::cpu(), DType::kBF16);
  EXPECT_THROW(kernels::cpu::convert(src, wrong), InternalError);
  Tensor wide = Tensor::empty({4, 12}, Device::cpu(), DType::kBF16);
  Tensor block = wide.slice(1, 0, 6);
  EXPECT_THROW(kernels::cpu::convert(src, block), InternalError);
}

}  // namespace
}  // namespace colrow
