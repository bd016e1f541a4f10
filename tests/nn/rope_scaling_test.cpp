// RoPE's inverse frequencies under Hugging Face's rope_type scalings, against
// values derived by hand from transformers' formulas, band by band.
#include "colrow/nn/rope_scaling.h"

#include <gtest/gtest.h>

#include <cmath>

#include "colrow/core/error.h"

namespace colrow {
namespace {

constexpr double kPi = 3.14159265358979323846;
constexpr double kTight = 1e-15;  // relative: a few double roundings

// head_dim 8, theta 10^4: inv_freq = 1, 0.1, 0.01, 0.001, wavelengths 2 pi / f
// = 6.3, 63, 628, 6283.
TEST(RopeScalingTest, DefaultIsThetaToTheMinusTwoIOverHeadDim) {
  const std::vector<double> f = rope_inverse_frequencies(8, 10000.0, RopeScaling{});
  ASSERT_EQ(f.size(), 4u);
  const double want[] = {1.0, 0.1, 0.01, 0.001};
  for (int i = 0; i < 4; ++i) EXPECT_NEAR(f[i], want[i], kTight * want[i]) << i;
}

TEST(RopeScalingTest, LinearDividesEveryFrequencyByTheFactor) {
  RopeScaling s;
  s.type = RopeType::kLinear;
  s.factor = 4.0;
  const std::vector<double> f = rope_inverse_frequencies(8, 10000.0, s);
  const double want[] = {0.25, 0.025, 0.0025, 0.00025};
  for (int i = 0; i < 4; ++i) EXPECT_NEAR(f[i], want[i], kTight * want[i]) << i;
}

// llama3 with factor 8, original context 64, low/high factors 1 and 4: the
// wavelength limits are 64 / 1 = 64 and 64 / 4 = 16. Frequency 1 (wavelength
// 6.3 < 16) is kept; 0.1 (63, between 16 and 64) is smoothed with
// s = (64 / 62.8 - 1) / 3 = (3.2 / pi - 1) / 3; 0.01 and 0.001 (> 64) are divided by 8.
TEST(RopeScalingTest, Llama3KeepsHighSmoothsMediumAndScalesLowFrequencies) {
  RopeScaling s;
  s.type = RopeType::kLlama3;
  s.factor = 8.0;
  s.low_freq_factor = 1.0;
  s.high_freq_factor = 4.0;
  s.original_max_position_embeddings = 64;
  const std::vector<double> f = rope_inverse_frequencies(8, 10000.0, s);
  const double smooth = (3.2 / kPi - 1.0) / 3.0;
  const double want[] = {1.0, (1.0 - smooth) * 0.1 / 8.0 + smooth * 0.1, 0.01 / 8.0, 0.001 / 8.0};
  for (int i = 0; i < 4; ++i) EXPECT_NEAR(f[i], want[i], 1e-14 * want[i]) << i;
}

TEST(RopeScalingTest, ValidateNamesTheField) {
  RopeScaling s;
  s.type = RopeType::kLinear;
  s.factor = -1.0;
  EXPECT_THROW(validate(s), ConfigError);
  s.type = RopeType::kLlama3;
  s.factor = 8.0;
  s.low_freq_factor = 1.0;
  s.high_freq_factor = 4.0;
  s.original_max_position_embeddings = 0;
  try {
    validate(s);
    ADD_FAILURE() << "no error";
  } catch (const ConfigError& e) {
    EXPECT_EQ(std::string(e.what()),
              "[config] rope_scaling.original_max_position_embeddings (0) must be positive "
              "(llama3).");
  }
  EXPECT_NO_THROW(validate(RopeScaling{}));
}

}  // namespace
}  // namespace colrow
