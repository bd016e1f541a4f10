// ModelConfig: the shape of a GPT-style model, from a named preset or a
// Hugging Face config.json, and validate(config, tp), which checks every
// divisibility rule tensor parallelism imposes before anything is allocated.
// Families: gpt2 (LayerNorm, GELU MLP, learned positions, tied embeddings,
// biases) and llama (RMSNorm, SwiGLU, RoPE, GQA). Hugging Face's model types
// llama, mistral and qwen2 are the llama family with the options below.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "colrow/core/dtype.h"
#include "colrow/nn/rope_scaling.h"

namespace colrow {

enum class ModelFamily { kGpt2, kLlama };

const char* to_string(ModelFamily family);

struct ModelConfig {
  ModelFamily family = ModelFamily::kGpt2;
  int64_t vocab_size = 0;  // real tokens; the embedding pads it (vocab_multiple x tp)
  int64_t d_model = 0;
  int n_layer = 0;
  int n_head = 0;
  int n_kv_head = 0;     // == n_head: multi-head; 1: multi-query; else grouped
  int64_t head_dim = 0;  // d_model / n_head unless the checkpoint says otherwise
  int64_t ffn_hidden_size = 0;
  int64_t max_position_embeddings = 0;
  double norm_eps = 1e-5;
  double rope_theta = 10000.0;  // llama only
  RopeScaling rope_scaling;     // llama only
  bool tie_word_embeddings = true;
  // Biases: gpt2 has them all. llama: attention_bias (q, k, v, o) and
  // mlp_bias (gate, up, down); qwen2: q, k and v only.
  bool attention_qkv_bias = true;
  bool attention_output_bias = true;
  bool mlp_bias = true;
  // gpt2 only: GELU's tanh form (activation_function gelu_new, GPT-2's) or
  // the exact erf form ("gelu").
  bool gelu_exact = false;
  // Sliding-window attention (mistral; qwen2 with use_sliding_window): key j
  // is visible to query i iff i - sliding_window < j <= i. 0: fully causal.
  // Layers [0, max_window_layers) attend fully (qwen2's max_window_layers).
  int64_t sliding_window = 0;
  int max_window_layers = 0;
  // config.json's eos_token_id (one id or several): generation stops there.
  std::vector<int32_t> eos_token_ids;
  // config.json's model_type on save: "gpt2", or "llama", "mistral", "qwen2"
  // for the llama family. Empty: the family's name.
  std::string model_type;
  int64_t vocab_multiple = 128;  // Megatron's make-vocab-size-divisible-by

  // Parameters of the unsharded model (padding excluded; tied weights once).
  int64_t parameter_count() const;
  // The attention window of layer `layer` (0: fully causal).
  int64_t attention_window(int layer) const;
};

// Named shapes: gpt2-124m, gpt2-350m, gpt2-774m, gpt2-1558m, llama-7b; the
// byte-level gpt2-byte-mini and gpt2-byte-small (vocab 256); and the test
// sizes gpt2-tiny and llama-tiny. Unknown names are a ConfigError
// that lists the known ones.
ModelConfig model_preset(const std::string& name);
std::vector<std::string> model_preset_names();

// Parses a Hugging Face config.json (text); `source` names the file in
// errors. model_type selects the family: gpt2, or llama, mistral, qwen2. A
// missing or mistyped field is an InvalidInputError naming the file and the
// field. A field that would change the math and that colrow does not
// implement (an unknown rope_type, partial rotary, another activation, ...)
// is a ConfigError naming the field and its value: it is never ignored.
ModelConfig model_config_from_hf_json(const std::string& text, const std::string& source);
// Reads and parses `path` (a config.json).
ModelConfig load_hf_config(const std::string& path);
// What a --model flag names: a checkpoint directory (its config.json) or,
// otherwise, a preset (model_preset).
ModelConfig resolve_model_config(const std::string& directory_or_preset);
// The Hugging Face config.json text for `config` (what a checkpoint saves);
// torch_dtype names the dtype of the weights file beside it.
std::string hf_config_json(const ModelConfig& config, DType weights_dtype = DType::kF32);

// Pure and identical on every rank: sizes positive, n_head and the
// feed-forward width divisible by tp, key/value heads either divisible by tp
// or replicable (tp a multiple of n_kv_head), n_head a multiple of n_kv_head.
void validate(const ModelConfig& config, int tp);

}  // namespace colrow
