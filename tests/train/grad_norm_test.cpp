// The global gradient norm (computed in one place, AdamW::step) at tp = world
// size equals the unsharded model's (gpt2; llama with grouped, replicated and
// multi-query KV heads), so no sqrt(tp) error from replicated parameters; the
// counting rule per shard; and the clipping factor max_norm / (norm + 1e-6),
// below 1 only when the norm exceeds max_norm.
#include "colrow/train/grad_norm.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "colrow/core/error.h"
#include "colrow/dist/local_communicator.h"
#include "colrow/dist/recording_communicator.h"
#include "colrow/nn/gpt_model.h"
#include "colrow/train/adamw.h"
#include "nn/layer_test_helpers.h"
#include "nn/model_test_cases.h"
#include "support/test_world.h"

namespace colrow {
namespace {

using testing::world;

using testing::model_cases;
using testing::ModelCase;
using testing::random_ids;
using testing::valid_at;

// The global norm of `params`' grads as AdamW::step reports it (before
// clipping; lr 0 leaves the parameters as they are).
double step_norm(Communicator& tp, const std::vector<Parameter*>& params) {
  LocalCommunicator dp("dp");
  AdamWConfig config;
  config.grad_clip = 0.0f;
  AdamW optimizer(tp, dp, params, config);
  return optimizer.step(0.0f);
}

TEST(GradNorm, FirstReplicaCountsEachBlockOnce) {
  const Shape full{8, 4};
  for (int r = 0; r < 4; ++r) {
    EXPECT_TRUE(ShardSpec({full, 0, r, 4}).first_replica(r, 4));              // split: every rank
    EXPECT_EQ(ShardSpec({full, 0, 0, 1}).first_replica(r, 4), r == 0);        // replicated: rank 0
    EXPECT_EQ(ShardSpec({full, 0, r / 2, 2}).first_replica(r, 4), r % 2 == 0);  // 2 replicas
  }
  EXPECT_THROW(ShardSpec({full, 0, 0, 3}).first_replica(0, 4), InternalError);
}

// Same seed, same tokens: the model at tp = world and the same model on a
// group of one. fp32 gradients at different tp differ only by summation
// order inside the GEMMs and reductions (a few hundred terms at most: relative
// error well under 1e-5); a replicated parameter counted tp times instead of
// once would be off by a factor up to sqrt(tp) (41% at tp 2).
TEST(GradNorm, EqualsTheUnshardedModelAtEveryTp) {
  const int tp = world().size();
  int tested = 0;
  for (const ModelCase& c : model_cases()) {
    if (!valid_at(c.config, tp)) continue;  // e.g. 6 KV heads at tp 4: neither split nor replicable
    SCOPED_TRACE(c.name);
    ++tested;
    const int64_t batch = 2, seq = 8;
    const std::vector<int32_t> ids = random_ids(11, batch * seq, c.config.vocab_size);
    const std::vector<int32_t> targets = random_ids(12, batch * seq, c.config.vocab_size);

    LocalCommunicator local("tp");
    GptModel full(local, c.config, /*seed=*/5);
    full.forward(ids, targets, batch, seq);
    full.backward();
    const double expected = step_norm(local, full.parameters());

    GptModel sharded(world(), c.config, /*seed=*/5);
    sharded.forward(ids, targets, batch, seq);
    sharded.backward();
    RecordingCommunicator recording(world());
    const double norm = step_norm(recording, sharded.parameters());
    EXPECT_NEAR(norm, expected, 1e-5 * expected);
    EXPECT_GT(expected, 0.0);
    // One collective: each rank's partial sum as two floats.
    EXPECT_EQ(recording.events(), (std::vector<CollectiveEvent>{{"all_gather", 2, 0.0}}));
  }
  EXPECT_GE(tested, 2);
}

// Small-integer grads: every square and sum is exact, so the norm is exact.
struct Toy {
  Parameter split, replicated;
  explicit Toy(int tp_rank, int tp)
      : split("w", {{4 * tp, 3}, 0, tp_rank, tp}, Init::zeros(), 0),
        replicated("b", ShardSpec::replicated({5}), Init::zeros(), 0) {
    split.grad.fill(2.0f);       // 4 x 3 x 4 = 48 per rank
    replicated.grad.fill(1.0f);  // 5, once
  }
  std::vector<Parameter*> params() { return {&split, &replicated}; }
};

TEST(GradNorm, ExactOnSmallIntegersAndClipsOnlyAboveMaxNorm) {
  Communicator& tp = world();
  const double expected = std::sqrt(48.0 * tp.size() + 5.0);
  Toy toy(tp.rank(), tp.size());
  EXPECT_EQ(step_norm(tp, toy.params()), expected);
  EXPECT_EQ(clip_coefficient(expected, expected + 1.0), 1.0);  // below max_norm: untouched
  EXPECT_EQ(clip_coefficient(expected, expected / 4), (expected / 4) / (expected + 1e-6));
  EXPECT_EQ(clip_coefficient(expected, 0.0), 1.0);  // disabled
}

// A double survives the (hi, lo) all_gather to far better than fp32.
TEST(GradNorm, SumOverCarriesDoublePrecision) {
  const double partial = 1.0 + 1e-12 * (world().rank() + 1);
  const int n = world().size();
  const double expected = n + 1e-12 * n * (n + 1) / 2;
  EXPECT_NEAR(sum_over(world(), partial), expected, 1e-14 * n);
}

}  // namespace
}  // namespace colrow
