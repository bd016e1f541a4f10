// generate(): prefill each prompt into its cache slot, then decode all running
// sequences one token per step. The logits never leave their vocabulary shards
// except through pick_next_tokens: a [B, 2] (max, id) gather when greedy, a
// [B, V_pad/tp] gather when sampling.
#include "colrow/infer/generator.h"

#include <algorithm>
#include <cmath>
#include <exception>
#include <string>

#include "colrow/core/error.h"

namespace colrow {
namespace {

// Ids are exchanged as floats: exact below 2^24.
constexpr int64_t kLargestExactId = int64_t{1} << 24;

// My real (not padding) columns of the vocabulary: [start, start + real).
struct VocabShard {
  int64_t start = 0, local = 0, real = 0;
};

VocabShard vocab_shard(int64_t local, int rank, int64_t vocab_size) {
  VocabShard s;
  s.local = local;
  s.start = rank * local;
  s.real = std::clamp<int64_t>(vocab_size - s.start, 0, local);
  return s;
}

// Greedy: each rank's (max, global id) per row, gathered; the largest wins,
// ties to the lowest id, NaN anywhere is an error on every rank alike.
std::vector<int32_t> greedy_tokens(const Tensor& logits, const VocabShard& shard,
                                   Communicator& tp) {
  const int64_t rows = logits.size(0);
  Tensor mine = Tensor::zeros({rows, 2});
  for (int64_t r = 0; r < rows; ++r) {
    const float* row = logits.data() + r * logits.row_stride();
    float best = -INFINITY;
    int64_t best_id = -1;
    for (int64_t j = 0; j < shard.real; ++j) {
      if (std::isnan(row[j])) {
        best = NAN;
        break;
      }
      if (row[j] > best || best_id < 0) {
        best = row[j];
        best_id = shard.start + j;
      }
    }
    mine.data()[2 * r] = best;
    mine.data()[2 * r + 1] = static_cast<float>(best_id);
  }
  Tensor all = Tensor::zeros({static_cast<int64_t>(tp.size()) * rows, 2});
  tp.all_gather(mine, all);  // [tp * rows, 2]: rank k's pairs in rows [k rows, (k+1) rows)
  std::vector<int32_t> next(rows);
  for (int64_t r = 0; r < rows; ++r) {
    float best = -INFINITY;
    int64_t best_id = -1;
    for (int k = 0; k < tp.size(); ++k) {
      const float value = all.data()[2 * (k * rows + r)];
      const int64_t id = static_cast<int64_t>(all.data()[2 * (k * rows + r) + 1]);
      if (std::isnan(value)) {
        throw InvalidInputError("[generate] the logits of sequence " + std::to_string(r) +
                                " hold NaN: the model's weights or inputs are broken.");
      }
      if (id < 0) continue;  // a rank holding only padding
      if (best_id < 0 || value > best || (value == best && id < best_id)) {
        best = value;
        best_id = id;
      }
    }
    next[r] = static_cast<int32_t>(best_id);
  }
  return next;
}

// Sampling: each row gathered whole, then drawn alike on every rank.
std::vector<int32_t> sampled_tokens(const Tensor& logits, const VocabShard& shard,
                                    int64_t vocab_size, Communicator& tp,
                                    const GenerationOptions& o,
                                    const std::vector<uint64_t>& steps) {
  const int64_t rows = logits.size(0);
  Tensor all = Tensor::empty({static_cast<int64_t>(tp.size()) * rows, shard.local});
  tp.all_gather(logits, all);  // [tp * rows, V_pad/tp]
  std::vector<float> row(static_cast<size_t>(tp.size()) * shard.local);
  std::vector<int32_t> next(rows);
  for (int64_t r = 0; r < rows; ++r) {
    for (int k = 0; k < tp.size(); ++k) {  // rank k's columns are ids [k local, (k+1) local)
      const float* piece = all.data() + (k * rows + r) * shard.local;
      std::copy(piece, piece + shard.local, row.begin() + k * shard.local);
    }
    next[r] = sample_token(row.data(), vocab_size, o.sampling, o.seed, steps[r]);
  }
  return next;
}

}  // namespace

std::string to_string(StopReason reason) {
  switch (reason) {
    case StopReason::kStopToken:
      return "stop";
    case StopReason::kLength:
      return "length";
    case StopReason::kMaxNewTokens:
      break;
  }
  return "max_new_tokens";
}

void validate_generation(const GenerationOptions& o,
                         const std::vector<std::vector<int32_t>>& prompts,
                         const ModelConfig& config) {
  validate(o.sampling);
  if (o.max_new_tokens < 0) {
    throw ConfigError("[generate] max_new_tokens (" + std::to_string(o.max_new_tokens) +
                      ") must be >= 0.");
  }
  if (prompts.empty()) {
    throw InvalidInputError("[generate] no prompts: give at least one.");
  }
  for (int32_t id : o.stop_tokens) {
    if (id < 0 || id >= config.vocab_size) {
      throw ConfigError("[generate] stop token " + std::to_string(id) + " must be in [0, " +
                        std::to_string(config.vocab_size) +
                        ") (vocab_size). Fix eos_token_id in config.json, or pass --ignore-eos.");
    }
  }
  for (size_t p = 0; p < prompts.size(); ++p) {
    const std::vector<int32_t>& prompt = prompts[p];
    const std::string which = prompts.size() > 1 ? " " + std::to_string(p + 1) : "";
    if (prompt.empty()) {
      throw InvalidInputError("[generate] prompt" + which +
                              " (0 tokens) must hold at least one token. Give a non-empty "
                              "prompt.");
    }
    if (static_cast<int64_t>(prompt.size()) > config.max_position_embeddings) {
      throw InvalidInputError("[generate] prompt" + which + " (" + std::to_string(prompt.size()) +
                              " tokens) must fit the model's context, max_position_embeddings (" +
                              std::to_string(config.max_position_embeddings) +
                              "). Shorten the prompt.");
    }
    for (size_t i = 0; i < prompt.size(); ++i) {
      if (prompt[i] < 0 || prompt[i] >= config.vocab_size) {
        throw InvalidInputError("[generate] prompt" + which + " token id (" +
                                std::to_string(prompt[i]) + ") at position " + std::to_string(i) +
                                " must be in [0, vocab_size (" + std::to_string(config.vocab_size) +
                                ")).");
      }
    }
  }
}

std::vector<int32_t> pick_next_tokens(const Tensor& logits_local, int64_t vocab_size,
                                      Communicator& tp, const GenerationOptions& o,
                                      const std::vector<uint64_t>& steps) {
  const int64_t local = logits_local.size(1);
  if (local * tp.size() > kLargestExactId) {
    throw ConfigError("[generate] padded vocabulary (" + std::to_string(local * tp.size()) +
                      ") must stay below 2^24 for exact ids in the token exchange.");
  }
  // The tensor itself on the CPU in fp32; mixed precision's bf16 logits widened exactly.
  const Tensor logits = logits_local.to(Device::cpu()).to(DType::kF32);
  const VocabShard shard = vocab_shard(local, tp.rank(), vocab_size);
  if (o.sampling.temperature == 0.0f) return greedy_tokens(logits, shard, tp);
  return sampled_tokens(logits, shard, vocab_size, tp, o, steps);
}

namespace {

// Tag of the hidden rows passed stage to stage while decoding.
constexpr int kDecodeActivations = 0;

// One cached forward through the stages (pp == nullptr: the whole model).
// Returns the logits on the last stage, nullptr on the others.
const Tensor* forward_through_stages(GptModel& model, Communicator* pp, Tensor& received,
                                     const std::vector<int32_t>& ids,
                                     const std::vector<int64_t>& slots, int64_t n_new,
                                     KvCache& cache) {
  if (pp == nullptr) return &model.forward_cached(ids, slots, n_new, cache);
  const PipelineStage& stage = model.stage();
  if (!stage.is_first()) {
    ensure_shape(received, {static_cast<int64_t>(slots.size()) * n_new, model.config().d_model},
                 model.device(), model.compute_dtype());  // the hidden rows' dtype
    pp->recv(received, pp->rank() - 1, kDecodeActivations);
  }
  const Tensor& out = model.forward_cached_stage(ids, &received, slots, n_new, cache);
  if (stage.is_last()) return &out;
  pp->start_send(out, pp->rank() + 1, kDecodeActivations)->wait();
  return nullptr;
}

// The next ids of the running sequences: picked on the last stage, then (pp)
// broadcast from it to every stage, as host floats (exact below 2^24; every
// communicator carries host tensors, so no device round trip). A pick that
// fails (NaN logits) fails on the last stage only; it still broadcasts, ids
// of -1, so that every stage stops with an error instead of waiting.
std::vector<int32_t> next_tokens(const Tensor* logits, int64_t rows, const GptModel& model,
                                 Communicator& tp, Communicator* pp, const GenerationOptions& o,
                                 const std::vector<uint64_t>& steps) {
  if (pp == nullptr) return pick_next_tokens(*logits, model.config().vocab_size, tp, o, steps);
  Tensor ids = Tensor::full({rows}, -1.0f);
  std::exception_ptr failure;
  if (logits != nullptr) {
    try {
      const std::vector<int32_t> next =
          pick_next_tokens(*logits, model.config().vocab_size, tp, o, steps);
      for (int64_t r = 0; r < rows; ++r) ids.data()[r] = static_cast<float>(next[r]);
    } catch (const std::exception&) {
      failure = std::current_exception();
    }
  }
  pp->broadcast(ids, pp->size() - 1);
  if (failure) std::rethrow_exception(failure);
  std::vector<int32_t> next(rows);
  for (int64_t r = 0; r < rows; ++r) {
    next[r] = static_cast<int32_t>(ids.data()[r]);
    if (next[r] < 0) {
      throw InvalidInputError(
          "[generate] the last pipeline stage could not pick the next tokens; its message "
          "says why.");
    }
  }
  return next;
}

std::vector<Generation> generate_on_stages(GptModel& model, Communicator& tp, Communicator* pp,
                                           const std::vector<std::vector<int32_t>>& prompts,
                                           const GenerationOptions& o) {
  const ModelConfig& config = model.config();
  validate_generation(o, prompts, config);
  const int64_t n = static_cast<int64_t>(prompts.size());
  const int64_t context = config.max_position_embeddings;
  std::vector<Generation> out(n);
  if (o.max_new_tokens == 0) return out;
  // Room for the longest sequence, capped by the context. A token that would
  // be fed at position `context` is never fed: its sequence stops for length.
  int64_t capacity = 1;
  for (const auto& p : prompts) {
    capacity = std::max<int64_t>(capacity, static_cast<int64_t>(p.size()) + o.max_new_tokens - 1);
  }
  KvCache cache = model.make_kv_cache(n, std::min(capacity, context));
  Tensor received;  // a later stage's input from the one before

  // Prefill: each prompt in one forward pass; its last logits join row b.
  const bool picks = model.stage().is_last();
  Tensor last;
  if (picks) {
    last = Tensor::empty({n, model.vocab_size_local()}, model.device(), model.compute_dtype());
  }
  for (int64_t b = 0; b < n; ++b) {
    const Tensor* logits = forward_through_stages(model, pp, received, prompts[b], {b},
                                                  static_cast<int64_t>(prompts[b].size()), cache);
    if (picks) last.slice(0, b, 1).copy_from(*logits);
  }
  std::vector<int64_t> running(n);
  for (int64_t b = 0; b < n; ++b) running[b] = b;
  const Tensor* logits = picks ? &last : nullptr;
  while (!running.empty()) {
    std::vector<uint64_t> steps;
    for (int64_t b : running) steps.push_back(out[b].tokens.size());
    const std::vector<int32_t> next =
        next_tokens(logits, static_cast<int64_t>(running.size()), model, tp, pp, o, steps);
    std::vector<int64_t> still;
    std::vector<int32_t> feed;
    for (size_t r = 0; r < running.size(); ++r) {
      Generation& g = out[running[r]];
      g.tokens.push_back(next[r]);
      const int64_t length = static_cast<int64_t>(prompts[running[r]].size() + g.tokens.size());
      if (std::find(o.stop_tokens.begin(), o.stop_tokens.end(), next[r]) != o.stop_tokens.end()) {
        g.stop = StopReason::kStopToken;
      } else if (static_cast<int64_t>(g.tokens.size()) == o.max_new_tokens) {
        g.stop = StopReason::kMaxNewTokens;
      } else if (length == context) {
        g.stop = StopReason::kLength;
      } else {
        still.push_back(running[r]);
        feed.push_back(next[r]);
      }
    }
    running = still;
    if (running.empty()) break;
    // one token per sequence
    logits = forward_through_stages(model, pp, received, feed, running, 1, cache);
  }
  return out;
}

}  // namespace

std::vector<Generation> generate(GptModel& model, Communicator& tp,
                                 const std::vector<std::vector<int32_t>>& prompts,
                                 const GenerationOptions& o) {
  return generate_on_stages(model, tp, nullptr, prompts, o);
}

std::vector<Generation> generate(GptModel& stage_model, Communicator& tp, Communicator& pp,
                                 const std::vector<std::vector<int32_t>>& prompts,
                                 const GenerationOptions& o) {
  const PipelineStage& stage = stage_model.stage();
  if (stage.index != pp.rank() || stage.count != pp.size()) {
    throw InternalError("[generate] stage " + std::to_string(stage.index) + " of " +
                        std::to_string(stage.count) + " runs on pp rank " +
                        std::to_string(pp.rank()) + " of " + std::to_string(pp.size()));
  }
  return generate_on_stages(stage_model, tp, pp.size() > 1 ? &pp : nullptr, prompts, o);
}

Generation generate(GptModel& model, Communicator& tp, const std::vector<int32_t>& prompt,
                    const GenerationOptions& options) {
  return generate(model, tp, std::vector<std::vector<int32_t>>{prompt}, options).front();
}

}  // namespace colrow
