// ModelConfig presets, Hugging Face config.json import/export, validation.
#include "colrow/nn/model_config.h"

#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
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
  double number_or(const char* key, double fallback) const {
    return has(key) ? number(key) : fallback;
  }
  bool boolean_or(const char* key, bool fallback) const {
    return has(key) ? boolean(key) : fallback;
  }

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

ModelConfig parse_gpt2(const Fields& f) {
  ModelConfig c;
  c.family = ModelFamily::kGpt2;
  c.vocab_size = f.integer("vocab_size");
  c.d_model = f.integer("n_embd");
  c.n_layer = static_cast<int>(f.integer("n_layer"));
  c.n_head = c.n_kv_head = static_cast<int>(f.integer("n_head"));
  c.head_dim = c.n_head > 0 ? c.d_model / c.n_head : 0;
  c.ffn_hidden_size = f.integer_or("n_inner", 4 * c.d_model);
  c.max_position_embeddings = f.integer("n_positions");
  c.norm_eps = f.number_or("layer_norm_epsilon", 1e-5);
  c.tie_word_embeddings = f.boolean_or("tie_word_embeddings", true);
  return c;
}

ModelConfig parse_llama(const json& j, const Fields& f, const std::string& source) {
  ModelConfig c;
  c.family = ModelFamily::kLlama;
  c.vocab_size = f.integer("vocab_size");
  c.d_model = f.integer("hidden_size");
  c.ffn_hidden_size = f.integer("intermediate_size");
  c.n_layer = static_cast<int>(f.integer("num_hidden_layers"));
  c.n_head = static_cast<int>(f.integer("num_attention_heads"));
  c.n_kv_head = static_cast<int>(f.integer_or("num_key_value_heads", c.n_head));
  c.head_dim = f.integer_or("head_dim", c.n_head > 0 ? c.d_model / c.n_head : 0);
  c.max_position_embeddings = f.integer("max_position_embeddings");
  c.norm_eps = f.number_or("rms_norm_eps", 1e-6);
  c.tie_word_embeddings = f.boolean_or("tie_word_embeddings", false);
  // Newer transformers nest rope_theta under rope_parameters.
  if (f.has("rope_theta")) {
    c.rope_theta = f.number("rope_theta");
  } else if (j.contains("rope_parameters") && j.at("rope_parameters").is_object()) {
    c.rope_theta = Fields(j.at("rope_parameters"), source + " rope_parameters")
                       .number_or("rope_theta", 10000.0);
  }
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
  const int64_t attention = d * (q + 2 * kv) + q * d + (gpt ? q + 2 * kv + d : 0);
  const int64_t mlp = gpt ? 2 * d * ffn_hidden_size + ffn_hidden_size + d : 3 * d * ffn_hidden_size;
  const int64_t norms = gpt ? 2 * 2 * d : 2 * d;
  int64_t total = n_layer * (attention + mlp + norms);
  total += vocab_size * d;                            // token embedding
  if (gpt) total += max_position_embeddings * d;      // learned positions
  total += gpt ? 2 * d : d;                           // final norm
  if (!tie_word_embeddings) total += vocab_size * d;  // separate output head
  return total;
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
  } catch (const json::parse_error& e) {
    throw InvalidInputError("[config] " + source + " is not valid JSON: " + e.what());
  }
  if (!j.is_object()) {
    throw InvalidInputError("[config] " + source + " must hold a JSON object.");
  }
  const Fields f(j, source);
  const std::string type = f.string("model_type");
  if (type == "gpt2") return parse_gpt2(f);
  if (type == "llama") return parse_llama(j, f, source);
  throw InvalidInputError("[config] " + source + ": model_type (" + type +
                          ") must be one of {gpt2, llama}.");
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

std::string hf_config_json(const ModelConfig& c) {
  json j;
  if (c.family == ModelFamily::kGpt2) {
    j = {{"model_type", "gpt2"},
         {"architectures", {"GPT2LMHeadModel"}},
         {"vocab_size", c.vocab_size},
         {"n_embd", c.d_model},
         {"n_layer", c.n_layer},
         {"n_head", c.n_head},
         {"n_inner", c.ffn_hidden_size},
         {"n_positions", c.max_position_embeddings},
         {"layer_norm_epsilon", c.norm_eps},
         {"activation_function", "gelu_new"},
         {"tie_word_embeddings", c.tie_word_embeddings}};
  } else {
    j = {{"model_type", "llama"},
         {"architectures", {"LlamaForCausalLM"}},
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
  }
  j["torch_dtype"] = "float32";
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
}

ModelConfig resolve_model_config(const std::string& directory_or_preset) {
  return std::filesystem::is_directory(directory_or_preset)
             ? load_hf_config(directory_or_preset + "/config.json")
             : model_preset(directory_or_preset);
}

}  // namespace colrow
