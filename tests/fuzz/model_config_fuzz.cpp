// Fuzzes config.json import (src/nn/model_config.cpp): the input is the file's
// text, given to model_config_from_hf_json (what load_hf_config reads). A
// config it accepts is then validated at several tp degrees; one that
// validates is written back with hf_config_json (what a checkpoint saves) and
// must read back as the same model, as a saved checkpoint must load.
// Expected for bad input: InvalidInputError (unreadable, missing or mistyped
// field) and ConfigError (a value colrow does not implement or that cannot
// work). A finding: a crash, an ASan or UBSan report, any other exception
// (nlohmann's own, InternalError), a saved config that does not load as the
// same model, a hang.
#include <cstdint>
#include <string>

#include "colrow/core/error.h"
#include "colrow/nn/model_config.h"
#include "finding.h"

namespace colrow::fuzz {
namespace {

constexpr const char* kTarget = "model_config";

// The fields that decide the model's math and its checkpoint's tensors.
bool same_model(const ModelConfig& a, const ModelConfig& b) {
  const RopeScaling &ra = a.rope_scaling, &rb = b.rope_scaling;
  bool same = a.family == b.family && a.vocab_size == b.vocab_size && a.d_model == b.d_model &&
              a.n_layer == b.n_layer && a.n_head == b.n_head && a.n_kv_head == b.n_kv_head &&
              a.head_dim == b.head_dim && a.ffn_hidden_size == b.ffn_hidden_size &&
              a.max_position_embeddings == b.max_position_embeddings && a.norm_eps == b.norm_eps &&
              a.rope_theta == b.rope_theta && ra.type == rb.type && ra.factor == rb.factor &&
              ra.low_freq_factor == rb.low_freq_factor &&
              ra.high_freq_factor == rb.high_freq_factor &&
              ra.original_max_position_embeddings == rb.original_max_position_embeddings &&
              a.tie_word_embeddings == b.tie_word_embeddings &&
              a.attention_qkv_bias == b.attention_qkv_bias &&
              a.attention_output_bias == b.attention_output_bias && a.mlp_bias == b.mlp_bias &&
              a.gelu_exact == b.gelu_exact && a.eos_token_ids == b.eos_token_ids &&
              a.model_type == b.model_type;
  // The window each layer attends over (how the fields spell it may differ).
  for (int layer = 0; same && layer < a.n_layer && layer < 4096; ++layer) {
    same = a.attention_window(layer) == b.attention_window(layer);
  }
  return same;
}

}  // namespace
}  // namespace colrow::fuzz

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace colrow;
  const std::string text(reinterpret_cast<const char*>(data), size);
  ModelConfig config;
  try {
    config = model_config_from_hf_json(text, "config.json");
  } catch (const InvalidInputError&) {
    return 0;
  } catch (const ConfigError&) {
    return 0;
  }
  for (const int tp : {2, 3, 4, 8}) {
    try {
      validate(config, tp);
    } catch (const ConfigError&) {
    }
  }
  try {
    validate(config, 1);
  } catch (const ConfigError&) {
    return 0;  // no model is built from it, so nothing is saved
  }
  std::string saved;
  try {
    saved = hf_config_json(config);
  } catch (const ConfigError&) {
    return 0;  // a model its model_type cannot express: refused by name
  }
  ModelConfig loaded;
  try {
    loaded = model_config_from_hf_json(saved, "saved config.json");
  } catch (const Error& e) {
    fuzz::report_finding(fuzz::kTarget, "a saved config does not load: ",
                         (std::string(e.what()) + "\n" + saved).c_str());
  }
  fuzz::require(fuzz::kTarget, fuzz::same_model(config, loaded),
                "a saved config loads as another model");
  return 0;
}
