// RoPE's inverse frequencies and the scalings Hugging Face applies to them
// (transformers' modeling_rope_utils, rope_type):
//   default: inv_freq[i] = theta^(-2i / head_dim), i < head_dim / 2
//   linear:  inv_freq[i] / factor (position interpolation)
//   llama3:  by wavelength w = 2 pi / inv_freq[i], with
//            low = original_max_position_embeddings / low_freq_factor,
//            high = original_max_position_embeddings / high_freq_factor:
//              w < high           inv_freq[i]            (high frequencies kept)
//              w > low            inv_freq[i] / factor   (low frequencies scaled)
//              otherwise          (1 - s) inv_freq[i] / factor + s inv_freq[i],
//                                 s = (original / w - low_freq_factor) /
//                                     (high_freq_factor - low_freq_factor)
// colrow computes them in double, then rounds the cos/sin table to fp32 once.
#pragma once

#include <cstdint>
#include <vector>

namespace colrow {

enum class RopeType { kDefault, kLinear, kLlama3 };

const char* to_string(RopeType type);

struct RopeScaling {
  RopeType type = RopeType::kDefault;
  double factor = 1.0;                              // linear, llama3
  double low_freq_factor = 1.0;                     // llama3
  double high_freq_factor = 4.0;                    // llama3
  int64_t original_max_position_embeddings = 8192;  // llama3
};

// Pure: a ConfigError naming the field when a value breaks the formulas
// (factor <= 0; llama3: low_freq_factor >= high_freq_factor, or a
// non-positive one or original_max_position_embeddings).
void validate(const RopeScaling& scaling);

// The head_dim / 2 inverse frequencies, in double. head_dim even and > 0, theta > 0.
std::vector<double> rope_inverse_frequencies(int64_t head_dim, double theta,
                                             const RopeScaling& scaling);

}  // namespace colrow
