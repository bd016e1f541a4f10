// Checkpoints beyond the round trip of gpt_model_test: GPT-2 files with the
// "transformer." prefix load the same; the layouts are Hugging Face's (Conv1D
// weights stored [in, out], c_attn = [Q | K | V] along its output dim, padded
// vocabulary rows not stored); a missing tensor or a shape that disagrees
// with config.json is one clear error naming the file and the tensor; a save
// into an unwritable place fails before it touches anything.
#include "colrow/nn/checkpoint.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "colrow/core/error.h"
#include "colrow/dist/local_communicator.h"
#include "colrow/io/safetensors.h"
#include "support/temp_dir.h"

namespace colrow {
namespace {

class CheckpointTest : public ::testing::Test {
 protected:
  // Copies src's model.safetensors into dst (with config.json), renaming or
  // dropping tensors along the way.
  void rewrite(const std::string& src, const std::string& dst, const std::string& prefix,
               const std::string& drop = "") {
    ::mkdir(dst.c_str(), 0755);
    ASSERT_EQ(std::system(("cp " + src + "/config.json " + dst + "/config.json").c_str()), 0);
    SafetensorsReader in(src + "/model.safetensors");
    std::vector<std::pair<std::string, Shape>> entries;
    for (const auto& [name, info] : in.tensors()) {
      if (name != drop) entries.emplace_back(prefix + name, info.shape);
    }
    SafetensorsWriter out(alone_, dst + "/model.safetensors", entries);
    for (const auto& [name, info] : in.tensors()) {
      if (name == drop) continue;
      Tensor t = Tensor::empty(info.shape);
      in.read_rows(name, 0, info.shape[0], t);
      out.write_rows(prefix + name, 0, t);
    }
    out.commit();
  }

  static std::string error_of(GptModel& model, const std::string& dir) {
    try {
      load_checkpoint(model, dir);
    } catch (const InvalidInputError& e) {
      return e.what();
    }
    return "(no error)";
  }

  LocalCommunicator alone_;
  testing::TempDir temp_{"checkpoint_test"};
  std::string dir_ = temp_.path();
};

TEST_F(CheckpointTest, Gpt2FileUsesHuggingFaceNamesAndLayouts) {
  const ModelConfig config = model_preset("gpt2-tiny");  // d 64, 4 heads, vocab 256
  GptModel model(alone_, config, 3);
  save_checkpoint(model, dir_ + "/ckpt", alone_);
  SafetensorsReader file(dir_ + "/ckpt/model.safetensors");
  const int64_t d = config.d_model;
  EXPECT_EQ(file.info("wte.weight").shape, (Shape{256, d}));
  EXPECT_EQ(file.info("wpe.weight").shape, (Shape{128, d}));
  EXPECT_EQ(file.info("h.0.attn.c_attn.weight").shape, (Shape{d, 3 * d}));  // Conv1D [in, out]
  EXPECT_EQ(file.info("h.0.attn.c_attn.bias").shape, (Shape{3 * d}));
  EXPECT_EQ(file.info("h.0.attn.c_proj.weight").shape, (Shape{d, d}));
  EXPECT_EQ(file.info("h.0.mlp.c_fc.weight").shape, (Shape{d, 4 * d}));
  EXPECT_EQ(file.info("h.0.mlp.c_proj.weight").shape, (Shape{4 * d, d}));
  EXPECT_EQ(file.info("ln_f.bias").shape, (Shape{d}));
  EXPECT_FALSE(file.contains("h.0.attn.q_proj.weight"));
  EXPECT_FALSE(file.contains("lm_head.weight"));  // tied to wte

  // c_attn[i][j] (Conv1D: input i, output j) is q_proj.weight[j][i] for
  // j < d, k_proj.weight[j - d][i], then v_proj.weight[j - 2d][i].
  Tensor c_attn = Tensor::empty({d, 3 * d});
  file.read_rows("h.0.attn.c_attn.weight", 0, d, c_attn);
  Tensor c_fc = Tensor::empty({d, 4 * d});
  file.read_rows("h.0.mlp.c_fc.weight", 0, d, c_fc);
  for (Parameter* p : model.parameters()) {
    if (p->name == "h.0.attn.k_proj.weight") {
      for (int64_t i : {int64_t{0}, d - 1}) {
        for (int64_t j : {int64_t{0}, int64_t{5}, d - 1}) {
          EXPECT_EQ(c_attn(i, d + j), p->value(j, i)) << i << "," << j;
        }
      }
    }
    if (p->name == "h.0.mlp.c_fc.weight") {
      EXPECT_EQ(c_fc(3, 7), p->value(7, 3));
    }
  }
}

TEST_F(CheckpointTest, Gpt2PrefixedNamesLoadTheSame) {
  const ModelConfig config = model_preset("gpt2-tiny");
  GptModel saved(alone_, config, 3);
  save_checkpoint(saved, dir_ + "/plain", alone_);
  rewrite(dir_ + "/plain", dir_ + "/prefixed", "transformer.");
  GptModel loaded(alone_, config, 99);
  load_checkpoint(loaded, dir_ + "/prefixed");
  const std::vector<Parameter*> a = saved.parameters(), b = loaded.parameters();
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(a[i]->value.to_vector(), b[i]->value.to_vector()) << a[i]->name;
  }
}

TEST_F(CheckpointTest, MissingTensorNamesFileAndTensor) {
  const ModelConfig config = model_preset("llama-tiny");
  GptModel model(alone_, config, 3);
  save_checkpoint(model, dir_ + "/full", alone_);
  rewrite(dir_ + "/full", dir_ + "/partial", "", "model.layers.1.mlp.up_proj.weight");
  const std::string m = error_of(model, dir_ + "/partial");
  EXPECT_NE(m.find(dir_ + "/partial/model.safetensors"), std::string::npos) << m;
  EXPECT_NE(m.find("model.layers.1.mlp.up_proj.weight"), std::string::npos) << m;
}

TEST_F(CheckpointTest, ShapeThatDisagreesWithTheConfigIsAnError) {
  ModelConfig config = model_preset("llama-tiny");
  GptModel model(alone_, config, 3);
  save_checkpoint(model, dir_ + "/ckpt", alone_);
  config.ffn_hidden_size = 128;  // the file was written with 192
  GptModel other(alone_, config, 3);
  EXPECT_EQ(error_of(other, dir_ + "/ckpt"),
            "[checkpoint] " + dir_ + "/ckpt/model.safetensors: tensor " +
                "model.layers.0.mlp.gate_proj.weight has shape [192, 64] but config.json implies "
                "[128, 64].");
}

TEST_F(CheckpointTest, UnwritableDirectoryFailsBeforeWriting) {
  GptModel model(alone_, model_preset("gpt2-tiny"), 3);
  try {
    save_checkpoint(model, dir_ + "/no/such/parent", alone_);
    ADD_FAILURE() << "no error";
  } catch (const InvalidInputError& e) {
    EXPECT_NE(std::string(e.what()).find("cannot create directory " + dir_ + "/no/such/parent"),
              std::string::npos)
        << e.what();
  }
}

TEST_F(CheckpointTest, ASecondSaveReplacesTheFirstWhole) {
  const ModelConfig config = model_preset("gpt2-tiny");
  GptModel first(alone_, config, 3), second(alone_, config, 4);
  save_checkpoint(first, dir_ + "/ckpt", alone_);
  save_checkpoint(second, dir_ + "/ckpt", alone_);
  GptModel loaded(alone_, config, 5);
  load_checkpoint(loaded, dir_ + "/ckpt");
  EXPECT_EQ(loaded.parameters()[0]->value.to_vector(), second.parameters()[0]->value.to_vector());
  EXPECT_NE(access((dir_ + "/ckpt/model.safetensors.tmp").c_str(), F_OK), 0);
  EXPECT_NE(access((dir_ + "/ckpt/config.json.tmp").c_str(), F_OK), 0);
}

}  // namespace
}  // namespace colrow
