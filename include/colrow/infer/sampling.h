// Next-token sampling from one full row of logits over the real vocabulary,
// as Hugging Face's generate() with do_sample: temperature, then top-k
// (TopKLogitsWarper), then top-p (TopPLogitsWarper), then one draw. The draw
// is Philox keyed by (seed, step), so the choice is a pure function of the
// logits and (seed, step): identical on every rank, at every tp, every run.
// No collectives: the caller hands the same row to every rank.
#pragma once

#include <cstdint>
#include <vector>

namespace colrow {

struct SamplingOptions {
  float temperature = 1.0f;  // 0: greedy argmax (ties to the lowest id)
  int64_t top_k = 0;         // 0: off; larger than the vocabulary: off
  float top_p = 1.0f;        // 1: off; else the nucleus of cumulative probability >= top_p
};

// Pure, identical on every rank: temperature >= 0, top_k >= 0, 0 < top_p <= 1
// (finite), else a ConfigError naming the knob, its value and the fix.
void validate(const SamplingOptions& options);

// logits: [vocab] (real tokens only, no padding) -> probabilities: [vocab],
// zero outside the kept set, the kept ones renormalized to sum to 1 (double).
// Temperature 0 gives the one-hot of the argmax. Tokens are ranked by logit,
// ties to the lower id, so the kept set is deterministic. A NaN logit is an
// InvalidInputError.
std::vector<double> filtered_probabilities(const float* logits, int64_t vocab,
                                           const SamplingOptions& options);

// The token drawn from filtered_probabilities with the uniform draw of
// (seed, step): the first id, in id order, whose cumulative probability
// exceeds the draw. logits: [vocab].
int32_t sample_token(const float* logits, int64_t vocab, const SamplingOptions& options,
                     uint64_t seed, uint64_t step);

// The uniform draw in [0, 1) that sample_token uses at (seed, step).
double sampling_uniform(uint64_t seed, uint64_t step);

}  // namespace colrow
