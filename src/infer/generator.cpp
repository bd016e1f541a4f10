// generate(): crop the context, forward, gather the last row's logits over tp,
// sample on every rank alike, append. The logits never leave their vocabulary
// shards except for this one [1, V_pad] row per new token: the only all-gather
// of logits in colrow (training and eval use the vocab-parallel cross-entropy).
#include "colrow/infer/generator.h"

#include <algorithm>
#include <string>

#include "colrow/core/error.h"

namespace colrow {

void validate_generation(const GenerationOptions& o, const std::vector<int32_t>& prompt,
                         const ModelConfig& config) {
  validate(o.sampling);
  if (o.max_new_tokens < 0) {
    throw ConfigError("[generate] max_new_tokens (" + std::to_string(o.max_new_tokens) +
                      ") must be >= 0.");
  }
  if (prompt.empty()) {
    throw InvalidInputError(
        "[generate] prompt (0 tokens) must hold at least one token. Give a non-empty prompt.");
  }
  for (size_t i = 0; i < prompt.size(); ++i) {
    if (prompt[i] < 0 || prompt[i] >= config.vocab_size) {
      throw InvalidInputError("[generate] prompt token id (" + std::to_string(prompt[i]) +
                              ") at position " + std::to_string(i) +
                              " must be in [0, vocab_size (" + std::to_string(config.vocab_size) +
                              ")).");
    }
  }
}

std::vector<int32_t> generate(GptModel& model, Communicator& tp, const std::vector<int32_t>& prompt,
                              const GenerationOptions& o) {
  const ModelConfig& config = model.config();
  validate_generation(o, prompt, config);
  const int64_t vocab_padded = model.padded_vocab_size();
  const int64_t vocab_local = vocab_padded / tp.size();
  const int64_t max_positions = config.max_position_embeddings;
  constexpr int32_t kIgnoreIndex = -100;

  std::vector<int32_t> sequence = prompt;
  std::vector<int32_t> generated;
  generated.reserve(o.max_new_tokens);
  std::vector<int32_t> context, targets;
  // [1, V_pad/tp]: my columns at the last position; [tp, V_pad/tp] = [1, V_pad]
  // in rank order. On the model's device; the sampler reads a host copy.
  Tensor row_local = Tensor::zeros({1, vocab_local}, model.device());
  Tensor row = Tensor::zeros({tp.size(), vocab_local}, model.device());
  for (int64_t step = 0; step < o.max_new_tokens; ++step) {
    // The last max_positions tokens: the window the model can place.
    const int64_t length = std::min<int64_t>(static_cast<int64_t>(sequence.size()), max_positions);
    context.assign(sequence.end() - length, sequence.end());
    // No loss is wanted: every target is ignored (the mean is NaN, unused).
    targets.assign(length, kIgnoreIndex);
    model.forward(context, targets, /*batch=*/1, /*seq=*/length);
    // logits_local: [length, V_pad/tp] -> its last row: [1, V_pad/tp]
    row_local.copy_from(model.logits_local().slice(0, length - 1, 1));
    // [sample] all-gather the last row's vocab shards over tp: [V_pad/tp] -> [V_pad]
    tp.all_gather(row_local, row);
    // Drop the padded columns (>= vocab_size): they are never sampled.
    const Tensor logits = row.to(Device::cpu());  // the row itself on the CPU; a copy from a GPU
    const int32_t next = sample_token(logits.data(), config.vocab_size, o.sampling, o.seed,
                                      static_cast<uint64_t>(step));
    sequence.push_back(next);
    generated.push_back(next);
  }
  return generated;
}

}  // namespace colrow
