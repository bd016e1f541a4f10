// ModelConfig presets, Hugging Face config.json import/export, validation.
#include "colrow/nn/model_config.h"

#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>

#include "colrow/core/error.h"

namespace colrow {
namespace {

using nlohmann::json;

ModelConfig gpt2(int n_layer, int n_head, int64_t d_model, int64_t vocab = 50257,
                 int64_t positions = 1024) {
  ModelConfig c;
  c.family = ModelFamily::kGpt2;
  c.vocab_size = vocab;
  c.d_model = d_model;
  c.n_layer = n_layer;
  c.n_head = c.n_kv_head = n_head;
  c.head_dim = d_model / n_head;
  c.ffn_hidden_size = 4 * d_model;
  c.max_position_embeddings = positions;
  c.norm_eps = 1e-5;
  c.tie_word_embeddings = true;
  return c;
}

ModelConfig llama(int n_layer, int n_head, int n_kv_head, int64_t d_model, int64_t ffn,
                  int64_t vocab, int64_t positions) {
  ModelConfig c;
  c.family = ModelFamily::kLlama;
  c.vocab_size = vocab;
  c.d_model = d_model;
  c.n_layer = n_layer;
  c.n_head = n_head;
  c.n_kv_head = n_kv_head;
  c.head_dim = d_model / n_head;
  c.ffn_hidden_size = ffn;
  c.max_position_embeddings = positions;
  c.norm_eps = 1e-5;
  c.rope_theta = 10000.0;
  c.tie_word_embeddings = false;
  c.attention_qkv_bias = c.attention_output_bias = c.mlp_bias = false;
  return c;
}

const std::map<std::string, ModelConfig>& presets() {
  static const std::map<std::string, ModelConfig> table = {
      {"gpt2-124m", gpt2(12, 12, 768)},
      {"gpt2-350m", gpt2(24, 16, 1024)},
      {"gpt2-774m", gpt2(36, 20, 1280)},
      {"gpt2-1558m", gpt2(48, 25, 1600)},
      {"gpt2-tiny", gpt2(2, 4, 64, 256, 128)},
      // Byte-level (vocab 256) models for the default corpus: the demo's, and
      // the PyTorch peer's "small" configuration (../shared/peers).
      {"gpt2-byte-mini", gpt2(4, 4, 128, 256, 256)},
      {"gpt2-byte-small", gpt2(6, 6, 384, 256, 256)},
      {"llama-7b", llama(32, 32, 32, 4096, 11008, 32000, 4096)},
      {"llama-tiny", llama(2, 4, 2, 64, 192, 256, 128)},
  };
  return table;
}

// Typed field access with errors that name the file and the field.
class Fields {
 public:
  Fields(const json& j, std::string source) : j_(j), source_(std::move(source)) {}

  bool has(const char* key) const { return j_.contains(key) && !j_.at(key).is_null(); }

  int64_t integer(const char* key) const {
    const json& v = at(key);
    if (!v.is_number_integer()) wrong_type(key, "an integer", v);
    return v.get<int64_t>();
  }
  double number(const char* key) const {
    const json& v = at(key);
    if (!v.is_number()) wrong_type(key, "a number", v);
    return v.get<double>();
  }
  bool boolean(const char* key) const {
    const json& v = at(key);
    if (!v.is_boolean()) wrong_type(key, "true or false", v);
    return v.get<bool>();
  }
  std::string string(const char* key) const {
    const json& v = at(key);
    if (!v.is_string()) wrong_type(key, "a string", v);
    return v.get<std::string>();
  }
  int64_t integer_or(const char* key, int64_t fallback) const {
    return has(key) ? integer(key) : fallback;
  }
  // For ModelConfig's int fields (layers, heads): a value past int is
  // refused, never truncated (n_layer 4294967298 would read as 2).
  int int_field(const char* key) const {
    const int64_t v = integer(key);
    if (v < std::numeric_limits<int>::min() || v > std::numeric_limits<int>::max()) {
      wrong_type(key, "an integer that fits in 32 bits", at(key));
    }
    return static_cast<int>(v);
  }
  int int_field_or(const char* key, int fallback) const {
    return has(key) ? int_field(key) : fallback;
  }
  double number_or(const char* key, double fallback) const {
    return has(key) ? number(key) : fallback;
  }
  bool boolean_or(const char* key, bool fallback) const {
    return has(key) ? boolean(key) : fallback;
  }
  std::string string_or(const char* key, const std::string& fallback) const {
    return has(key) ? string(key) : fallback;
  }
  // The nested object `key` (its fields' errors name it), or null when absent.
  std::optional<Fields> object(const char* key) const {
    if (!has(key)) return std::nullopt;
    const json& v = at(key);
    if (!v.is_object()) wrong_type(key, "an object", v);
    return Fields(v, source_ + " " + key);
  }
  // A ConfigError: `key` holds `value`, which colrow does not implement.
  [[noreturn]] void unsupported(const char* key, const std::string& value,
                                const std::string& rule) const {
    throw ConfigError("[config] " + source_ + ": " + key + " (" + value + ") " + rule);
  }
  const json& raw(const char* key) const { return at(key); }

 private:
  const json& at(const char* key) const {
    if (!has(key)) {
      throw InvalidInputError("[config] " + source_ + ": field " + key +
                              " is missing. Add it, as Hugging Face's config.json has it.");
    }
    return j_.at(key);
  }
  [[noreturn]] void wrong_type(const char* key, const char* want, const json& v) const {
    throw InvalidInputError("[config] " + source_ + ": field " + key + " (" + v.dump() +
                            ") must be " + want + ".");
  }

  const json& j_;
  std::string source_;
};

// eos_token_id: absent or null (none), one id, or a list of ids (Llama 3.1).
std::vector<int32_t> parse_eos_token_ids(const Fields& f) {
  if (!f.has("eos_token_id")) return {};
  const json& v = f.raw("eos_token_id");
  std::vector<int32_t> ids;
  for (const json& id : v.is_array() ? v : json::array({v})) {
    if (!id.is_number_integer() || id.get<int64_t>() < 0 ||
        id.get<int64_t>() > std::numeric_limits<int32_t>::max()) {
      f.unsupported("eos_token_id", v.dump(), "must be a token id or a list of token ids.");
    }
    ids.push_back(static_cast<int32_t>(id.get<int64_t>()));
  }
  return ids;
}

// GPT-2's MLP activation: the tanh form under its several names, or the exact erf form.
bool parse_gelu_exact(const Fields& f) {
  const std::string act = f.string_or("activation_function", "gelu_new");
  if (act == "gelu_new" || act == "gelu_pytorch_tanh" || act == "gelu_fast") return false;
  if (act == "gelu") return true;
  f.unsupported("activation_function", act,
                "is not implemented. colrow's gpt2 implements {gelu_new, gelu_pytorch_tanh, "
                "gelu_fast} (GELU's tanh form) and gelu (the exact erf form).");
}

ModelConfig parse_gpt2(const Fields& f) {
  ModelConfig c;
  c.family = ModelFamily::kGpt2;
  c.model_type = "gpt2";
  c.vocab_size = f.integer("vocab_size");
  c.d_model = f.integer("n_embd");
  c.n_layer = f.int_field("n_layer");
  c.n_head = c.n_kv_head = f.int_field("n_head");
  c.head_dim = c.n_head > 0 ? c.d_model / c.n_head : 0;
  // n_inner null or absent: 4 x n_embd, which must fit in 64 bits (n_embd may be 2^62).
  if (f.has("n_inner")) {
    c.ffn_hidden_size = f.integer("n_inner");
  } else if (__builtin_mul_overflow(c.d_model, int64_t{4}, &c.ffn_hidden_size)) {
    f.unsupported("n_embd", std::to_string(c.d_model),
                  "is too large: 4 x n_embd, the default n_inner, must fit in 64 bits.");
  }
  c.max_position_embeddings = f.integer("n_positions");
  c.norm_eps = f.number_or("layer_norm_epsilon", 1e-5);
  c.tie_word_embeddings = f.boolean_or("tie_word_embeddings", true);
  c.gelu_exact = parse_gelu_exact(f);
  c.eos_token_ids = parse_eos_token_ids(f);
  // Options of GPT2Attention that change the scores; colrow scales by 1/sqrt(head_dim) only.
  if (!f.boolean_or("scale_attn_weights", true)) {
    f.unsupported("scale_attn_weights", "false",
                  "is not implemented: colrow always scales scores by 1/sqrt(head_dim).");
  }
  if (f.boolean_or("scale_attn_by_inverse_layer_idx", false)) {
    f.unsupported("scale_attn_by_inverse_layer_idx", "true",
                  "is not implemented: colrow scales scores by 1/sqrt(head_dim) only.");
  }
  if (f.boolean_or("add_cross_attention", false)) {
    f.unsupported("add_cross_attention", "true",
                  "is not implemented: colrow's gpt2 is a decoder-only language model.");
  }
  return c;
}

// rope_type "default", "linear" or "llama3" and its fields; anything else is refused.
RopeScaling parse_rope_scaling(const Fields& r) {
  RopeScaling s;
  const std::string type =
      r.has("rope_type") ? r.string("rope_type") : r.string_or("type", "default");
  if (type == "default") return s;
  if (type == "linear") {
    s.type = RopeType::kLinear;
    s.factor = r.number("factor");
  } else if (type == "llama3") {
    s.type = RopeType::kLlama3;
    s.factor = r.number("factor");
    s.low_freq_factor = r.number("low_freq_factor");
    s.high_freq_factor = r.number("high_freq_factor");
    s.original_max_position_embeddings = r.integer("original_max_position_embeddings");
  } else {
    r.unsupported("rope_type", type,
                  "is not implemented. colrow implements {default, linear, llama3}; a checkpoint "
                  "with another RoPE scaling would give wrong results, so it is refused.");
  }
  validate(s);
  return s;
}

// Partial rotary (RoPE on a fraction of each head) is not implemented.
void refuse_partial_rotary(const Fields& f) {
  if (!f.has("partial_rotary_factor")) return;
  const double factor = f.number("partial_rotary_factor");
  if (factor == 1.0) return;
  std::ostringstream value;
  value << factor;
  f.unsupported("partial_rotary_factor", value.str(),
                "is not implemented: colrow rotates whole heads (1.0).");
}

// Which layers use the sliding window, from layer_types when the file has it:
// full attention for layers [0, k), sliding for [k, n_layer).
void parse_layer_types(const Fields& f, ModelConfig& c) {
  if (!f.has("layer_types")) return;
  const json& types = f.raw("layer_types");
  const std::string listed = types.dump();
  if (!types.is_array() || static_cast<int64_t>(types.size()) != c.n_layer) {
    f.unsupported("layer_types", listed, "must list one entry per layer (num_hidden_layers).");
  }
  int first_sliding = c.n_layer;
  for (int i = 0; i < c.n_layer; ++i) {
    const json& t = types[i];
    const bool sliding = t == "sliding_attention";
    if (!sliding && t != "full_attention") {
      f.unsupported("layer_types", listed,
                    "is not implemented: colrow implements full_attention and sliding_attention.");
    }
    if (sliding && first_sliding == c.n_layer) first_sliding = i;
    if (!sliding && first_sliding < i) {
      f.unsupported("layer_types", listed,
                    "is not implemented: colrow slides the window over a final run of layers "
                    "(qwen2's max_window_layers), not a full_attention layer after a sliding one.");
    }
  }
  if (first_sliding == c.n_layer) {
    c.sliding_window = 0;
  } else if (c.sliding_window == 0) {
    f.unsupported("layer_types", listed,
                  "names sliding_attention layers but sliding_window is null.");
  }
  c.max_window_layers = first_sliding == c.n_layer ? 0 : first_sliding;
}

// llama, mistral and qwen2: LLaMA's math (RMSNorm, RoPE, GQA, SwiGLU) with
// the biases and attention window each model type adds.
ModelConfig parse_llama_family(const Fields& f, const std::string& type) {
  ModelConfig c;
  c.family = ModelFamily::kLlama;
  c.model_type = type;
  c.vocab_size = f.integer("vocab_size");
  c.d_model = f.integer("hidden_size");
  c.ffn_hidden_size = f.integer("intermediate_size");
  c.n_layer = f.int_field("num_hidden_layers");
  c.n_head = f.int_field("num_attention_heads");
  c.n_kv_head = f.int_field_or("num_key_value_heads", c.n_head);
  c.head_dim = f.integer_or("head_dim", c.n_head > 0 ? c.d_model / c.n_head : 0);
  c.max_position_embeddings = f.integer("max_position_embeddings");
  c.norm_eps = f.number_or("rms_norm_eps", 1e-6);
  c.tie_word_embeddings = f.boolean_or("tie_word_embeddings", false);
  c.eos_token_ids = parse_eos_token_ids(f);
  const std::string act = f.string_or("hidden_act", "silu");
  if (act != "silu") {
    f.unsupported("hidden_act", act,
                  "is not implemented for model_type " + type +
                      ": colrow's llama-family MLP is SwiGLU, silu(gate) * up.");
  }
  // Newer transformers nest rope_theta and the scaling under rope_parameters;
  // older ones keep rope_theta at the top and the scaling in rope_scaling.
  const std::optional<Fields> parameters = f.object("rope_parameters");
  const std::optional<Fields> scaling = f.object("rope_scaling");
  c.rope_theta = f.has("rope_theta") ? f.number("rope_theta")
                 : parameters        ? parameters->number_or("rope_theta", 10000.0)
                                     : 10000.0;
  if (parameters) {
    c.rope_scaling = parse_rope_scaling(*parameters);
    refuse_partial_rotary(*parameters);
  } else if (scaling) {
    c.rope_scaling = parse_rope_scaling(*scaling);
  }
  refuse_partial_rotary(f);
  if (type == "llama") {
    c.attention_qkv_bias = c.attention_output_bias = f.boolean_or("attention_bias", false);
    c.mlp_bias = f.boolean_or("mlp_bias", false);
  } else if (type == "mistral") {
    c.attention_qkv_bias = c.attention_output_bias = c.mlp_bias = false;
    c.sliding_window = f.integer_or("sliding_window", 0);
  } else {  // qwen2: biases on q, k and v (Qwen2Attention hard-codes them)
    c.attention_qkv_bias = true;
    c.attention_output_bias = c.mlp_bias = false;
    if (f.boolean_or("use_sliding_window", false)) {
      c.sliding_window = f.integer_or("sliding_window", 0);
      c.max_window_layers = f.int_field_or("max_window_layers", 28);
    }
  }
  if (f.has("sliding_window") && c.sliding_window < 0) {
    f.unsupported("sliding_window", std::to_string(c.sliding_window),
                  "must be positive, or null for full attention.");
  }
  // transformers 5 lists qwen2's layers; llama's and mistral's configs have no layer_types.
  if (type == "qwen2") parse_layer_types(f, c);
  return c;
}

std::string choices(const std::vector<int64_t>& values) {
  std::ostringstream s;
  s << "{";
  for (size_t i = 0; i < values.size(); ++i) s << (i ? ", " : "") << values[i];
  s << "}";
  return s.str();
}

void require_positive(const char* field, int64_t value) {
  if (value >= 1) return;
  throw ConfigError(std::string("[config] ") + field + " (" + std::to_string(value) +
                    ") must be positive.");
}

}  // namespace

const char* to_string(ModelFamily family) {
  return family == ModelFamily::kGpt2 ? "gpt2" : "llama";
}

int64_t ModelConfig::parameter_count() const {
  const int64_t d = d_model, q = static_cast<int64_t>(n_head) * head_dim,
                kv = static_cast<int64_t>(n_kv_head) * head_dim;
  const bool gpt = family == ModelFamily::kGpt2;
  const int64_t attention = d * (q + 2 * kv) + q * d + (attention_qkv_bias ? q + 2 * kv : 0) +
                            (attention_output_bias ? d : 0);
  const int64_t mlp = gpt ? 2 * d * ffn_hidden_size + (mlp_bias ? ffn_hidden_size + d : 0)
                          : 3 * d * ffn_hidden_size + (mlp_bias ? 2 * ffn_hidden_size + d : 0);
  const int64_t norms = gpt ? 2 * 2 * d : 2 * d;
  int64_t total = n_layer * (attention + mlp + norms);
  total += vocab_size * d;                            // token embedding
  if (gpt) total += max_position_embeddings * d;      // learned positions
  total += gpt ? 2 * d : d;                           // final norm
  if (!tie_word_embeddings) total += vocab_size * d;  // separate output head
  return total;
}

int64_t ModelConfig::attention_window(int layer) const {
  return layer >= max_window_layers ? sliding_window : 0;
}

ModelConfig model_preset(const std::string& name) {
  const auto it = presets().find(name);
  if (it != presets().end()) return it->second;
  std::string known;
  for (const std::string& n : model_preset_names()) known += (known.empty() ? "" : ", ") + n;
  throw ConfigError("[config] model (" + name + ") is not a known preset. Choose one of {" + known +
                    "} or pass a directory with a config.json.");
}

std::vector<std::string> model_preset_names() {
  std::vector<std::string> names;
  for (const auto& entry : presets()) names.push_back(entry.first);
  return names;
}

ModelConfig model_config_from_hf_json(const std::string& text, const std::string& source) {
  json j;
  try {
    j = json::parse(text);
  } catch (const json::exception& e) {  // parse_error, and out_of_range for a number like 1e999
    throw InvalidInputError("[config] " + source + " is not valid JSON: " + e.what());
  }
  if (!j.is_object()) {
    throw InvalidInputError("[config] " + source + " must hold a JSON object.");
  }
  const Fields f(j, source);
  const std::string type = f.string("model_type");
  if (type == "gpt2") return parse_gpt2(f);
  if (type == "llama" || type == "mistral" || type == "qwen2") return parse_llama_family(f, type);
  throw InvalidInputError("[config] " + source + ": model_type (" + type +
                          ") must be one of {gpt2, llama, mistral, qwen2}.");
}

ModelConfig load_hf_config(const std::string& path) {
  std::ifstream in(path);
  if (!in) {
    throw InvalidInputError("[config] cannot read " + path +
                            ". Pass a checkpoint directory holding config.json.");
  }
  std::ostringstream text;
  text << in.rdbuf();
  return model_config_from_hf_json(text.str(), path);
}

namespace {

json rope_scaling_json(const RopeScaling& s) {
  json r = {{"rope_type", to_string(s.type)}, {"factor", s.factor}};
  if (s.type == RopeType::kLlama3) {
    r["low_freq_factor"] = s.low_freq_factor;
    r["high_freq_factor"] = s.high_freq_factor;
    r["original_max_position_embeddings"] = s.original_max_position_embeddings;
  }
  return r;
}

// The llama-family fields of `c` as its model_type spells them; a
// ConfigError when that model type cannot express them.
void llama_family_json(const ModelConfig& c, const std::string& type, json& j) {
  const auto refuse = [&](const std::string& what) {
    throw ConfigError("[config] model_type " + type + " cannot express " + what +
                      ". Choose the model_type whose config.json has it (llama: attention_bias, "
                      "mlp_bias; mistral: sliding_window; qwen2: q/k/v biases, "
                      "use_sliding_window).");
  };
  const bool all_attention_bias = c.attention_qkv_bias && c.attention_output_bias;
  const bool any_attention_bias = c.attention_qkv_bias || c.attention_output_bias;
  if (type == "llama") {
    if (any_attention_bias && !all_attention_bias) refuse("q/k/v biases without an o_proj bias");
    if (c.sliding_window != 0) refuse("a sliding window");
    j["attention_bias"] = all_attention_bias;
    j["mlp_bias"] = c.mlp_bias;
  } else if (type == "mistral") {
    if (any_attention_bias || c.mlp_bias) refuse("biases");
    if (c.max_window_layers != 0) refuse("full-attention layers below max_window_layers");
    j["sliding_window"] = c.sliding_window > 0 ? json(c.sliding_window) : json(nullptr);
  } else if (type == "qwen2") {
    if (!c.attention_qkv_bias || c.attention_output_bias || c.mlp_bias) {
      refuse("biases other than on q, k and v");
    }
    j["use_sliding_window"] = c.sliding_window > 0;
    j["sliding_window"] = c.sliding_window > 0 ? json(c.sliding_window) : json(nullptr);
    j["max_window_layers"] = c.max_window_layers;
  } else {
    throw ConfigError("[config] model_type (" + type +
                      ") must be one of {llama, mistral, qwen2} for the llama family.");
  }
}

const char* architecture_of(const std::string& type) {
  if (type == "mistral") return "MistralForCausalLM";
  if (type == "qwen2") return "Qwen2ForCausalLM";
  return "LlamaForCausalLM";
}

}  // namespace

std::string hf_config_json(const ModelConfig& c, DType weights_dtype) {
  json j;
  if (c.family == ModelFamily::kGpt2) {
    if (!(c.attention_qkv_bias && c.attention_output_bias && c.mlp_bias) || c.sliding_window != 0) {
      throw ConfigError(
          "[config] model_type gpt2 cannot express a model without biases or with "
          "a sliding window. Use a llama-family model_type.");
    }
    j = {{"model_type", "gpt2"},
         {"architectures", {"GPT2LMHeadModel"}},
         {"vocab_size", c.vocab_size},
         {"n_embd", c.d_model},
         {"n_layer", c.n_layer},
         {"n_head", c.n_head},
         {"n_inner", c.ffn_hidden_size},
         {"n_positions", c.max_position_embeddings},
         {"layer_norm_epsilon", c.norm_eps},
         {"activation_function", c.gelu_exact ? "gelu" : "gelu_new"},
         {"tie_word_embeddings", c.tie_word_embeddings}};
  } else {
    const std::string type = c.model_type.empty() ? "llama" : c.model_type;
    j = {{"model_type", type},
         {"architectures", {architecture_of(type)}},
         {"vocab_size", c.vocab_size},
         {"hidden_size", c.d_model},
         {"intermediate_size", c.ffn_hidden_size},
         {"num_hidden_layers", c.n_layer},
         {"num_attention_heads", c.n_head},
         {"num_key_value_heads", c.n_kv_head},
         {"head_dim", c.head_dim},
         {"max_position_embeddings", c.max_position_embeddings},
         {"rms_norm_eps", c.norm_eps},
         {"rope_theta", c.rope_theta},
         {"hidden_act", "silu"},
         {"tie_word_embeddings", c.tie_word_embeddings}};
    if (c.rope_scaling.type != RopeType::kDefault)
      j["rope_scaling"] = rope_scaling_json(c.rope_scaling);
    llama_family_json(c, type, j);
  }
  if (c.eos_token_ids.size() == 1) j["eos_token_id"] = c.eos_token_ids.front();
  if (c.eos_token_ids.size() > 1) j["eos_token_id"] = c.eos_token_ids;
  j["torch_dtype"] = weights_dtype == DType::kBF16 ? "bfloat16" : "float32";
  return j.dump(2) + "\n";
}

void validate(const ModelConfig& c, int tp) {
  require_positive("vocab_size", c.vocab_size);
  require_positive("d_model", c.d_model);
  require_positive("n_layer", c.n_layer);
  require_positive("n_head", c.n_head);
  require_positive("n_kv_head", c.n_kv_head);
  require_positive("head_dim", c.head_dim);
  require_positive("ffn_hidden_size", c.ffn_hidden_size);
  require_positive("max_position_embeddings", c.max_position_embeddings);
  require_positive("vocab_multiple", c.vocab_multiple);
  if (c.family == ModelFamily::kGpt2 && c.d_model != c.n_head * c.head_dim) {
    throw ConfigError("[config] d_model (" + std::to_string(c.d_model) + ") must equal n_head (" +
                      std::to_string(c.n_head) + ") x head_dim (" + std::to_string(c.head_dim) +
                      ") for gpt2. Choose n_head dividing d_model.");
  }
  if (c.n_head % c.n_kv_head != 0) {
    throw ConfigError("[config] n_head (" + std::to_string(c.n_head) +
                      ") must be a multiple of n_kv_head (" + std::to_string(c.n_kv_head) +
                      "). Choose n_kv_head in " + choices(divisors(c.n_head)) + ".");
  }
  require_divisible("config", "n_head", c.n_head, tp);
  if (c.n_kv_head % tp != 0 && tp % c.n_kv_head != 0) {
    // Valid tp: divisors of n_head that divide n_kv_head or are multiples of it.
    std::vector<int64_t> valid;
    for (int64_t t : divisors(c.n_head)) {
      if (c.n_kv_head % t == 0 || t % c.n_kv_head == 0) valid.push_back(t);
    }
    throw ConfigError("[config] n_kv_head (" + std::to_string(c.n_kv_head) + ") and tp (" +
                      std::to_string(tp) +
                      "): tp must divide n_kv_head or be a multiple of it (to replicate key/value "
                      "heads). Choose tp in " +
                      choices(valid) + ".");
  }
  require_divisible("config", "ffn_hidden_size", c.ffn_hidden_size, tp);
  if (c.sliding_window < 0 || c.max_window_layers < 0 || c.max_window_layers > c.n_layer) {
    throw ConfigError("[config] sliding_window (" + std::to_string(c.sliding_window) +
                      ") must be >= 0 (0: none) and max_window_layers (" +
                      std::to_string(c.max_window_layers) + ") within [0, n_layer (" +
                      std::to_string(c.n_layer) + ")].");
  }
  if (c.family == ModelFamily::kGpt2 && c.rope_scaling.type != RopeType::kDefault) {
    throw ConfigError("[config] rope_scaling (" + std::string(to_string(c.rope_scaling.type)) +
                      ") needs RoPE: gpt2 has learned positions. Use the llama family.");
  }
  if (c.family == ModelFamily::kLlama && c.gelu_exact) {
    throw ConfigError("[config] gelu_exact is gpt2's option: the llama family's MLP is SwiGLU.");
  }
  validate(c.rope_scaling);
}

ModelConfig resolve_model_config(const std::string& directory_or_preset) {
  return std::filesystem::is_directory(directory_or_preset)
             ? load_hf_config(directory_or_preset + "/config.json")
             : model_preset(directory_or_preset);
}

}  // namespace colrow
