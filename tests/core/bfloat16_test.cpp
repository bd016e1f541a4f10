// bf16 conversions against a reference that does not share their bit tricks:
// the two bf16 neighbours of x found by truncation, the nearer one chosen in
// double arithmetic, ties to the one with an even last mantissa bit. Covers
// exact values, ties both ways, the carry into the exponent, overflow to
// infinity, subnormals, signed zeros, infinities and NaN, then 2^20 random
// bit patterns.
#include "colrow/core/bfloat16.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>

namespace colrow {
namespace {

float from_bits(uint32_t bits) {
  float f;
  std::memcpy(&f, &bits, sizeof f);
  return f;
}

uint32_t to_bits(float f) {
  uint32_t bits;
  std::memcpy(&bits, &f, sizeof bits);
  return bits;
}

// Nearest bf16 to finite x, ties to even, as a float.
float reference_round(float x) {
  const uint32_t bits = to_bits(x);
  const uint32_t down = bits & 0xffff0000u;  // toward zero
  const float below = from_bits(down);
  if (below == x) return x;
  // The next bf16 away from zero: past the largest finite one its bits are
  // infinity's, and the value the format would have there is 2^128, which
  // puts the rounding point to infinity at the midpoint between them.
  const float above = from_bits(down + 0x10000u);
  const double above_value = std::isinf(above) ? std::copysign(std::ldexp(1.0, 128), x) : above;
  const double gap_below = std::fabs(static_cast<double>(x) - below);
  const double gap_above = std::fabs(above_value - x);
  if (gap_below < gap_above) return below;
  if (gap_below > gap_above) return above;
  return ((down >> 16) & 1u) == 0 ? below : above;
}

TEST(BFloat16Test, WideningIsExactAndRoundTrips) {
  for (uint32_t h = 0; h < 0x10000u; ++h) {
    const float f = bf16_to_float(static_cast<uint16_t>(h));
    EXPECT_EQ(to_bits(f), h << 16);
    if (!std::isnan(f)) {
      EXPECT_EQ(float_to_bf16(f), h) << std::hex << h;
    }
  }
}

TEST(BFloat16Test, RoundsToNearestTiesToEven) {
  EXPECT_EQ(bf16_to_float(float_to_bf16(1.0f)), 1.0f);
  // 1 + 2^-8 lies halfway between 1 and 1 + 2^-7: even is 1.
  EXPECT_EQ(bf16_to_float(float_to_bf16(1.0f + 0x1p-8f)), 1.0f);
  // 1 + 3 * 2^-8 lies halfway between 1 + 2^-7 and 1 + 2^-6: even is 1 + 2^-6.
  EXPECT_EQ(bf16_to_float(float_to_bf16(1.0f + 3 * 0x1p-8f)), 1.0f + 0x1p-6f);
  // Just above a tie rounds up; just below rounds down.
  EXPECT_EQ(bf16_to_float(float_to_bf16(1.0f + 0x1p-8f + 0x1p-23f)), 1.0f + 0x1p-7f);
  EXPECT_EQ(bf16_to_float(float_to_bf16(1.0f + 3 * 0x1p-8f - 0x1p-23f)), 1.0f + 0x1p-7f);
  // The carry out of the mantissa moves to the next binade: 2 - 2^-9 -> 2.
  EXPECT_EQ(bf16_to_float(float_to_bf16(2.0f - 0x1p-9f)), 2.0f);
  EXPECT_EQ(bf16_to_float(float_to_bf16(-(2.0f - 0x1p-9f))), -2.0f);
}

TEST(BFloat16Test, SpecialValues) {
  const float inf = std::numeric_limits<float>::infinity();
  EXPECT_EQ(float_to_bf16(0.0f), 0x0000);
  EXPECT_EQ(float_to_bf16(-0.0f), 0x8000);
  EXPECT_EQ(bf16_to_float(float_to_bf16(inf)), inf);
  EXPECT_EQ(bf16_to_float(float_to_bf16(-inf)), -inf);
  // fp32's largest finite value is past bf16's midpoint to 2^128: infinity.
  EXPECT_EQ(bf16_to_float(float_to_bf16(std::numeric_limits<float>::max())), inf);
  // bf16's largest finite value stays.
  EXPECT_EQ(float_to_bf16(from_bits(0x7f7f0000u)), 0x7f7f);
  // The smallest fp32 subnormal rounds to zero; bf16 subnormals are exact.
  EXPECT_EQ(float_to_bf16(from_bits(0x00000001u)), 0x0000);
  EXPECT_EQ(float_to_bf16(from_bits(0x00010000u)), 0x0001);
  // NaN stays NaN, whatever its payload: even one whose low bits would carry
  // a number into the exponent.
  for (uint32_t bits : {0x7fc00000u, 0x7f800001u, 0xffffffffu, 0x7fffffffu, 0x7f80ffffu}) {
    EXPECT_TRUE(std::isnan(bf16_to_float(float_to_bf16(from_bits(bits))))) << std::hex << bits;
    EXPECT_EQ(float_to_bf16(from_bits(bits)) & 0x8000u, (bits >> 16) & 0x8000u);
  }
}

TEST(BFloat16Test, RandomBitPatternsMatchTheReference) {
  std::mt19937 rng(7);
  for (int i = 0; i < (1 << 20); ++i) {
    const float x = from_bits(static_cast<uint32_t>(rng()));
    if (std::isnan(x)) continue;
    const float expected = std::isinf(x) ? x : reference_round(x);
    ASSERT_EQ(to_bits(bf16_to_float(float_to_bf16(x))), to_bits(expected)) << x;
  }
}

}  // namespace
}  // namespace colrow
