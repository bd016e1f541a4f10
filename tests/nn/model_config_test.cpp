// ModelConfig: presets, Hugging Face config.json parsing for both families
// (with the field errors a broken file must give), the exported config.json
// round trip, parameter counts against the published model sizes, and
// validate(config, tp) with the messages a user sees.
#include "colrow/nn/model_config.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "colrow/core/error.h"

namespace colrow {
namespace {

const char* kGpt2Json = R"({
  "model_type": "gpt2", "vocab_size": 50257, "n_embd": 768, "n_layer": 12, "n_head": 12,
  "n_positions": 1024, "layer_norm_epsilon": 1e-05, "activation_function": "gelu_new"
})";

const char* kLlamaJson = R"({
  "model_type": "llama", "vocab_size": 32000, "hidden_size": 4096, "intermediate_size": 11008,
  "num_hidden_layers": 32, "num_attention_heads": 32, "num_key_value_heads": 8,
  "max_position_embeddings": 4096, "rms_norm_eps": 1e-06, "rope_theta": 500000.0,
  "tie_word_embeddings": false
})";

template <typename Fn>
std::string message_of(Fn fn) {
  try {
    fn();
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

TEST(ModelConfigTest, Gpt2PresetMatchesThePublishedSize) {
  const ModelConfig c = model_preset("gpt2-124m");
  EXPECT_EQ(c.family, ModelFamily::kGpt2);
  EXPECT_EQ(c.d_model, 768);
  EXPECT_EQ(c.head_dim, 64);
  EXPECT_EQ(c.ffn_hidden_size, 3072);
  // GPT-2 small has 124,439,808 parameters (wte tied with the output head).
  EXPECT_EQ(c.parameter_count(), 124439808);
}

TEST(ModelConfigTest, Llama7bPresetMatchesThePublishedSize) {
  // LLaMA-7B: 6,738,415,616 parameters (untied output head).
  EXPECT_EQ(model_preset("llama-7b").parameter_count(), 6738415616);
}

TEST(ModelConfigTest, UnknownPresetListsTheKnownOnes) {
  const std::string m = message_of([] { model_preset("gpt5"); });
  EXPECT_NE(m.find("[config] model (gpt5) is not a known preset"), std::string::npos) << m;
  EXPECT_NE(m.find("gpt2-124m"), std::string::npos) << m;
  EXPECT_NE(m.find("llama-tiny"), std::string::npos) << m;
}

TEST(ModelConfigTest, ParsesGpt2ConfigJson) {
  const ModelConfig c = model_config_from_hf_json(kGpt2Json, "gpt2/config.json");
  EXPECT_EQ(c.family, ModelFamily::kGpt2);
  EXPECT_EQ(c.vocab_size, 50257);
  EXPECT_EQ(c.n_layer, 12);
  EXPECT_EQ(c.n_kv_head, 12);
  EXPECT_EQ(c.ffn_hidden_size, 3072);  // n_inner absent: 4 x n_embd
  EXPECT_EQ(c.max_position_embeddings, 1024);
  EXPECT_DOUBLE_EQ(c.norm_eps, 1e-5);
  EXPECT_TRUE(c.tie_word_embeddings);
  EXPECT_EQ(c.parameter_count(), model_preset("gpt2-124m").parameter_count());
}

TEST(ModelConfigTest, ParsesLlamaConfigJsonWithGqa) {
  const ModelConfig c = model_config_from_hf_json(kLlamaJson, "llama/config.json");
  EXPECT_EQ(c.family, ModelFamily::kLlama);
  EXPECT_EQ(c.n_head, 32);
  EXPECT_EQ(c.n_kv_head, 8);
  EXPECT_EQ(c.head_dim, 128);
  EXPECT_EQ(c.ffn_hidden_size, 11008);
  EXPECT_DOUBLE_EQ(c.norm_eps, 1e-6);
  EXPECT_DOUBLE_EQ(c.rope_theta, 500000.0);
  EXPECT_FALSE(c.tie_word_embeddings);
}

TEST(ModelConfigTest, RopeThetaUnderRopeParameters) {
  const ModelConfig c = model_config_from_hf_json(
      R"({"model_type": "llama", "vocab_size": 256, "hidden_size": 64,
          "intermediate_size": 192, "num_hidden_layers": 2, "num_attention_heads": 4,
          "max_position_embeddings": 128,
          "rope_parameters": {"rope_type": "default", "rope_theta": 1000000.0}})",
      "c.json");
  EXPECT_DOUBLE_EQ(c.rope_theta, 1e6);
  EXPECT_EQ(c.n_kv_head, 4);  // num_key_value_heads absent: multi-head
}

TEST(ModelConfigTest, MissingFieldNamesFileAndField) {
  const std::string m = message_of([] {
    model_config_from_hf_json(R"({"model_type": "gpt2", "vocab_size": 10, "n_embd": 8,
                                  "n_layer": 1, "n_positions": 4})",
                              "ckpt/config.json");
  });
  EXPECT_EQ(m,
            "[config] ckpt/config.json: field n_head is missing. Add it, as Hugging Face's "
            "config.json has it.");
}

TEST(ModelConfigTest, WrongTypeNamesFileFieldAndValue) {
  const std::string m = message_of([] {
    model_config_from_hf_json(R"({"model_type": "gpt2", "vocab_size": 10, "n_embd": "768",
                                  "n_layer": 1, "n_head": 1, "n_positions": 4})",
                              "ckpt/config.json");
  });
  EXPECT_EQ(m, "[config] ckpt/config.json: field n_embd (\"768\") must be an integer.");
}

TEST(ModelConfigTest, InvalidJsonAndUnknownTypeAndMissingFile) {
  EXPECT_NE(message_of([] {
              model_config_from_hf_json("{not json", "a.json");
            }).find("[config] a.json is not valid JSON"),
            std::string::npos);
  EXPECT_EQ(message_of([] { model_config_from_hf_json("[1, 2]", "a.json"); }),
            "[config] a.json must hold a JSON object.");
  EXPECT_EQ(message_of([] { model_config_from_hf_json(R"({"model_type": "bert"})", "a.json"); }),
            "[config] a.json: model_type (bert) must be one of {gpt2, llama, mistral, qwen2}.");
  EXPECT_NE(message_of([] {
              load_hf_config("/nonexistent/config.json");
            }).find("[config] cannot read /nonexistent/config.json"),
            std::string::npos);
}

TEST(ModelConfigTest, ExportedConfigJsonReadsBackTheSame) {
  for (const std::string& name : model_preset_names()) {
    const ModelConfig c = model_preset(name);
    const ModelConfig back = model_config_from_hf_json(hf_config_json(c), name);
    EXPECT_EQ(back.family, c.family) << name;
    EXPECT_EQ(back.vocab_size, c.vocab_size) << name;
    EXPECT_EQ(back.d_model, c.d_model) << name;
    EXPECT_EQ(back.n_layer, c.n_layer) << name;
    EXPECT_EQ(back.n_head, c.n_head) << name;
    EXPECT_EQ(back.n_kv_head, c.n_kv_head) << name;
    EXPECT_EQ(back.head_dim, c.head_dim) << name;
    EXPECT_EQ(back.ffn_hidden_size, c.ffn_hidden_size) << name;
    EXPECT_EQ(back.max_position_embeddings, c.max_position_embeddings) << name;
    EXPECT_DOUBLE_EQ(back.norm_eps, c.norm_eps) << name;
    EXPECT_EQ(back.tie_word_embeddings, c.tie_word_embeddings) << name;
    if (c.family == ModelFamily::kLlama) {
      EXPECT_DOUBLE_EQ(back.rope_theta, c.rope_theta) << name;
    }
  }
}

TEST(ModelConfigTest, ValidateAcceptsEveryDivisibleTp) {
  const ModelConfig c = model_preset("gpt2-124m");
  for (int tp : {1, 2, 3, 4, 6, 12}) EXPECT_NO_THROW(validate(c, tp)) << tp;
  ModelConfig g = model_config_from_hf_json(kLlamaJson, "l.json");  // 32 heads, 8 kv heads
  for (int tp : {1, 2, 4, 8, 16, 32}) EXPECT_NO_THROW(validate(g, tp)) << tp;  // 16, 32 replicate
}

TEST(ModelConfigTest, ValidateNamesTheRuleAndTheChoices) {
  EXPECT_EQ(message_of([] { validate(model_preset("gpt2-124m"), 5); }),
            "[config] n_head (12) must be divisible by tp (5). Choose tp in {1, 2, 3, 4, 6, 12}.");
  ModelConfig c = model_preset("llama-tiny");  // 4 heads, 2 kv heads
  c.n_head = 6;
  c.n_kv_head = 3;
  c.head_dim = c.d_model / 6;
  EXPECT_EQ(message_of([&] { validate(c, 2); }),
            "[config] n_kv_head (3) and tp (2): tp must divide n_kv_head or be a multiple of it "
            "(to replicate key/value heads). Choose tp in {1, 3, 6}.");
  c.n_kv_head = 4;
  EXPECT_EQ(message_of([&] { validate(c, 1); }),
            "[config] n_head (6) must be a multiple of n_kv_head (4). Choose n_kv_head in "
            "{1, 2, 3, 6}.");
  ModelConfig f = model_preset("gpt2-tiny");
  f.ffn_hidden_size = 250;
  EXPECT_EQ(message_of([&] { validate(f, 4); }),
            "[config] ffn_hidden_size (250) must be divisible by tp (4). Choose tp in "
            "{1, 2, 5, 10, 25, 50, 125, 250}.");
  ModelConfig z = model_preset("gpt2-tiny");
  z.n_layer = 0;
  EXPECT_EQ(message_of([&] { validate(z, 1); }), "[config] n_layer (0) must be positive.");
}

// --- Model families: what each Hugging Face model_type adds to LLaMA's math.

// A llama-family config.json with `extra` fields (JSON members, comma-led).
std::string llama_family_json(const std::string& type, const std::string& extra) {
  return R"({"model_type": ")" + type + R"(", "vocab_size": 256, "hidden_size": 64,
      "intermediate_size": 192, "num_hidden_layers": 4, "num_attention_heads": 4,
      "num_key_value_heads": 2, "max_position_embeddings": 128)" +
         extra + "}";
}

ModelConfig parse(const std::string& text) {
  return model_config_from_hf_json(text, "c.json");
}

// The 4-layer model of llama_family_json under `type`, with no extra fields.
ModelConfig small_config_of(const std::string& type) {
  return parse(llama_family_json(type, ""));
}

TEST(ModelConfigTest, ParsesLlama31RopeScaling) {
  // Llama 3.1 8B's config.json fields.
  const ModelConfig c = parse(llama_family_json("llama", R"(, "rope_theta": 500000.0,
      "rope_scaling": {"factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                       "original_max_position_embeddings": 8192, "rope_type": "llama3"})"));
  EXPECT_EQ(c.rope_scaling.type, RopeType::kLlama3);
  EXPECT_DOUBLE_EQ(c.rope_scaling.factor, 8.0);
  EXPECT_DOUBLE_EQ(c.rope_scaling.low_freq_factor, 1.0);
  EXPECT_DOUBLE_EQ(c.rope_scaling.high_freq_factor, 4.0);
  EXPECT_EQ(c.rope_scaling.original_max_position_embeddings, 8192);
  EXPECT_DOUBLE_EQ(c.rope_theta, 500000.0);
}

TEST(ModelConfigTest, ParsesLinearRopeScalingInEverySpelling) {
  // Old transformers: rope_scaling {"type": ...}; then {"rope_type": ...};
  // transformers 5: rope_parameters holding rope_theta too.
  for (const std::string extra :
       {R"(, "rope_scaling": {"type": "linear", "factor": 4.0})",
        R"(, "rope_scaling": {"rope_type": "linear", "factor": 4.0})",
        R"(, "rope_parameters": {"rope_type": "linear", "factor": 4.0, "rope_theta": 10000.0})"}) {
    const ModelConfig c = parse(llama_family_json("llama", extra));
    EXPECT_EQ(c.rope_scaling.type, RopeType::kLinear) << extra;
    EXPECT_DOUBLE_EQ(c.rope_scaling.factor, 4.0) << extra;
  }
  EXPECT_EQ(parse(llama_family_json("llama", R"(, "rope_scaling": null)")).rope_scaling.type,
            RopeType::kDefault);
}

TEST(ModelConfigTest, ParsesLlamaAttentionAndMlpBias) {
  const ModelConfig plain = parse(llama_family_json("llama", ""));
  EXPECT_FALSE(plain.attention_qkv_bias || plain.attention_output_bias || plain.mlp_bias);
  const ModelConfig c =
      parse(llama_family_json("llama", R"(, "attention_bias": true, "mlp_bias": true)"));
  EXPECT_TRUE(c.attention_qkv_bias && c.attention_output_bias && c.mlp_bias);
  // q (4 x 16) + k, v (2 x 16 each) + o (64) + gate, up (192 each) + down (64), per layer.
  EXPECT_EQ(c.parameter_count() - plain.parameter_count(), 4 * (64 + 2 * 32 + 64 + 2 * 192 + 64));
}

TEST(ModelConfigTest, ParsesMistralSlidingWindow) {
  const ModelConfig c = parse(llama_family_json("mistral", R"(, "sliding_window": 16)"));
  EXPECT_EQ(c.family, ModelFamily::kLlama);
  EXPECT_EQ(c.model_type, "mistral");
  EXPECT_EQ(c.sliding_window, 16);
  for (int layer = 0; layer < c.n_layer; ++layer) EXPECT_EQ(c.attention_window(layer), 16);
  EXPECT_FALSE(c.attention_qkv_bias || c.attention_output_bias || c.mlp_bias);
  // Mistral 7B v0.2 and later: "sliding_window": null, full attention.
  EXPECT_EQ(parse(llama_family_json("mistral", R"(, "sliding_window": null)")).sliding_window, 0);
}

TEST(ModelConfigTest, ParsesQwen2BiasesAndItsWindowedUpperLayers) {
  // Qwen2.5's files: use_sliding_window false, the window unused.
  const ModelConfig c = parse(llama_family_json(
      "qwen2", R"(, "use_sliding_window": false, "sliding_window": 32768, "max_window_layers": 2,
                   "tie_word_embeddings": true, "rope_theta": 1000000.0)"));
  EXPECT_TRUE(c.attention_qkv_bias);
  EXPECT_FALSE(c.attention_output_bias || c.mlp_bias);
  EXPECT_EQ(c.sliding_window, 0);
  EXPECT_TRUE(c.tie_word_embeddings);
  const ModelConfig plain = parse(llama_family_json("llama", R"(, "tie_word_embeddings": true)"));
  EXPECT_EQ(c.parameter_count() - plain.parameter_count(), 4 * (64 + 2 * 32));
  // With the window on, layers from max_window_layers up slide (HF's Qwen2).
  const ModelConfig w = parse(llama_family_json(
      "qwen2", R"(, "use_sliding_window": true, "sliding_window": 8, "max_window_layers": 2)"));
  EXPECT_EQ(w.attention_window(0), 0);
  EXPECT_EQ(w.attention_window(1), 0);
  EXPECT_EQ(w.attention_window(2), 8);
  EXPECT_EQ(w.attention_window(3), 8);
  // transformers 5 lists the layers instead.
  const ModelConfig t =
      parse(llama_family_json("qwen2", R"(, "use_sliding_window": true, "sliding_window": 8,
                   "layer_types": ["full_attention", "sliding_attention",
                   "sliding_attention", "sliding_attention"])"));
  EXPECT_EQ(t.attention_window(0), 0);
  EXPECT_EQ(t.attention_window(1), 8);
}

TEST(ModelConfigTest, FieldsThatChangeTheMathAreRefusedNotIgnored) {
  const std::string rope = R"(, "rope_scaling": {"rope_type": ")";
  const struct {
    std::string json, message;
  } cases[] = {
      {llama_family_json("llama", rope + R"(yarn", "factor": 4.0})"),
       "[config] c.json rope_scaling: rope_type (yarn) is not implemented. colrow implements "
       "{default, linear, llama3}; a checkpoint with another RoPE scaling would give wrong "
       "results, so it is refused."},
      {llama_family_json("llama", rope + R"(dynamic", "factor": 2.0})"),
       "[config] c.json rope_scaling: rope_type (dynamic) is not implemented. colrow implements "
       "{default, linear, llama3}; a checkpoint with another RoPE scaling would give wrong "
       "results, so it is refused."},
      {llama_family_json("llama", R"(, "partial_rotary_factor": 0.5)"),
       "[config] c.json: partial_rotary_factor (0.5) is not implemented: colrow rotates whole "
       "heads (1.0)."},
      {llama_family_json("llama", R"(, "rope_parameters": {"rope_type": "default",
                                      "partial_rotary_factor": 0.25})"),
       "[config] c.json rope_parameters: partial_rotary_factor (0.25) is not implemented: colrow "
       "rotates whole heads (1.0)."},
      {llama_family_json("llama", R"(, "hidden_act": "gelu")"),
       "[config] c.json: hidden_act (gelu) is not implemented for model_type llama: colrow's "
       "llama-family MLP is SwiGLU, silu(gate) * up."},
      {R"({"model_type": "gpt2", "vocab_size": 10, "n_embd": 8, "n_layer": 1, "n_head": 1,
           "n_positions": 4, "activation_function": "relu"})",
       "[config] c.json: activation_function (relu) is not implemented. colrow's gpt2 implements "
       "{gelu_new, gelu_pytorch_tanh, gelu_fast} (GELU's tanh form) and gelu (the exact erf "
       "form)."},
      {R"({"model_type": "gpt2", "vocab_size": 10, "n_embd": 8, "n_layer": 1, "n_head": 1,
           "n_positions": 4, "scale_attn_by_inverse_layer_idx": true})",
       "[config] c.json: scale_attn_by_inverse_layer_idx (true) is not implemented: colrow "
       "scales scores by 1/sqrt(head_dim) only."},
      {R"({"model_type": "gpt2", "vocab_size": 10, "n_embd": 8, "n_layer": 1, "n_head": 1,
           "n_positions": 4, "scale_attn_weights": false})",
       "[config] c.json: scale_attn_weights (false) is not implemented: colrow always scales "
       "scores by 1/sqrt(head_dim)."},
      {llama_family_json("qwen2", R"(, "use_sliding_window": true, "sliding_window": 8,
                          "layer_types": ["sliding_attention",
                          "full_attention", "full_attention", "full_attention"])"),
       "[config] c.json: layer_types ([\"sliding_attention\",\"full_attention\","
       "\"full_attention\",\"full_attention\"]) is not implemented: colrow slides the window "
       "over a final run of layers (qwen2's max_window_layers), not a full_attention layer "
       "after a sliding one."},
      {llama_family_json("mistral", R"(, "sliding_window": -4)"),
       "[config] c.json: sliding_window (-4) must be positive, or null for full attention."},
      {llama_family_json("llama", rope + R"(linear", "factor": 0.0})"),
       "[config] rope_scaling.factor (0) must be positive."},
      {llama_family_json("llama", rope + R"(llama3", "factor": 8.0, "low_freq_factor": 4.0,
                          "high_freq_factor": 1.0, "original_max_position_embeddings": 64})"),
       "[config] rope_scaling low_freq_factor (4) and high_freq_factor (1) must satisfy 0 < "
       "low_freq_factor < high_freq_factor (llama3)."},
  };
  for (const auto& c : cases) {
    EXPECT_EQ(message_of([&] { parse(c.json); }), c.message) << c.json;
    EXPECT_THROW(parse(c.json), ConfigError) << c.json;
  }
}

TEST(ModelConfigTest, ParsesEosTokenIdAsOneIdOrAList) {
  EXPECT_TRUE(parse(llama_family_json("llama", "")).eos_token_ids.empty());
  EXPECT_TRUE(parse(llama_family_json("llama", R"(, "eos_token_id": null)")).eos_token_ids.empty());
  EXPECT_EQ(parse(llama_family_json("llama", R"(, "eos_token_id": 2)")).eos_token_ids,
            std::vector<int32_t>{2});
  // Llama 3.1's list.
  EXPECT_EQ(parse(llama_family_json("llama", R"(, "eos_token_id": [128001, 128008, 128009])"))
                .eos_token_ids,
            (std::vector<int32_t>{128001, 128008, 128009}));
  EXPECT_EQ(message_of([] { parse(llama_family_json("llama", R"(, "eos_token_id": [2, -1])")); }),
            "[config] c.json: eos_token_id ([2,-1]) must be a token id or a list of token ids.");
  EXPECT_THROW(parse(llama_family_json("llama", R"(, "eos_token_id": "</s>")")), ConfigError);
}

// What validate() adds for the family options: a window and its layers in
// range, RoPE scaling only with RoPE, the exact GELU only in gpt2's MLP.
TEST(ModelConfigTest, ValidateRefusesFamilyOptionsThatCannotApply) {
  ModelConfig w = small_config_of("mistral");
  w.sliding_window = -1;
  EXPECT_EQ(message_of([&] { validate(w, 1); }),
            "[config] sliding_window (-1) must be >= 0 (0: none) and max_window_layers (0) within "
            "[0, n_layer (4)].");
  w.sliding_window = 8;
  w.max_window_layers = 5;
  EXPECT_THROW(validate(w, 1), ConfigError);
  ModelConfig g = model_preset("gpt2-tiny");
  g.rope_scaling.type = RopeType::kLinear;
  g.rope_scaling.factor = 2.0;
  EXPECT_EQ(message_of([&] { validate(g, 1); }),
            "[config] rope_scaling (linear) needs RoPE: gpt2 has learned positions. Use the llama "
            "family.");
  ModelConfig l = model_preset("llama-tiny");
  l.gelu_exact = true;
  EXPECT_EQ(message_of([&] { validate(l, 1); }),
            "[config] gelu_exact is gpt2's option: the llama family's MLP is SwiGLU.");
}

// config.json cannot express every combination of flags: what a model type
// has no field for is refused when saving, not written as something else.
TEST(ModelConfigTest, ExportRefusesWhatTheModelTypeCannotExpress) {
  ModelConfig g = model_preset("gpt2-tiny");
  g.mlp_bias = false;
  EXPECT_EQ(message_of([&] { hf_config_json(g); }),
            "[config] model_type gpt2 cannot express a model without biases or with a sliding "
            "window. Use a llama-family model_type.");
  ModelConfig l = model_preset("llama-tiny");
  l.attention_qkv_bias = true;  // qwen2's layout under model_type llama
  EXPECT_EQ(message_of([&] { hf_config_json(l); }),
            "[config] model_type llama cannot express q/k/v biases without an o_proj bias. Choose "
            "the model_type whose config.json has it (llama: attention_bias, mlp_bias; mistral: "
            "sliding_window; qwen2: q/k/v biases, use_sliding_window).");
  l.model_type = "qwen2";
  EXPECT_NO_THROW(hf_config_json(l));
}

TEST(ModelConfigTest, EveryFamilyOptionSurvivesTheExportedConfigJson) {
  std::vector<ModelConfig> configs;
  configs.push_back(parse(llama_family_json("llama", R"(, "attention_bias": true, "mlp_bias": true,
      "rope_scaling": {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                       "high_freq_factor": 4.0, "original_max_position_embeddings": 64})")));
  configs.push_back(parse(
      llama_family_json("llama", R"(, "rope_scaling": {"rope_type": "linear", "factor": 2.0})")));
  configs.push_back(parse(llama_family_json("mistral", R"(, "sliding_window": 16)")));
  configs.push_back(parse(llama_family_json(
      "qwen2", R"(, "use_sliding_window": true, "sliding_window": 8, "max_window_layers": 3)")));
  ModelConfig gelu = model_preset("gpt2-tiny");
  gelu.gelu_exact = true;
  configs.push_back(gelu);
  for (const ModelConfig& c : configs) {
    const ModelConfig back = parse(hf_config_json(c));
    const std::string what = c.model_type;
    EXPECT_EQ(back.model_type, c.model_type.empty() ? "gpt2" : c.model_type) << what;
    EXPECT_EQ(back.rope_scaling.type, c.rope_scaling.type) << what;
    EXPECT_DOUBLE_EQ(back.rope_scaling.factor, c.rope_scaling.factor) << what;
    EXPECT_DOUBLE_EQ(back.rope_scaling.low_freq_factor, c.rope_scaling.low_freq_factor) << what;
    EXPECT_DOUBLE_EQ(back.rope_scaling.high_freq_factor, c.rope_scaling.high_freq_factor) << what;
    EXPECT_EQ(back.rope_scaling.original_max_position_embeddings,
              c.rope_scaling.original_max_position_embeddings)
        << what;
    EXPECT_EQ(back.attention_qkv_bias, c.attention_qkv_bias) << what;
    EXPECT_EQ(back.attention_output_bias, c.attention_output_bias) << what;
    EXPECT_EQ(back.mlp_bias, c.mlp_bias) << what;
    EXPECT_EQ(back.gelu_exact, c.gelu_exact) << what;
    EXPECT_EQ(back.sliding_window, c.sliding_window) << what;
    EXPECT_EQ(back.max_window_layers, c.max_window_layers) << what;
    EXPECT_EQ(back.parameter_count(), c.parameter_count()) << what;
  }
  // A combination no model_type can write is refused, not saved wrong.
  ModelConfig odd = configs[2];  // mistral
  odd.mlp_bias = true;
  EXPECT_THROW(hf_config_json(odd), ConfigError);
}

// Found by tests/fuzz/model_config_fuzz: nlohmann reports a number too large
// for a double (1e999) as out_of_range, not parse_error, and it escaped.
TEST(ModelConfigTest, NumberTooLargeForADoubleIsInvalidJson) {
  const std::string m = message_of([] {
    model_config_from_hf_json(R"({"model_type": "gpt2", "layer_norm_epsilon": 1e999})", "a.json");
  });
  EXPECT_NE(m.find("[config] a.json is not valid JSON"), std::string::npos) << m;
  EXPECT_THROW(model_config_from_hf_json("[64e77777]", "a.json"), InvalidInputError);
}

// Found while writing tests/fuzz/model_config_fuzz: without n_inner, gpt2's
// default 4 x n_embd overflowed int64 (undefined behaviour) for n_embd near 2^63.
TEST(ModelConfigTest, DefaultFfnWidthOfAHugeGpt2IsRefused) {
  const std::string m = message_of([] {
    model_config_from_hf_json(
        R"({"model_type": "gpt2", "vocab_size": 1, "n_embd": 9223372036854775807,
            "n_layer": 1, "n_head": 1, "n_positions": 1})",
        "a.json");
  });
  EXPECT_EQ(m,
            "[config] a.json: n_embd (9223372036854775807) is too large: 4 x n_embd, the default "
            "n_inner, must fit in 64 bits.");
  // Given explicitly, n_inner is taken as it is (validate() judges it).
  EXPECT_EQ(model_config_from_hf_json(
                R"({"model_type": "gpt2", "vocab_size": 1, "n_embd": 4611686018427387904,
                    "n_layer": 1, "n_head": 1, "n_positions": 1, "n_inner": 8})",
                "a.json")
                .ffn_hidden_size,
            8);
}

// Layer and head counts are ints: a larger value is refused, never truncated
// (4294967298 layers read as 2 before).
TEST(ModelConfigTest, CountsPastIntAreRefusedNotTruncated) {
  EXPECT_EQ(message_of([] {
              model_config_from_hf_json(R"({"model_type": "gpt2", "vocab_size": 10, "n_embd": 8,
                                            "n_layer": 4294967298, "n_head": 1, "n_positions": 4})",
                                        "a.json");
            }),
            "[config] a.json: field n_layer (4294967298) must be an integer that fits in 32 bits.");
  EXPECT_THROW(model_config_from_hf_json(
                   R"({"model_type": "llama", "vocab_size": 32, "hidden_size": 8,
                       "intermediate_size": 8, "num_hidden_layers": 1, "num_attention_heads": 2,
                       "num_key_value_heads": -4294967295, "max_position_embeddings": 4})",
                   "a.json"),
               InvalidInputError);
}

}  // namespace
}  // namespace colrow
