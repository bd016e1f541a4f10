// Small whole-model configurations shared by the model, gradient-norm and
// checkpoint tests: gpt2 and llama with grouped, replicated and multi-query
// key/value heads, vocabulary 300 so padding is exercised at every tp; plus
// the helpers those tests all need.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "colrow/core/error.h"
#include "colrow/data/token_dataset.h"
#include "colrow/nn/model_config.h"
#include "colrow/nn/parameter.h"
#include "colrow/nn/vocab_parallel_cross_entropy.h"

namespace colrow::testing {

inline ModelConfig small_gpt2_config() {
  ModelConfig c = model_preset("gpt2-tiny");
  c.n_layer = 2;
  c.n_head = c.n_kv_head = 12;
  c.d_model = 48;
  c.head_dim = 4;
  c.ffn_hidden_size = 192;
  c.vocab_size = 300;  // pads to 384, 512, 384, 512 at tp 1..4
  c.max_position_embeddings = 32;
  return c;
}

inline ModelConfig small_llama_config(int n_head, int n_kv_head, int64_t d_model, bool tied) {
  ModelConfig c = model_preset("llama-tiny");
  c.n_layer = 2;
  c.n_head = n_head;
  c.n_kv_head = n_kv_head;
  c.d_model = d_model;
  c.head_dim = d_model / n_head;
  c.ffn_hidden_size = 96;
  c.vocab_size = 300;
  c.max_position_embeddings = 32;
  c.tie_word_embeddings = tied;
  return c;
}

struct ModelCase {
  const char* name;
  ModelConfig config;
};

// The options Hugging Face's model types add (model_config.h), each on a
// small model: a sliding window shorter than the test sequences (mistral);
// q/k/v biases with the window on the upper layer only and Llama 3's RoPE
// scaling (qwen2); every bias and linear RoPE scaling (llama); exact GELU (gpt2).
inline ModelConfig small_mistral_config() {
  ModelConfig c = small_llama_config(4, 2, 32, false);
  c.model_type = "mistral";
  c.sliding_window = 4;
  return c;
}
inline ModelConfig small_qwen2_config() {
  ModelConfig c = small_llama_config(4, 2, 32, true);
  c.model_type = "qwen2";
  c.attention_qkv_bias = true;
  c.sliding_window = 5;
  c.max_window_layers = 1;
  c.rope_scaling.type = RopeType::kLlama3;
  c.rope_scaling.factor = 8.0;
  c.rope_scaling.original_max_position_embeddings = 16;  // wavelengths 16 / 4 to 16 / 1
  return c;
}
inline ModelConfig small_llama_biases_config() {
  ModelConfig c = small_llama_config(4, 4, 32, false);
  c.attention_qkv_bias = c.attention_output_bias = c.mlp_bias = true;
  c.rope_scaling.type = RopeType::kLinear;
  c.rope_scaling.factor = 2.0;
  return c;
}
inline ModelConfig small_gpt2_gelu_exact_config() {
  ModelConfig c = small_gpt2_config();
  c.gelu_exact = true;
  return c;
}

inline std::vector<ModelCase> model_cases() {
  return {{"gpt2", small_gpt2_config()},
          {"llama_gqa", small_llama_config(12, 6, 48, false)},           // tp 4 invalid
          {"llama_replicated_kv", small_llama_config(4, 2, 32, false)},  // tp 4: KV on 2 ranks
          {"llama_mqa_tied", small_llama_config(12, 1, 48, true)},       // one KV head
          {"mistral_window", small_mistral_config()},
          {"qwen2_window_llama3_rope", small_qwen2_config()},
          {"llama_biases_linear_rope", small_llama_biases_config()},
          {"gpt2_gelu_exact", small_gpt2_gelu_exact_config()}};
}

// Whether `config` is valid at `tp` (validate throws ConfigError otherwise).
inline bool valid_at(const ModelConfig& config, int tp) {
  try {
    validate(config, tp);
    return true;
  } catch (const ConfigError&) {
    return false;
  }
}

// `count` ids below `vocab`, the same on every rank for the same seed.
inline std::vector<int32_t> random_ids(uint64_t seed, int64_t count, int64_t vocab) {
  std::mt19937_64 gen(seed);
  std::vector<int32_t> ids(count);
  for (int32_t& id : ids) id = static_cast<int32_t>(gen() % vocab);
  return ids;
}

// A micro-batch of `rows` x `seq` random ids and targets below `vocab` (the
// same on every rank for the same seed); the targets of the first `ignored`
// tokens at every third position are ignore_index.
inline Batch random_batch(uint64_t seed, int64_t rows, int64_t seq, int64_t vocab,
                          int ignored = 0) {
  Batch b;
  b.rows = rows;
  b.seq_len = seq;
  b.ids = random_ids(seed, rows * seq, vocab);
  b.targets = random_ids(seed + 1000, rows * seq, vocab);
  for (int t = 0; t < ignored; ++t) b.targets[3 * t] = kIgnoreIndex;
  return b;
}

// The largest |gradient entry| over a model's parameters: the scale the
// model tests measure gradient errors against.
inline double largest_gradient(const std::vector<Parameter*>& parameters) {
  double largest = 0.0;
  for (const Parameter* p : parameters) {
    for (float g : p->grad.to_vector()) largest = std::max(largest, std::fabs(double{g}));
  }
  return largest;
}

}  // namespace colrow::testing
