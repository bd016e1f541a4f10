// Philox4x32-10 against Random123's published known-answer vectors
// (kat_vectors), the FNV-1a name hash against its reference values, and the
// per-element draws: uniform01 in [0, 1), determinism, independent streams per
// name/seed/index, and standard_normal's moments within stated sampling error.
#include "colrow/core/philox.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <set>
#include <vector>

namespace colrow {
namespace {

// Random123 kat_vectors, "philox4x32 10" lines: counter, key, expected output.
TEST(PhiloxTest, KnownAnswerZeros) {
  const PhiloxCounter out = philox4x32_10({0, 0, 0, 0}, {0, 0});
  const PhiloxCounter expected = {0x6627e8d5u, 0xe169c58du, 0xbc57ac4cu, 0x9b00dbd8u};
  EXPECT_EQ(out, expected);
}

TEST(PhiloxTest, KnownAnswerAllOnes) {
  const PhiloxCounter out = philox4x32_10({0xffffffffu, 0xffffffffu, 0xffffffffu, 0xffffffffu},
                                          {0xffffffffu, 0xffffffffu});
  const PhiloxCounter expected = {0x408f276du, 0x41c83b0eu, 0xa20bc7c6u, 0x6d5451fdu};
  EXPECT_EQ(out, expected);
}

TEST(PhiloxTest, KnownAnswerPiDigits) {
  const PhiloxCounter out = philox4x32_10({0x243f6a88u, 0x85a308d3u, 0x13198a2eu, 0x03707344u},
                                          {0xa4093822u, 0x299f31d0u});
  const PhiloxCounter expected = {0xd16cfe09u, 0x94fdccebu, 0x5001e420u, 0x24126ea1u};
  EXPECT_EQ(out, expected);
}

TEST(PhiloxTest, NameStreamIsFnv1a64) {
  // Reference values of 64-bit FNV-1a (offset basis, "a", "foobar").
  EXPECT_EQ(name_stream(""), 0xcbf29ce484222325ull);
  EXPECT_EQ(name_stream("a"), 0xaf63dc4c8601ec8cull);
  EXPECT_EQ(name_stream("foobar"), 0x85944171f73967e8ull);
  EXPECT_NE(name_stream("h.0.mlp.fc.weight"), name_stream("h.0.mlp.fc.bias"));
}

TEST(PhiloxTest, DrawsAreDeterministic) {
  const uint64_t stream = name_stream("h.3.attn.qkv.weight");
  for (uint64_t i = 0; i < 100; ++i) {
    EXPECT_EQ(uniform01(1234, stream, i), uniform01(1234, stream, i));
    EXPECT_EQ(standard_normal(1234, stream, i), standard_normal(1234, stream, i));
  }
  // A pure function of its arguments: drawing out of order changes nothing.
  const float later = uniform01(7, stream, 999);
  (void)uniform01(7, stream, 5);
  EXPECT_EQ(uniform01(7, stream, 999), later);
}

TEST(PhiloxTest, Uniform01RangeAndResolution) {
  const uint64_t stream = name_stream("range");
  for (uint64_t i = 0; i < 200000; ++i) {
    const float u = uniform01(42, stream, i);
    ASSERT_GE(u, 0.0f) << i;
    ASSERT_LT(u, 1.0f) << i;
    // 24 random bits: every draw is a multiple of 2^-24, exactly.
    const double scaled = static_cast<double>(u) * 16777216.0;
    ASSERT_EQ(scaled, std::floor(scaled)) << i;
  }
}

TEST(PhiloxTest, Uniform01Mean) {
  // U(0, 1) has mean 1/2 and standard deviation 1/sqrt(12); the sample mean of
  // N draws has standard error 1/sqrt(12 N). Five standard errors: a correct
  // generator fails with probability ~6e-7, while a bias of 0.5% is caught.
  constexpr int kN = 100000;
  const uint64_t stream = name_stream("mean");
  double sum = 0.0;
  for (uint64_t i = 0; i < kN; ++i) sum += uniform01(3, stream, i);
  const double se = 1.0 / std::sqrt(12.0 * kN);
  EXPECT_NEAR(sum / kN, 0.5, 5.0 * se);
}

// Sample correlation of two sequences of draws. For independent sequences it has
// standard error ~1/sqrt(N).
double correlation(const std::vector<double>& a, const std::vector<double>& b) {
  const double n = static_cast<double>(a.size());
  double ma = 0, mb = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    ma += a[i];
    mb += b[i];
  }
  ma /= n;
  mb /= n;
  double sab = 0, saa = 0, sbb = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    sab += (a[i] - ma) * (b[i] - mb);
    saa += (a[i] - ma) * (a[i] - ma);
    sbb += (b[i] - mb) * (b[i] - mb);
  }
  return sab / std::sqrt(saa * sbb);
}

std::vector<double> uniform_draws(uint64_t seed, uint64_t stream, uint64_t first, int count) {
  std::vector<double> v(static_cast<size_t>(count));
  for (int i = 0; i < count; ++i) v[i] = uniform01(seed, stream, first + i);
  return v;
}

TEST(PhiloxTest, NamesSeedsAndIndicesGiveDifferentStreams) {
  constexpr int kN = 50000;
  const uint64_t fc = name_stream("h.0.mlp.fc.weight");
  const uint64_t proj = name_stream("h.0.mlp.proj.weight");
  const std::vector<double> base = uniform_draws(1, fc, 0, kN);
  const std::vector<std::vector<double>> others = {
      uniform_draws(1, proj, 0, kN),                      // another name
      uniform_draws(2, fc, 0, kN),                        // another seed
      uniform_draws(1, fc, 1, kN),                        // the next index
      uniform_draws(1, fc, uint64_t{1} << 32, kN),        // index's high word matters
      uniform_draws(1, fc ^ (uint64_t{1} << 40), 0, kN),  // stream's high word matters
      uniform_draws(1 + (uint64_t{1} << 32), fc, 0, kN),  // seed's high word matters
  };
  // Independent streams: sample correlation within 5 standard errors of 0, and
  // almost no equal values at equal positions (24-bit draws: N / 2^24 ~ 0.003
  // expected by chance; an alias of the base stream would give N).
  for (size_t s = 0; s < others.size(); ++s) {
    EXPECT_NEAR(correlation(base, others[s]), 0.0, 5.0 / std::sqrt(kN)) << "stream " << s;
    int same = 0;
    for (int i = 0; i < kN; ++i) same += base[i] == others[s][i];
    EXPECT_LT(same, 10) << "stream " << s;
  }
}

TEST(PhiloxTest, StandardNormalMoments) {
  // N = 100000 draws. Bounds are five standard errors of each sample statistic
  // for a true N(0, 1) (a correct generator fails with probability ~6e-7 each):
  //   mean:                 se = 1/sqrt(N)                       = 0.0032
  //   variance:             se = sqrt(2/(N-1))                   = 0.0045
  //   E[x^4] (= 3):         se = sqrt((E[x^8] - 9)/N) = sqrt(96/N) = 0.031
  //   P(|x| < 1) = 0.682689: se = sqrt(p (1 - p)/N)              = 0.0015
  // The last two catch a wrong shape with the right mean and variance.
  constexpr int kN = 100000;
  const uint64_t stream = name_stream("normal");
  double sum = 0, sum2 = 0, sum4 = 0;
  int inside = 0;
  for (uint64_t i = 0; i < kN; ++i) {
    const double x = standard_normal(11, stream, i);
    ASSERT_TRUE(std::isfinite(x)) << i;
    // u1 >= 2^-24, so |x| <= sqrt(-2 ln 2^-24) = 5.77.
    ASSERT_LE(std::fabs(x), 5.8) << i;
    sum += x;
    sum2 += x * x;
    sum4 += x * x * x * x;
    inside += std::fabs(x) < 1.0;
  }
  const double mean = sum / kN;
  const double var = (sum2 - kN * mean * mean) / (kN - 1);
  EXPECT_NEAR(mean, 0.0, 5.0 / std::sqrt(kN));
  EXPECT_NEAR(var, 1.0, 5.0 * std::sqrt(2.0 / (kN - 1)));
  EXPECT_NEAR(sum4 / kN, 3.0, 5.0 * std::sqrt(96.0 / kN));
  const double p = 0.6826894921370859;
  EXPECT_NEAR(static_cast<double>(inside) / kN, p, 5.0 * std::sqrt(p * (1 - p) / kN));
}

TEST(PhiloxTest, StandardNormalDiffersAcrossSeeds) {
  const uint64_t stream = name_stream("w");
  std::set<float> seen;
  for (uint64_t seed = 0; seed < 64; ++seed) seen.insert(standard_normal(seed, stream, 0));
  // 64 continuous draws; a collision would mean the seed is ignored.
  EXPECT_EQ(seen.size(), 64u);
}

}  // namespace
}  // namespace colrow
