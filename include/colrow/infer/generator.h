// Autoregressive generation with GptModel at any tp, as Hugging Face's
// generate() without a cache: every step runs the whole (cropped) sequence
// through the model, which costs O(length^2) per token; a KV cache comes
// later. Collectives per new token: the model's forward, then ONE all_gather
// over tp of the last position's logits, [V_pad/tp] floats per rank -> [V_pad].
#pragma once

#include <cstdint>
#include <vector>

#include "colrow/dist/communicator.h"
#include "colrow/infer/sampling.h"
#include "colrow/nn/gpt_model.h"

namespace colrow {

struct GenerationOptions {
  int64_t max_new_tokens = 64;
  SamplingOptions sampling;
  uint64_t seed = 0;  // the draw of step s is Philox(seed, s)
};

// Pure, identical on every rank: the sampling knobs, max_new_tokens >= 0, a
// prompt of at least one token, every prompt id in [0, vocab_size).
void validate_generation(const GenerationOptions& options, const std::vector<int32_t>& prompt,
                         const ModelConfig& config);

// prompt: [prompt_len] token ids -> the max_new_tokens new ids (the prompt
// not repeated), the same on every rank. `tp` is the group `model` was built
// on. When the sequence outgrows max_position_embeddings the model sees only
// its last max_position_embeddings tokens (nanoGPT's crop; positions restart
// at 0 for the window), so generation never stops for length.
std::vector<int32_t> generate(GptModel& model, Communicator& tp, const std::vector<int32_t>& prompt,
                              const GenerationOptions& options);

}  // namespace colrow
