// RoPE inverse frequencies with Hugging Face's rope_type scalings (formulas
// in colrow/nn/rope_scaling.h; transformers' _compute_linear_scaling_rope_parameters
// and _compute_llama3_parameters).
#include "colrow/nn/rope_scaling.h"

#include <cmath>
#include <sstream>
#include <string>

#include "colrow/core/error.h"

namespace colrow {
namespace {

constexpr double kPi = 3.14159265358979323846;

std::string text(double value) {
  std::ostringstream s;
  s << value;
  return s.str();
}

}  // namespace

const char* to_string(RopeType type) {
  switch (type) {
    case RopeType::kLinear:
      return "linear";
    case RopeType::kLlama3:
      return "llama3";
    case RopeType::kDefault:
      break;
  }
  return "default";
}

void validate(const RopeScaling& s) {
  if (s.type == RopeType::kDefault) return;
  if (!(s.factor > 0.0)) {
    throw ConfigError("[config] rope_scaling.factor (" + text(s.factor) + ") must be positive.");
  }
  if (s.type != RopeType::kLlama3) return;
  if (!(s.low_freq_factor > 0.0) || !(s.high_freq_factor > s.low_freq_factor)) {
    throw ConfigError("[config] rope_scaling low_freq_factor (" + text(s.low_freq_factor) +
                      ") and high_freq_factor (" + text(s.high_freq_factor) +
                      ") must satisfy 0 < low_freq_factor < high_freq_factor (llama3).");
  }
  if (s.original_max_position_embeddings < 1) {
    throw ConfigError("[config] rope_scaling.original_max_position_embeddings (" +
                      std::to_string(s.original_max_position_embeddings) +
                      ") must be positive (llama3).");
  }
}

std::vector<double> rope_inverse_frequencies(int64_t head_dim, double theta, const RopeScaling& s) {
  std::vector<double> inv_freq(static_cast<size_t>(head_dim / 2));
  for (size_t i = 0; i < inv_freq.size(); ++i) {
    inv_freq[i] = std::pow(theta, -2.0 * static_cast<double>(i) / static_cast<double>(head_dim));
  }
  if (s.type == RopeType::kLinear) {
    for (double& f : inv_freq) f /= s.factor;
  } else if (s.type == RopeType::kLlama3) {
    const double original = static_cast<double>(s.original_max_position_embeddings);
    const double low_freq_wavelen = original / s.low_freq_factor;
    const double high_freq_wavelen = original / s.high_freq_factor;
    for (double& f : inv_freq) {
      const double wavelen = 2.0 * kPi / f;
      if (wavelen > low_freq_wavelen) {
        f /= s.factor;
      } else if (wavelen >= high_freq_wavelen) {  // the medium band: interpolate
        const double smooth =
            (original / wavelen - s.low_freq_factor) / (s.high_freq_factor - s.low_freq_factor);
        f = (1.0 - smooth) * f / s.factor + smooth * f;
      }
    }
  }
  return inv_freq;
}

}  // namespace colrow
