// Temperature, top-k, top-p (nucleus) and one Philox draw, in the order of
// Hugging Face's logits warpers. Probabilities are formed in double from the
// fp32 logits, so the kept set and the draw do not depend on summation noise.
#include "colrow/infer/sampling.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <string>

#include "colrow/core/error.h"
#include "colrow/core/philox.h"

namespace colrow {
namespace {

std::string number(double v) {
  std::string s = std::to_string(v);
  // std::to_string prints six decimals; trim trailing zeros for messages.
  if (s.find('.') != std::string::npos) {
    s.erase(s.find_last_not_of('0') + 1);
    if (s.back() == '.') s.pop_back();
  }
  return s;
}

// The lowest id among the largest logits.
int64_t argmax(const float* logits, int64_t vocab) {
  int64_t best = 0;
  for (int64_t i = 1; i < vocab; ++i) {
    if (logits[i] > logits[best]) best = i;
  }
  return best;
}

}  // namespace

void validate(const SamplingOptions& o) {
  if (!(o.temperature >= 0.0f) || !std::isfinite(o.temperature)) {
    throw ConfigError("[sampling] temperature (" + number(o.temperature) +
                      ") must be >= 0 and finite. Use 0 for greedy decoding, 1 for the "
                      "model's distribution.");
  }
  if (o.top_k < 0) {
    throw ConfigError("[sampling] top_k (" + std::to_string(o.top_k) +
                      ") must be >= 0. Use 0 to turn top-k off.");
  }
  if (!(o.top_p > 0.0f && o.top_p <= 1.0f)) {
    throw ConfigError("[sampling] top_p (" + number(o.top_p) +
                      ") must be > 0 and <= 1. Use 1 to turn nucleus sampling off.");
  }
}

std::vector<double> filtered_probabilities(const float* logits, int64_t vocab,
                                           const SamplingOptions& o) {
  validate(o);
  COLROW_CHECK(vocab > 0, "sampling needs at least one logit");
  for (int64_t i = 0; i < vocab; ++i) {
    if (std::isnan(logits[i])) {
      throw InvalidInputError("[sampling] logit of token " + std::to_string(i) +
                              " is NaN. The model's weights or activations are not finite.");
    }
  }
  std::vector<double> p(vocab, 0.0);
  if (o.temperature == 0.0f) {
    p[argmax(logits, vocab)] = 1.0;
    return p;
  }
  // Rank tokens by logit, ties to the lower id (stable sort of ids 0..V-1).
  std::vector<int64_t> order(vocab);
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(),
                   [&](int64_t a, int64_t b) { return logits[a] > logits[b]; });
  // Top-k: the k best (HF clamps k to the vocabulary).
  const int64_t k = o.top_k == 0 ? vocab : std::min(o.top_k, vocab);
  // Softmax of logits / temperature over the k kept, shifted by the max.
  const double max = logits[order[0]];
  const double t = o.temperature;
  double sum = 0.0;
  for (int64_t r = 0; r < k; ++r) {
    const int64_t i = order[r];
    p[i] = std::exp((static_cast<double>(logits[i]) - max) / t);
    sum += p[i];
  }
  for (int64_t r = 0; r < k; ++r) p[order[r]] /= sum;
  // Top-p: keep the best tokens up to and including the first whose
  // cumulative probability reaches top_p (HF drops a token when the mass
  // ranked above it is already >= top_p; at least one token stays).
  int64_t kept = k;
  if (o.top_p < 1.0f) {
    double cumulative = 0.0;
    for (int64_t r = 0; r < k; ++r) {
      cumulative += p[order[r]];
      if (cumulative >= static_cast<double>(o.top_p)) {
        kept = r + 1;
        break;
      }
    }
  }
  if (kept < k) {
    double kept_sum = 0.0;
    for (int64_t r = 0; r < kept; ++r) kept_sum += p[order[r]];
    for (int64_t r = kept; r < k; ++r) p[order[r]] = 0.0;
    for (int64_t r = 0; r < kept; ++r) p[order[r]] /= kept_sum;
  }
  return p;
}

double sampling_uniform(uint64_t seed, uint64_t step) {
  static const uint64_t stream = name_stream("colrow.sampling");
  return uniform01(seed, stream, step);
}

int32_t sample_token(const float* logits, int64_t vocab, const SamplingOptions& o, uint64_t seed,
                     uint64_t step) {
  const std::vector<double> p = filtered_probabilities(logits, vocab, o);
  if (o.temperature == 0.0f) return static_cast<int32_t>(argmax(logits, vocab));
  const double u = sampling_uniform(seed, step);
  double cumulative = 0.0;
  int64_t last_kept = 0;
  for (int64_t i = 0; i < vocab; ++i) {
    if (p[i] == 0.0) continue;
    last_kept = i;
    cumulative += p[i];
    if (u < cumulative) return static_cast<int32_t>(i);
  }
  return static_cast<int32_t>(last_kept);  // u just below 1 past a rounded-down total
}

}  // namespace colrow
