// Sampling against plain expectations: greedy is the argmax (ties to the
// lowest id); top-k keeps exactly k; top-p keeps HF's nucleus, boundary
// included; temperature scales the softmax; the draws over many steps follow
// the filtered distribution; bad knobs are ConfigErrors in STYLE.md's form.
#include "colrow/infer/sampling.h"

#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "colrow/core/error.h"

namespace colrow {
namespace {

SamplingOptions opts(float temperature, int64_t top_k, float top_p) {
  SamplingOptions o;
  o.temperature = temperature;
  o.top_k = top_k;
  o.top_p = top_p;
  return o;
}

// Plain softmax of logits / t in double (the reference).
std::vector<double> softmax(const std::vector<float>& logits, double t) {
  double max = logits[0];
  for (float x : logits) max = std::max<double>(max, x);
  std::vector<double> p(logits.size());
  double sum = 0.0;
  for (size_t i = 0; i < p.size(); ++i) sum += p[i] = std::exp((logits[i] - max) / t);
  for (double& x : p) x /= sum;
  return p;
}

int nonzero(const std::vector<double>& p) {
  int n = 0;
  for (double x : p) n += x > 0.0;
  return n;
}

TEST(Sampling, GreedyIsArgmaxWithTiesToLowestId) {
  const std::vector<float> logits = {0.5f, 3.0f, -1.0f, 3.0f, 2.9f};
  const SamplingOptions greedy = opts(0.0f, 0, 1.0f);
  for (uint64_t step = 0; step < 20; ++step) {
    EXPECT_EQ(sample_token(logits.data(), 5, greedy, 1, step), 1);
  }
  const std::vector<double> p = filtered_probabilities(logits.data(), 5, greedy);
  EXPECT_EQ(p, (std::vector<double>{0, 1, 0, 0, 0}));
  // top-k and top-p do not change greedy decoding.
  EXPECT_EQ(sample_token(logits.data(), 5, opts(0.0f, 2, 0.3f), 1, 0), 1);
}

TEST(Sampling, TopKKeepsExactlyK) {
  const std::vector<float> logits = {0.1f, 2.0f, -3.0f, 1.5f, 0.7f, 1.0f};
  for (int64_t k = 1; k <= 6; ++k) {
    const std::vector<double> p = filtered_probabilities(logits.data(), 6, opts(1.0f, k, 1.0f));
    EXPECT_EQ(nonzero(p), k) << "k " << k;
  }
  // k = 3 keeps ids 1, 3, 5, renormalized softmax over them.
  const std::vector<double> p = filtered_probabilities(logits.data(), 6, opts(1.0f, 3, 1.0f));
  const std::vector<double> ref = softmax({2.0f, 1.5f, 1.0f}, 1.0);
  // Doubles from the same exps in another order: a few ulps.
  EXPECT_NEAR(p[1], ref[0], 1e-14);
  EXPECT_NEAR(p[3], ref[1], 1e-14);
  EXPECT_NEAR(p[5], ref[2], 1e-14);
  // k beyond the vocabulary is off (as HF clamps it).
  EXPECT_EQ(nonzero(filtered_probabilities(logits.data(), 6, opts(1.0f, 100, 1.0f))), 6);
  // Ties at the k-th place go to the lower id.
  const std::vector<float> tied = {1.0f, 2.0f, 1.0f, 1.0f};
  const std::vector<double> q = filtered_probabilities(tied.data(), 4, opts(1.0f, 2, 1.0f));
  EXPECT_GT(q[0], 0.0);
  EXPECT_GT(q[1], 0.0);
  EXPECT_EQ(q[2], 0.0);
  EXPECT_EQ(q[3], 0.0);
}

TEST(Sampling, TopPKeepsTheNucleus) {
  // probabilities 0.5, 0.25, 0.125, 0.125 up to rounding of the logs.
  const std::vector<float> logits = {std::log(0.125f), std::log(0.5f), std::log(0.125f),
                                     std::log(0.25f)};
  auto kept = [&](float p) {
    return nonzero(filtered_probabilities(logits.data(), 4, opts(1, 0, p)));
  };
  EXPECT_EQ(kept(0.1f), 1);  // the best token alone already reaches p
  EXPECT_EQ(kept(0.6f), 2);
  EXPECT_EQ(kept(0.8f), 3);
  EXPECT_EQ(kept(0.9f), 4);
  EXPECT_EQ(kept(1.0f), 4);
  const std::vector<double> p = filtered_probabilities(logits.data(), 4, opts(1, 0, 0.6f));
  EXPECT_NEAR(p[1], 2.0 / 3.0, 1e-7);  // 0.5 / 0.75, logs rounded to fp32
  EXPECT_NEAR(p[3], 1.0 / 3.0, 1e-7);
  EXPECT_EQ(p[0], 0.0);
  EXPECT_EQ(p[2], 0.0);
}

TEST(Sampling, TopPBoundaryKeepsTheTokenThatReachesP) {
  // Four equal logits: each probability is exactly 0.25, so the cumulative
  // sums 0.25, 0.5, 0.75, 1 are exact. A cumulative equal to p stops there
  // (HF drops a token only when the mass above it is >= p).
  const std::vector<float> logits = {0.0f, 0.0f, 0.0f, 0.0f};
  const std::vector<double> half = filtered_probabilities(logits.data(), 4, opts(1, 0, 0.5f));
  EXPECT_EQ(half, (std::vector<double>{0.5, 0.5, 0, 0}));  // ties: the lower ids
  const float above = std::nextafter(0.5f, 1.0f);
  EXPECT_EQ(nonzero(filtered_probabilities(logits.data(), 4, opts(1, 0, above))), 3);
  EXPECT_EQ(nonzero(filtered_probabilities(logits.data(), 4, opts(1, 0, 0.25f))), 1);
}

TEST(Sampling, TopKThenTopPRenormalizes) {
  // After top-k = 2 the two best are renormalized to 2/3, 1/3; top-p 0.6
  // then keeps only the best (2/3 >= 0.6), which without top-k it would not.
  const std::vector<float> logits = {std::log(0.5f), std::log(0.25f), std::log(0.25f)};
  EXPECT_EQ(nonzero(filtered_probabilities(logits.data(), 3, opts(1, 2, 0.6f))), 1);
  EXPECT_EQ(nonzero(filtered_probabilities(logits.data(), 3, opts(1, 0, 0.6f))), 2);
}

TEST(Sampling, TemperatureScalesLogits) {
  const std::vector<float> logits = {1.0f, 2.0f, 0.5f, -1.0f};
  for (float t : {0.25f, 0.7f, 1.0f, 3.0f}) {
    const std::vector<double> p = filtered_probabilities(logits.data(), 4, opts(t, 0, 1.0f));
    const std::vector<double> ref = softmax(logits, t);
    for (int i = 0; i < 4; ++i) EXPECT_NEAR(p[i], ref[i], 1e-14) << "t " << t << " id " << i;
  }
}

TEST(Sampling, FrequenciesMatchTheFilteredDistribution) {
  const std::vector<float> logits = {0.3f, 1.2f, -0.4f, 0.9f, 0.0f, -2.0f, 1.0f};
  const int64_t vocab = static_cast<int64_t>(logits.size());
  for (const SamplingOptions& o :
       {opts(1.0f, 0, 1.0f), opts(0.8f, 4, 1.0f), opts(1.3f, 0, 0.7f), opts(1.0f, 5, 0.9f)}) {
    const std::vector<double> p = filtered_probabilities(logits.data(), vocab, o);
    constexpr int kDraws = 20000;
    std::vector<int> count(vocab, 0);
    for (uint64_t seed : {3u, 4u}) {
      for (int s = 0; s < kDraws / 2; ++s) ++count[sample_token(logits.data(), vocab, o, seed, s)];
    }
    for (int64_t i = 0; i < vocab; ++i) {
      if (p[i] == 0.0) {
        EXPECT_EQ(count[i], 0) << "filtered-out id " << i << " was sampled";
        continue;
      }
      // Binomial count: standard deviation sqrt(n p (1 - p)); 5 sigma misses
      // a correct sampler with probability ~6e-7 per cell.
      const double mean = kDraws * p[i];
      const double sigma = std::sqrt(kDraws * p[i] * (1.0 - p[i]));
      EXPECT_NEAR(count[i], mean, 5.0 * sigma + 1.0)
          << "id " << i << " t " << o.temperature << " k " << o.top_k << " p " << o.top_p;
    }
  }
}

TEST(Sampling, DeterministicInSeedAndStep) {
  const std::vector<float> logits = {0.0f, 0.1f, 0.2f, 0.3f, 0.4f, 0.5f, 0.6f, 0.7f};
  const SamplingOptions o = opts(1.0f, 0, 1.0f);
  int differ = 0;
  for (uint64_t step = 0; step < 50; ++step) {
    EXPECT_EQ(sample_token(logits.data(), 8, o, 9, step),
              sample_token(logits.data(), 8, o, 9, step));
    differ +=
        sample_token(logits.data(), 8, o, 9, step) != sample_token(logits.data(), 8, o, 10, step);
  }
  EXPECT_GT(differ, 10);  // another seed draws another sequence
}

void expect_config_error(const SamplingOptions& o, const std::string& message) {
  try {
    validate(o);
    ADD_FAILURE() << "no error for " << message;
  } catch (const ConfigError& e) {
    EXPECT_EQ(std::string(e.what()).rfind(message, 0), 0u) << e.what();
  }
}

TEST(Sampling, BadKnobsAreConfigErrors) {
  expect_config_error(opts(-0.5f, 0, 1.0f), "[sampling] temperature (-0.5) must be >= 0");
  expect_config_error(opts(NAN, 0, 1.0f), "[sampling] temperature (nan) must be >= 0");
  expect_config_error(opts(1.0f, -1, 1.0f), "[sampling] top_k (-1) must be >= 0");
  expect_config_error(opts(1.0f, 0, 0.0f), "[sampling] top_p (0) must be > 0 and <= 1");
  expect_config_error(opts(1.0f, 0, 1.5f), "[sampling] top_p (1.5) must be > 0 and <= 1");
  expect_config_error(opts(1.0f, 0, NAN), "[sampling] top_p (nan) must be > 0 and <= 1");
  const std::vector<float> logits = {0.0f, 1.0f};
  EXPECT_THROW(sample_token(logits.data(), 2, opts(1.0f, 0, 2.0f), 0, 0), ConfigError);
  const std::vector<float> bad = {0.0f, NAN};
  EXPECT_THROW(sample_token(bad.data(), 2, opts(1.0f, 0, 1.0f), 0, 0), InvalidInputError);
}

}  // namespace
}  // namespace colrow
