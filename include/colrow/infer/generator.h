// Autoregressive generation with GptModel at any tp, with a KV cache: each
// prompt is prefilled in one forward pass, then every step decodes one token
// for each running sequence together (batched), so a token costs one row of
// work per layer, not the whole prefix again.
// Collectives per decoding step (batch B running sequences):
//   the embedding's all-reduce of [B, d_model], then 2 per layer of [B, d_model]
//   (attention's and the MLP's row-parallel outputs), then the pick:
//   - sampling: ONE all-gather of each sequence's last logits, [B, V_pad/tp]
//     per rank -> [B, V_pad], the only gather of logits in colrow;
//   - greedy (temperature 0): ONE all-gather of each rank's (max logit,
//     global id) per sequence, [B, 2] per rank, reduced alike on every rank
//     as MPI_MAXLOC would (ties to the lowest id): no logits cross ranks.
// Under pipeline parallelism (pp stages) the embedding runs on the first
// stage, the logits and the pick on the last; each step adds pp - 1 sends of
// [B, d_model] forward and one broadcast of the B new ids back. The stages
// take turns: one sequence batch in flight, so each is busy 1/pp of a step.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "colrow/dist/communicator.h"
#include "colrow/infer/sampling.h"
#include "colrow/nn/gpt_model.h"

namespace colrow {

struct GenerationOptions {
  int64_t max_new_tokens = 64;
  SamplingOptions sampling;
  uint64_t seed = 0;  // a sequence's draw at its step s is Philox(seed, s)
  // A sequence that emits one of these (its end-of-sequence ids) stops there;
  // the id is kept as its last token, as Hugging Face's generate keeps EOS.
  std::vector<int32_t> stop_tokens;
};

// Why a sequence stopped: it emitted a stop token, it has max_new_tokens new
// tokens, or it filled the model's context (max_position_embeddings tokens,
// prompt included).
enum class StopReason { kStopToken, kMaxNewTokens, kLength };
std::string to_string(StopReason reason);  // "stop" | "max_new_tokens" | "length"

struct Generation {
  std::vector<int32_t> tokens;  // the new ids, the prompt not repeated
  StopReason stop = StopReason::kMaxNewTokens;
};

// Pure, identical on every rank: the sampling knobs, max_new_tokens >= 0, at
// least one prompt, each of 1 to max_position_embeddings tokens, every id
// (prompts and stop tokens) in [0, vocab_size). ConfigError / InvalidInputError naming the value
// and the fix.
void validate_generation(const GenerationOptions& options,
                         const std::vector<std::vector<int32_t>>& prompts,
                         const ModelConfig& config);

// One Generation per prompt, the same on every rank. `tp` is the group
// `model` was built on. Decoding prompts together gives the same tokens as
// decoding each alone (each sequence keeps its own step count for its draws).
std::vector<Generation> generate(GptModel& model, Communicator& tp,
                                 const std::vector<std::vector<int32_t>>& prompts,
                                 const GenerationOptions& options);

// The same under pipeline parallelism: `stage_model` is stage pp.rank() of
// pp.size(). Every prefill and decoding step passes its hidden rows
// ([tokens, d_model]) stage to stage, point to point between matching tp
// ranks; the last stage picks the next tokens (over tp, as above) and
// broadcasts them over pp, so every stage feeds, stops and returns alike.
// The tokens equal those of the whole model on one stage.
std::vector<Generation> generate(GptModel& stage_model, Communicator& tp, Communicator& pp,
                                 const std::vector<std::vector<int32_t>>& prompts,
                                 const GenerationOptions& options);

// The same for one prompt.
Generation generate(GptModel& model, Communicator& tp, const std::vector<int32_t>& prompt,
                    const GenerationOptions& options);

// The next token of each row of `logits_local` ([rows, V_pad/tp], contiguous:
// this rank's vocabulary columns of each sequence's last logits), the same on
// every rank:
// greedy through the (max, id) reduction, else sampled from the gathered row
// with the draw (seed, steps[r]). One collective over tp.
std::vector<int32_t> pick_next_tokens(const Tensor& logits_local, int64_t vocab_size,
                                      Communicator& tp, const GenerationOptions& options,
                                      const std::vector<uint64_t>& steps);

}  // namespace colrow
