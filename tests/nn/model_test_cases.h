// Small whole-model configurations shared by the model, gradient-norm and
// checkpoint tests: gpt2 and llama with grouped, replicated and multi-query
// key/value heads, vocabulary 300 so padding is exercised at every tp; plus
// the helpers those tests all need.
#pragma once

#include <cstdint>
#include <random>
#include <vector>

#include "colrow/core/error.h"
#include "colrow/nn/model_config.h"

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

inline std::vector<ModelCase> model_cases() {
  return {{"gpt2", small_gpt2_config()},
          {"llama_gqa", small_llama_config(12, 6, 48, false)},           // tp 4 invalid
          {"llama_replicated_kv", small_llama_config(4, 2, 32, false)},  // tp 4: KV on 2 ranks
          {"llama_mqa_tied", small_llama_config(12, 1, 48, true)}};      // one KV head
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

}  // namespace colrow::testing
