// Sequence parallelism against the same layers and models without it, at
// tp = world size, from the same TP-invariant initialization:
//   - ParallelMLP and ParallelAttention: y and dx on this rank's token rows
//     equal the rows of the non-SP result; weight gradients agree; the
//     row-parallel bias gradient is this rank's share (summed over tp it is
//     the non-SP gradient);
//   - the overlapped backward gives the bits of the blocking one;
//   - GptModel, every case of model_test_cases: losses within 1e-6 relative
//     over two micro-batches (so gradients accumulate), every gradient
//     agrees, and the sequence-parallel ones (norms, row biases) are whole
//     and identical on every rank.
// The two paths sum the same products in different orders (a reduce-scatter
// then an all-gather instead of an all-reduce; a norm gradient summed per
// rank's rows, then over ranks), so agreement is to fp32 rounding: a few ulp
// per sum of ~24-192 terms, far below the 1e-5 relative used here, which a
// wrong row block, a missing sum or a sum counted twice exceeds by orders.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "colrow/core/error.h"
#include "colrow/core/philox.h"
#include "colrow/dist/device_communicator.h"
#include "colrow/nn/gpt_model.h"
#include "colrow/nn/parallel_attention.h"
#include "colrow/nn/parallel_mlp.h"
#include "nn/model_test_cases.h"
#include "support/test_world.h"

namespace colrow {
namespace {

using testing::world;

constexpr uint64_t kSeed = 11;
constexpr int64_t kBatch = 3, kSeq = 8;  // 24 tokens: divisible by tp 1, 2, 3 and 4
constexpr double kTolerance = 1e-5;

Tensor random_tensor(const Shape& shape, uint64_t stream) {
  Tensor t = Tensor::empty(shape);
  for (int64_t k = 0; k < t.numel(); ++k) t.data()[k] = standard_normal(kSeed, stream, k);
  return t;
}

// This rank's block of rows of x (as sequence parallelism holds it).
Tensor my_rows(const Tensor& x) {
  const int64_t rows = x.size(0) / world().size();
  return x.slice(0, world().rank() * rows, rows).clone();
}

// max |a - b| / max |b|, with max |b| at least `floor`. The key bias's
// gradient is zero in exact arithmetic (a shift of every score of a query
// that softmax ignores): both paths hold rounding noise (~1e-9) there, which
// the floor keeps from counting as a relative error; real gradients here are
// 1e-2 to 1.
double relative_error(const Tensor& a, const Tensor& b, double floor = 1e-4) {
  EXPECT_EQ(a.shape(), b.shape());
  double err = 0.0, scale = floor;
  for (int64_t k = 0; k < a.numel(); ++k) {
    err = std::max(err, std::fabs(static_cast<double>(a.data()[k]) - b.data()[k]));
    scale = std::max(scale, std::fabs(static_cast<double>(b.data()[k])));
  }
  return err / scale;
}

void expect_same_parameters_grads(const std::vector<Parameter*>& sp,
                                  const std::vector<Parameter*>& plain, const std::string& what) {
  ASSERT_EQ(sp.size(), plain.size());
  for (size_t i = 0; i < sp.size(); ++i) {
    EXPECT_EQ(sp[i]->name, plain[i]->name);
    EXPECT_LE(relative_error(sp[i]->grad, plain[i]->grad), kTolerance)
        << what << ": " << sp[i]->name;
  }
}

TEST(SequenceParallel, MlpMatchesTheReplicatedRegion) {
  for (Activation activation : {Activation::kGelu, Activation::kSwiGlu}) {
    MlpConfig config;
    config.d_model = 16;
    config.ffn_hidden_size = 48;
    config.activation = activation;
    config.seed = kSeed;
    ParallelMLP plain(world(), config);
    config.sequence_parallel = true;
    ParallelMLP sp(world(), config);
    const Tensor x = random_tensor({kBatch * kSeq, 16}, 1);
    const Tensor dy = random_tensor({kBatch * kSeq, 16}, 2);
    const Tensor y = plain.forward(x).clone();
    const Tensor dx = plain.backward(dy).clone();
    const Tensor x_rows = my_rows(x);
    EXPECT_LE(relative_error(sp.forward(x_rows), my_rows(y)), kTolerance);
    EXPECT_LE(relative_error(sp.backward(my_rows(dy)), my_rows(dx)), kTolerance);

    std::vector<Parameter*> a = sp.parameters(), b = plain.parameters();
    for (size_t i = 0; i < a.size(); ++i) {
      Tensor grad = a[i]->grad.clone();
      if (a[i]->sequence_parallel) world().all_reduce_sum(grad);  // this rank's tokens' share
      EXPECT_LE(relative_error(grad, b[i]->grad), kTolerance) << a[i]->name;
    }
    // Only the down projection's bias is added in the token-sharded region.
    for (Parameter* p : a) {
      const bool down_bias = p->name.find("c_proj.bias") != std::string::npos ||
                             p->name.find("down_proj.bias") != std::string::npos;
      EXPECT_EQ(p->sequence_parallel, down_bias) << p->name;
    }
  }
}

// Overlapping the collectives with the weight gradients changes when they
// run, not what they compute: the same bits as waiting for each at once,
// with and without sequence parallelism, over Open MPI and shared memory.
TEST(SequenceParallel, OverlappedBackwardEqualsBlockingBitwise) {
  std::vector<std::unique_ptr<Communicator>> groups;
  groups.push_back(world().split(0, world().rank(), "mpi"));
  groups.push_back(make_device_communicator(world().split(0, world().rank(), "tp"), Device::cpu(),
                                            CommKind::kAuto));
  for (auto& tp : groups) {
    for (bool sp : {false, true}) {
      MlpConfig config;
      config.d_model = 16;
      config.ffn_hidden_size = 48;
      config.seed = kSeed;
      config.sequence_parallel = sp;
      config.overlap_backward = false;
      ParallelMLP blocking(*tp, config);
      config.overlap_backward = true;
      ParallelMLP overlapped(*tp, config);
      Tensor x = random_tensor({kBatch * kSeq, 16}, 5), dy = random_tensor({kBatch * kSeq, 16}, 6);
      if (sp) x = my_rows(x), dy = my_rows(dy);
      blocking.forward(x);
      overlapped.forward(x);
      const Tensor dx = blocking.backward(dy).clone();
      EXPECT_EQ(overlapped.backward(dy).to_vector(), dx.to_vector()) << "sp " << sp;
      std::vector<Parameter*> a = overlapped.parameters(), b = blocking.parameters();
      for (size_t i = 0; i < a.size(); ++i) {
        EXPECT_EQ(a[i]->grad.to_vector(), b[i]->grad.to_vector()) << a[i]->name << " sp " << sp;
      }
    }
  }
}

TEST(SequenceParallel, AttentionMatchesTheReplicatedRegion) {
  for (int n_kv_head : {4, 1}) {  // MHA; MQA with its KV head replicated at tp > 1
    AttentionConfig config;
    config.d_model = 16;
    config.n_head = 4;
    config.n_kv_head = n_kv_head;
    config.rope = n_kv_head == 1;
    config.seed = kSeed;
    if (config.n_head % world().size() != 0) GTEST_SKIP() << "n_head 4 at tp 3";
    ParallelAttention plain(world(), config);
    config.sequence_parallel = true;
    ParallelAttention sp(world(), config);
    const Tensor x = random_tensor({kBatch * kSeq, 16}, 3);
    const Tensor dy = random_tensor({kBatch * kSeq, 16}, 4);
    const Tensor y = plain.forward(x, kBatch, kSeq).clone();
    const Tensor dx = plain.backward(dy).clone();
    EXPECT_LE(relative_error(sp.forward(my_rows(x), kBatch, kSeq), my_rows(y)), kTolerance);
    EXPECT_LE(relative_error(sp.backward(my_rows(dy)), my_rows(dx)), kTolerance);
    std::vector<Parameter*> a = sp.parameters(), b = plain.parameters();
    for (size_t i = 0; i < a.size(); ++i) {
      Tensor grad = a[i]->grad.clone();
      if (a[i]->sequence_parallel) world().all_reduce_sum(grad);
      EXPECT_LE(relative_error(grad, b[i]->grad), kTolerance) << a[i]->name;
    }
    Tensor k_cache = Tensor::zeros({1, sp.n_kv_head_local(), 4, 4});
    Tensor v_cache = k_cache.clone();
    EXPECT_THROW(
        sp.forward_cached(Tensor::zeros({1, 16}), CacheRows{{0}, {0}, 1}, k_cache, v_cache),
        InternalError);
  }
}

TEST(SequenceParallel, ModelLossesAndGradientsMatchAtEveryCase) {
  for (const testing::ModelCase& c : testing::model_cases()) {
    if (!testing::valid_at(c.config, world().size())) continue;
    SCOPED_TRACE(c.name);
    GptModel plain(world(), c.config, kSeed);
    GptModel sp(world(), c.config, kSeed, /*sequence_parallel=*/true);
    EXPECT_TRUE(sp.sequence_parallel());
    for (int micro = 0; micro < 2; ++micro) {  // gradients accumulate over micro-batches
      const auto ids = testing::random_ids(40 + micro, kBatch * kSeq, c.config.vocab_size);
      const auto targets = testing::random_ids(50 + micro, kBatch * kSeq, c.config.vocab_size);
      const double loss = plain.forward(ids, targets, kBatch, kSeq).mean();
      const double loss_sp = sp.forward(ids, targets, kBatch, kSeq).mean();
      EXPECT_NEAR(loss_sp, loss, 1e-6 * std::fabs(loss)) << "micro-batch " << micro;
      plain.backward();
      sp.backward();
    }
    expect_same_parameters_grads(sp.parameters(), plain.parameters(), c.name);
    // The summed gradients are whole on every rank: the same bits everywhere.
    for (Parameter* p : sp.parameters()) {
      if (!p->sequence_parallel) continue;
      Tensor mine = p->grad.clone(), root = p->grad.clone();
      world().broadcast(root, 0);
      EXPECT_EQ(mine.to_vector(), root.to_vector()) << p->name;
    }
  }
}

TEST(SequenceParallel, TokensMustSplitOverTp) {
  GptModel sp(world(), testing::small_gpt2_config(), kSeed, /*sequence_parallel=*/true);
  const auto ids = testing::random_ids(1, 7, 300);  // 7 tokens: only tp 1 (or 7) divides them
  if (world().size() == 1) {
    EXPECT_NO_THROW(sp.forward(ids, ids, 1, 7));
  } else {
    try {
      sp.forward(ids, ids, 1, 7);
      ADD_FAILURE() << "7 tokens over tp " << world().size() << " accepted";
    } catch (const InvalidInputError& e) {
      EXPECT_NE(std::string(e.what()).find("tokens (7) must be divisible by tp"), std::string::npos)
          << e.what();
    }
  }
  KvCache cache = sp.make_kv_cache(1, 8);
  EXPECT_THROW(sp.forward_cached({1}, {0}, 1, cache), InternalError);
}

}  // namespace
}  // namespace colrow
