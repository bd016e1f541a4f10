// OutputHead at tp = world size, against the double reference (the logits
// h W^T over the real classes, then support/vocab_reference's
// cross-entropy): the per-token losses, dh and the weight gradient, whole and
// in token chunks, with lm_head and with a tied table; lm_head's shard and
// zero padded rows; the misuses that throw; the chunk-rows rule.
#include "colrow/nn/output_head.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <optional>
#include <random>

#include "colrow/core/error.h"
#include "colrow/nn/column_parallel_linear.h"
#include "colrow/nn/vocab_parallel_embedding.h"
#include "nn/layer_test_helpers.h"
#include "nn/model_test_cases.h"
#include "support/reference.h"
#include "support/test_world.h"
#include "support/vocab_reference.h"

namespace colrow {
namespace {

using reference::Matrix;
using testing::world;

constexpr int64_t kTokens = 12;
constexpr uint64_t kSeed = 29;

ModelConfig config() {
  return testing::small_llama_config(4, 2, 32, /*tied=*/false);  // vocab 300, d_model 32
}

std::vector<int32_t> targets(int64_t vocab) {
  std::mt19937_64 gen(7);
  std::vector<int32_t> t(kTokens);
  for (int32_t& v : t) v = static_cast<int32_t>(gen() % vocab);
  t[3] = kIgnoreIndex;  // one that does not count
  return t;
}

// Every |error| below is that of an fp32 sum of at most max(d_model, vocab,
// tokens) = 300 terms of magnitude below 1 (the logits' inputs are in
// [-1, 1), the weights normal(0.02) or U(-1, 1)/10, the gradients
// probabilities / 11): gamma_300 = 300 u = 1.8e-5 relative to the sum of
// magnitudes, each at most a few units. 1e-4 absolute holds that with
// room, and a wrong chunk, row or scale is off by 1e-2 or more.
constexpr double kTolerance = 1e-4;

void expect_near(const std::string& what, const std::vector<float>& got, const Matrix& want) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t i = 0; i < got.size(); ++i) {
    ASSERT_NEAR(got[i], want[i], kTolerance) << what << "[" << i << "]";
  }
}

// The head (lm_head, or a tied table of random values) at this tp, whole
// (budget 0) or in chunks of 5 rows, against the reference: losses, dh
// (summed over tp) and this rank's rows of the weight gradient.
TEST(OutputHeadTest, MatchesTheReferenceWholeAndInChunks) {
  Communicator& tp = world();
  const ModelConfig c = config();
  const int64_t padded = padded_vocab_size(c.vocab_size, tp.size(), c.vocab_multiple);
  const int64_t local = padded / tp.size(), d = c.d_model;
  const std::vector<int32_t> t = targets(c.vocab_size);
  const Tensor normed = testing::random_tensor({kTokens, d}, 1);
  for (bool tied : {false, true}) {
    for (int64_t budget : {int64_t{0}, 5 * local * 4}) {
      SCOPED_TRACE(std::string(tied ? "tied" : "lm_head") + (budget ? ", chunks" : ", whole"));
      std::optional<Parameter> table;
      if (tied) {
        table.emplace("wte.weight", output_rows({padded, d}, {tp.rank(), tp.size()}),
                      Init::uniform(0.1f), kSeed);
      }
      OutputHead head(tp, c, padded, kSeed, tied ? &*table : nullptr, false);
      head.set_chunk_bytes(budget);
      Parameter& w = tied ? *table : *head.parameters().at(0);
      EXPECT_EQ(head.parameters().size(), tied ? 0u : 1u);
      const Tensor w_full = testing::gather_shards(tp, w.value, 0);

      const CrossEntropyOutput out = head.forward(normed, t, Pass::kTrain);
      const std::vector<float> losses = out.losses.to_vector();
      const Tensor dh = head.backward().clone();

      // The reference over the real classes (the padded rows never count).
      const Matrix x = testing::to_matrix(normed), wm = testing::to_matrix(w_full);
      Matrix logits(static_cast<size_t>(kTokens * c.vocab_size), 0.0);
      for (int64_t i = 0; i < kTokens; ++i) {
        for (int64_t v = 0; v < c.vocab_size; ++v) {
          for (int64_t k = 0; k < d; ++k)
            logits[i * c.vocab_size + v] += x[i * d + k] * wm[v * d + k];
        }
      }
      const auto ref =
          reference::cross_entropy(logits, t, kTokens, c.vocab_size, 0.0, kIgnoreIndex);
      const int64_t counted = kTokens - 1;
      EXPECT_EQ(out.counted, counted);
      expect_near("losses", losses, ref.losses);
      // d mean / d logits = dlogits / counted; dh = that W, dW = that^T normed.
      Matrix dh_ref(static_cast<size_t>(kTokens * d), 0.0);
      Matrix dw_ref(static_cast<size_t>(padded * d), 0.0);
      for (int64_t i = 0; i < kTokens; ++i) {
        for (int64_t v = 0; v < c.vocab_size; ++v) {
          const double g = ref.dlogits[i * c.vocab_size + v] / counted;
          for (int64_t k = 0; k < d; ++k) {
            dh_ref[i * d + k] += g * wm[v * d + k];
            dw_ref[v * d + k] += g * x[i * d + k];
          }
        }
      }
      expect_near("dh", dh.to_vector(), dh_ref);
      expect_near("dW, my vocab rows", w.grad.to_vector(),
                  testing::block(dw_ref, padded, d, 0, tp.rank(), tp.size()));
    }
  }
}

// lm_head.weight: normal(0.02) drawn by its name over [V_pad, d_model], split
// by vocab rows like a column-parallel weight, the padded rows zero.
TEST(OutputHeadTest, LmHeadIsSplitByVocabRowsWithZeroPadding) {
  Communicator& tp = world();
  const ModelConfig c = config();
  const int64_t padded = padded_vocab_size(c.vocab_size, tp.size(), c.vocab_multiple);
  OutputHead head(tp, c, padded, kSeed, nullptr, false);
  ASSERT_EQ(head.parameters().size(), 1u);
  const Parameter& w = *head.parameters()[0];
  EXPECT_EQ(w.name, "lm_head.weight");
  EXPECT_EQ(w.shard.full_shape, (Shape{padded, c.d_model}));
  EXPECT_EQ(w.shard.index, tp.rank());
  EXPECT_EQ(w.shard.count, tp.size());
  const std::vector<float> got = testing::gather_shards(tp, w.value, 0).to_vector();
  const std::vector<float> drawn =
      testing::full_parameter("lm_head.weight", {padded, c.d_model}, Init::normal(0.02f), kSeed)
          .to_vector();
  for (int64_t i = 0; i < padded * c.d_model; ++i) {
    ASSERT_EQ(got[i], i < c.vocab_size * c.d_model ? drawn[i] : 0.0f) << "element " << i;
  }
}

TEST(OutputHeadTest, MisusesThrow) {
  Communicator& tp = world();
  const ModelConfig c = config();
  const int64_t padded = padded_vocab_size(c.vocab_size, tp.size(), c.vocab_multiple);
  const int64_t local = padded / tp.size();
  OutputHead head(tp, c, padded, kSeed, nullptr, false);
  EXPECT_THROW(head.backward(), InternalError) << "no forward";
  EXPECT_THROW(head.set_chunk_bytes(-1), ConfigError);
  head.set_chunk_bytes(5 * local * 4);
  const Tensor normed = testing::random_tensor({kTokens, c.d_model}, 2);
  const std::vector<int32_t> t = targets(c.vocab_size);
  head.forward(normed, t, Pass::kEvaluate);
  EXPECT_FALSE(head.gradients_pending());
  EXPECT_THROW(head.backward(), InternalError) << "an evaluating forward in chunks";
  head.forward(normed, t, Pass::kTrain);
  EXPECT_TRUE(head.gradients_pending());
  head.backward();
  EXPECT_FALSE(head.gradients_pending());
  EXPECT_THROW(head.backward(), InternalError) << "a second backward";
}

// Chunk rows: one chunk when the logits fit (or no bound), else as few chunks
// as fit, balanced, in whole 64-row tiles above 64 rows.
TEST(OutputHeadTest, LogitsChunkRowsFollowTheBudget) {
  EXPECT_EQ(logits_chunk_rows(16, 10, 0), 16);
  EXPECT_EQ(logits_chunk_rows(16, 10, 160), 16);
  EXPECT_EQ(logits_chunk_rows(16, 10, 159), 8);
  EXPECT_EQ(logits_chunk_rows(16, 10, 30), 3);
  EXPECT_EQ(logits_chunk_rows(16, 10, 1), 1);
  EXPECT_EQ(logits_chunk_rows(0, 10, 1), 0);
  // GPT-2 in bf16 at B 16 x T 1024 under the default 256 MiB: 7 chunks of
  // 2368 rows (37 tiles), the last of 2176; 1.65 GB of logits become 238 MB.
  EXPECT_EQ(logits_chunk_rows(16384, 50304 * 2, kDefaultLogitsChunkBytes), 2368);
  // Whole tiles never past the tokens, nor past the budget.
  EXPECT_EQ(logits_chunk_rows(130, 1, 129), 128);
  EXPECT_EQ(logits_chunk_rows(100, 1, 99), 64);
  EXPECT_EQ(logits_chunk_rows(130, 1, 65), 64);
  for (int64_t tokens = 1; tokens <= 300; tokens += 7) {
    for (const int64_t budget : {1, 3, 63, 64, 65, 100, 127, 128, 200, 299}) {
      const int64_t rows = logits_chunk_rows(tokens, 1, budget);
      EXPECT_GE(rows, 1) << tokens << " tokens, budget " << budget;
      EXPECT_LE(rows, std::min(tokens, budget)) << tokens << " tokens, budget " << budget;
    }
  }
}

}  // namespace
}  // namespace colrow
