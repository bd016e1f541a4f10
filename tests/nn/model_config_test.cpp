// ModelConfig: presets, Hugging Face config.json parsing for both families
// (with the field errors a broken file must give), the exported config.json
// round trip, parameter counts against the published model sizes, and
// validate(config, tp) with the messages a user sees.
#include "colrow/nn/model_config.h"

#include <gtest/gtest.h>

#include <string>

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
            "[config] a.json: model_type (bert) must be one of {gpt2, llama}.");
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

}  // namespace
}  // namespace colrow
