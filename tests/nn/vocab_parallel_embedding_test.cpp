// VocabParallelEmbedding at tp = world size: Megatron's padding rule, the
// weight shards against the full TP-invariant table (padded rows zero), the
// forward bit for bit against the reference lookup, the scatter-add backward
// (repeated ids accumulate) bit for bit on small integers, one all-reduce
// forward and none backward, bad ids as InvalidInputError on every rank before
// any collective, configuration errors, and a vocabulary that is not a
// multiple of tp * 128 (1000) end to end through a tied output layer and the
// vocab-parallel cross-entropy against the double reference.
#include "colrow/nn/vocab_parallel_embedding.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "colrow/core/error.h"
#include "colrow/dist/recording_communicator.h"
#include "colrow/nn/vocab_parallel_cross_entropy.h"
#include "kernels/cpu/gemm.h"
#include "nn/layer_test_helpers.h"
#include "nn/same_on_every_rank.h"
#include "support/test_world.h"
#include "support/vocab_reference.h"

namespace colrow {
namespace {

using reference::Matrix;
using testing::to_matrix;
using testing::world;

// 45 real rows, padded to 48 at tp 1..4 with multiple 4 (three zero rows, all
// on the last rank); d_model divisible by 12.
constexpr int64_t kVocab = 45;
constexpr int64_t kMultiple = 4;
constexpr int64_t kModel = 12;
constexpr uint64_t kSeed = 99;
// Every rank's range, both ends of the vocabulary, repeats.
const std::vector<int32_t> kIds = {0, 44, 12, 12, 30, 5, 44, 23, 36, 12, 1, 40};

Tensor full_table(int64_t vocab, int64_t padded, int64_t d) {
  Tensor full = testing::full_parameter("wte.weight", {padded, d}, Init::normal(0.02f), kSeed);
  full.slice(0, vocab, padded - vocab).zero();
  return full;
}

TEST(VocabParallelEmbeddingTest, PaddedVocabSizeFollowsMegatron) {
  // GPT-2's vocabulary.
  EXPECT_EQ(padded_vocab_size(50257, 1), 50304);
  EXPECT_EQ(padded_vocab_size(50257, 2), 50432);
  EXPECT_EQ(padded_vocab_size(50257, 3), 50304);  // 131 * 384
  EXPECT_EQ(padded_vocab_size(50257, 4), 50688);
  EXPECT_EQ(padded_vocab_size(50257, 8), 51200);
  // Already a multiple: unchanged.
  EXPECT_EQ(padded_vocab_size(50304, 1), 50304);
  EXPECT_EQ(padded_vocab_size(1024, 4), 1024);
  EXPECT_EQ(padded_vocab_size(32000, 2), 32000);  // LLaMA's
  // Not a multiple of tp * 128.
  EXPECT_EQ(padded_vocab_size(1000, 1), 1024);
  EXPECT_EQ(padded_vocab_size(1000, 2), 1024);
  EXPECT_EQ(padded_vocab_size(1000, 3), 1152);
  EXPECT_EQ(padded_vocab_size(1000, 4), 1024);
  // Tiny vocabularies split exactly (multiple 1).
  EXPECT_EQ(padded_vocab_size(3, 1, 1), 3);
  EXPECT_EQ(padded_vocab_size(3, 2, 1), 4);
  EXPECT_EQ(padded_vocab_size(3, 3, 1), 3);
  EXPECT_EQ(padded_vocab_size(3, 4, 1), 4);
  EXPECT_EQ(padded_vocab_size(kVocab, 3, kMultiple), 48);
  try {
    padded_vocab_size(0, 2);
    ADD_FAILURE() << "no ConfigError";
  } catch (const ConfigError& e) {
    EXPECT_EQ(std::string(e.what()),
              "[vocab] vocab_size (0), tp (2) and multiple (128) must be positive.");
  }
  EXPECT_THROW(padded_vocab_size(100, 0), ConfigError);
  EXPECT_THROW(padded_vocab_size(100, 2, 0), ConfigError);
}

// Gathered shards = the table fill_shard makes on one rank, bitwise, with the
// padded rows zero; the local view is the weight's value.
TEST(VocabParallelEmbeddingTest, WeightShardsAreTheFullTableWithZeroPaddedRows) {
  Communicator& tp = world();
  const int64_t padded = padded_vocab_size(kVocab, tp.size(), kMultiple);
  VocabParallelEmbedding emb(tp, "wte", kVocab, padded, kModel, Init::normal(0.02f), kSeed);
  EXPECT_EQ(emb.weight().name, "wte.weight");
  EXPECT_EQ(emb.weight().shard.full_shape, (Shape{padded, kModel}));
  EXPECT_EQ(emb.weight().shard.dim, 0);
  EXPECT_EQ(emb.vocab_size_local(), padded / tp.size());
  EXPECT_EQ(emb.vocab_start(), tp.rank() * padded / tp.size());
  EXPECT_EQ(emb.weight_local().data(), emb.weight().value.data());
  EXPECT_EQ(emb.weight_local().shape(), (Shape{padded / tp.size(), kModel}));
  const Tensor gathered = testing::gather_shards(tp, emb.weight().value, 0);
  EXPECT_TRUE(testing::same_bits(gathered, full_table(kVocab, padded, kModel)));
  for (int64_t v = kVocab; v < padded; ++v) {
    for (int64_t j = 0; j < kModel; ++j) EXPECT_EQ(gathered(v, j), 0.0f);
  }
}

// y[t] = table[ids[t]] exactly: the one owning rank contributes the row, every
// other rank +0, and x + 0 = x.
TEST(VocabParallelEmbeddingTest, ForwardIsTheLookupBitwise) {
  Communicator& tp = world();
  const int64_t padded = padded_vocab_size(kVocab, tp.size(), kMultiple);
  VocabParallelEmbedding emb(tp, "wte", kVocab, padded, kModel, Init::normal(0.02f), kSeed);
  const Tensor& y = emb.forward(kIds);
  EXPECT_EQ(y.shape(), (Shape{static_cast<int64_t>(kIds.size()), kModel}));
  const Matrix want =
      reference::embedding_forward(to_matrix(full_table(kVocab, padded, kModel)), kIds, kModel);
  testing::expect_bitwise("y", y, want);
  EXPECT_TRUE(testing::same_on_every_rank(tp, y));
  // No allocation on a second step of the same size.
  const float* data = y.data();
  EXPECT_EQ(emb.forward(kIds).data(), data);
}

// Small-integer dy: every sum is exact, so the gathered gradient equals the
// reference scatter-add bit for bit, repeated ids included; padded rows stay
// zero; a second backward accumulates.
TEST(VocabParallelEmbeddingTest, BackwardScatterAddsIntoMyRows) {
  Communicator& tp = world();
  const int64_t padded = padded_vocab_size(kVocab, tp.size(), kMultiple);
  VocabParallelEmbedding emb(tp, "wte", kVocab, padded, kModel, Init::normal(0.02f), kSeed);
  const int64_t tokens = static_cast<int64_t>(kIds.size());
  const Tensor dy = testing::small_int_tensor({tokens, kModel}, 5);
  emb.forward(kIds);
  emb.backward(dy);
  Matrix want = reference::embedding_backward(kIds, to_matrix(dy), padded, kModel);
  testing::expect_bitwise("dW", testing::gather_shards(tp, emb.weight().grad, 0), want);
  emb.backward(dy);
  for (double& v : want) v *= 2.0;
  testing::expect_bitwise("dW x2", testing::gather_shards(tp, emb.weight().grad, 0), want);
  // A dy that does not match the forward's tokens is a bug in the caller.
  EXPECT_THROW(emb.backward(Tensor::zeros({tokens + 1, kModel})), InternalError);
}

// OpenMP path (tokens * d past 2^15) with many repeats, against the reference.
TEST(VocabParallelEmbeddingTest, LargeBatchWithRepeats) {
  Communicator& tp = world();
  constexpr int64_t kTokens = 512, kD = 96;
  const int64_t padded = padded_vocab_size(kVocab, tp.size(), kMultiple);
  VocabParallelEmbedding emb(tp, "wte", kVocab, padded, kD, Init::normal(0.02f), kSeed);
  std::vector<int32_t> ids(kTokens);
  for (int64_t t = 0; t < kTokens; ++t) ids[t] = static_cast<int32_t>((t * 7) % kVocab);
  const Tensor dy = testing::small_int_tensor({kTokens, kD}, 6);
  const Tensor full = testing::gather_shards(tp, emb.weight().value, 0);
  testing::expect_bitwise("y", emb.forward(ids),
                          reference::embedding_forward(to_matrix(full), ids, kD));
  emb.backward(dy);
  testing::expect_bitwise("dW", testing::gather_shards(tp, emb.weight().grad, 0),
                          reference::embedding_backward(ids, to_matrix(dy), padded, kD));
}

TEST(VocabParallelEmbeddingTest, OneAllReduceForwardNoneBackward) {
  RecordingCommunicator tp(world());
  const int64_t padded = padded_vocab_size(kVocab, tp.size(), kMultiple);
  VocabParallelEmbedding emb(tp, "wte", kVocab, padded, kModel);
  EXPECT_TRUE(tp.events().empty()) << "construction communicates";
  const int64_t tokens = static_cast<int64_t>(kIds.size());
  emb.forward(kIds);
  const std::vector<CollectiveEvent> one{{"all_reduce_sum", tokens * kModel, 0.0}};
  EXPECT_EQ(tp.events(), one) << "forward";
  tp.clear();
  emb.backward(Tensor::zeros({tokens, kModel}));
  EXPECT_TRUE(tp.events().empty()) << "backward communicates";
}

template <typename E, typename Fn>
void expect_error(Fn&& fn, const std::string& expected) {
  try {
    fn();
    ADD_FAILURE() << "no exception; expected: " << expected;
  } catch (const E& e) {
    EXPECT_EQ(std::string(e.what()), expected);
  } catch (const std::exception& e) {
    ADD_FAILURE() << "wrong exception kind: " << e.what();
  }
}

// GPT-2's vocabulary with a bad id: every rank throws the same message before
// the forward's all-reduce (nothing recorded), so no rank hangs. An id in the
// padded range is as bad as any other.
TEST(VocabParallelEmbeddingTest, OutOfRangeIdIsInvalidInputOnEveryRank) {
  RecordingCommunicator tp(world());
  const int64_t padded = padded_vocab_size(50257, tp.size());
  VocabParallelEmbedding emb(tp, "wte", 50257, padded, 4);
  std::vector<int32_t> ids(20, 11);
  ids[17] = 50300;
  expect_error<InvalidInputError>(
      [&] { emb.forward(ids); },
      "[embedding] token id (50300) at position 17 must be < vocab_size (50257). Check that "
      "the tokenizer matches the model's vocabulary.");
  ids[17] = 50257;
  expect_error<InvalidInputError>(
      [&] { emb.forward(ids); },
      "[embedding] token id (50257) at position 17 must be < vocab_size (50257). Check that "
      "the tokenizer matches the model's vocabulary.");
  ids[17] = 5;
  ids[3] = -1;
  expect_error<InvalidInputError>(
      [&] { emb.forward(ids); },
      "[embedding] token id (-1) at position 3 must be >= 0. Check that the tokenizer matches "
      "the model's vocabulary.");
  EXPECT_TRUE(tp.events().empty()) << "a collective ran before the check";
  tp.barrier();  // every rank got here
}

TEST(VocabParallelEmbeddingTest, ConfigErrors) {
  Communicator& tp = world();
  const int n = tp.size();
  expect_error<ConfigError>(
      [&] { VocabParallelEmbedding e(tp, "wte", 1000, padded_vocab_size(1000, n), 0); },
      "[embedding] d_model (0) must be positive.");
  expect_error<ConfigError>(
      [&] { VocabParallelEmbedding e(tp, "wte", 0, padded_vocab_size(1000, n), 8); },
      "[embedding] vocab_size (0) must be positive.");
  expect_error<ConfigError>([&] { VocabParallelEmbedding e(tp, "wte", 1000, 999, 8); },
                            "[embedding] padded_vocab_size (999) must be >= vocab_size (1000). "
                            "Use padded_vocab_size(vocab_size, tp) = " +
                                std::to_string(padded_vocab_size(1000, n)) + ".");
  if (const BadSize* bad = bad_size_for(n)) {
    expect_error<ConfigError>(
        [&] { VocabParallelEmbedding e(tp, "wte", bad->value, bad->value, 8); },
        "[embedding] padded_vocab_size (" + std::to_string(bad->value) +
            ") must be divisible by tp (" + std::to_string(n) + "). Choose tp in " + bad->choices +
            ".");
  }
  tp.barrier();  // every rank got here
}

// Vocabulary 1000 (not a multiple of tp * 128; padded to 1024, or 1152 at tp
// 3): embedding -> tied output layer (logits_local = h W_local^T, no
// communication) -> vocab-parallel cross-entropy. The loss against the double
// reference over the 1000 real classes, the gradient of the logits likewise,
// padded classes with exactly zero gradient, the same loss on every rank.
// Bounds: the fp32 GEMM errs by delta_tj <= gamma_d sum_k |h_tk| |W_jk|
// (Higham 3.5); the loss moves by at most 2 max_j delta_tj (|d loss/d x|_1 <= 2)
// and each softmax probability by a factor e^(2 delta) - 1 < 3 delta; the
// cross-entropy's own rounding as in its test (gamma_2 times the reference
// magnitude).
TEST(VocabParallelEmbeddingTest, TiedEmbeddingAndCrossEntropyWithVocab1000) {
  Communicator& tp = world();
  constexpr int64_t kV = 1000, kD = 16, kTokens = 12;
  const int64_t padded = padded_vocab_size(kV, tp.size());
  EXPECT_EQ(padded, tp.size() == 3 ? 1152 : 1024);
  VocabParallelEmbedding emb(tp, "wte", kV, padded, kD, Init::normal(1.0f), kSeed);
  VocabParallelCrossEntropy ce(tp, kV, padded, 0.1f);
  const std::vector<int32_t> ids = {0, 999, 500, 250, 750, 1, 998, 333, 666, 42, 512, 511};
  const std::vector<int32_t> targets = {999, 500, 250, 750, 1, -100, 333, 666, 42, 512, 511, 0};

  const Tensor h = emb.forward(ids).clone();  // [tokens, d], replicated
  Tensor logits_local = Tensor::empty({kTokens, padded / tp.size()});
  kernels::cpu::gemm(kernels::cpu::Trans::kNo, kernels::cpu::Trans::kYes, 1.0f, h,
                     emb.weight_local(), 0.0f, logits_local);
  const CrossEntropyOutput out = ce.forward(logits_local, targets);
  const Tensor dlogits = testing::gather_shards(tp, ce.backward(), 1);

  // Reference: logits in double from the same fp32 table (gathered shards).
  const Tensor table = testing::gather_shards(tp, emb.weight().value, 0);
  const Matrix hm = to_matrix(h), wm = to_matrix(table.slice(0, 0, kV));
  Matrix logits(kTokens * kV, 0.0);
  std::vector<double> delta(kTokens, 0.0);
  for (int64_t t = 0; t < kTokens; ++t) {
    for (int64_t j = 0; j < kV; ++j) {
      double sum = 0.0, mag = 0.0;
      for (int64_t k = 0; k < kD; ++k) {
        sum += hm[t * kD + k] * wm[j * kD + k];
        mag += std::fabs(hm[t * kD + k] * wm[j * kD + k]);
      }
      logits[t * kV + j] = sum;
      delta[t] = std::max(delta[t], reference::gamma(kD) * mag);
    }
  }
  const auto ref = reference::cross_entropy(logits, targets, kTokens, kV, 0.1, -100, tp.size());
  const std::vector<float> losses = out.losses.to_vector();
  for (int64_t t = 0; t < kTokens; ++t) {
    const double tol = reference::gamma(2) * ref.loss_mag[t] + 2.0 * delta[t];
    EXPECT_NEAR(losses[t], ref.losses[t], tol) << "token " << t;
  }
  EXPECT_EQ(out.counted, 11);
  EXPECT_TRUE(testing::same_on_every_rank(tp, out.losses));
  EXPECT_TRUE(testing::same_on_every_rank(tp, out.mean()));
  for (int64_t t = 0; t < kTokens; ++t) {
    for (int64_t j = 0; j < kV; ++j) {
      const double p = ref.dlogits[t * kV + j] + (j == targets[t] ? 0.9 : 0.0) + 0.1 / kV;
      const double tol =
          (reference::gamma(2) * ref.dlogits_mag[t * kV + j] + 3.0 * delta[t] * p) / 11.0;
      ASSERT_NEAR(dlogits(t, j), ref.dlogits[t * kV + j] / 11.0, tol)
          << "token " << t << ", class " << j;
    }
    for (int64_t j = kV; j < padded; ++j) ASSERT_EQ(dlogits(t, j), 0.0f) << "padded " << j;
  }
}

}  // namespace
}  // namespace colrow
