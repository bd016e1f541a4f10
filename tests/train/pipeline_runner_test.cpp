// PipelineRunner at pp = world size (tp 1), 4 layers, 3 micro-batches of 2 x 8
// tokens, every model case: after one train_step each stage holds exactly
// the gradients the whole model accumulates over the same micro-batches,
// parameter by parameter, and the last stage the same summed loss. That
// covers the tied word embeddings: the first stage's table gets the lookups'
// gradient, the last stage's copy the output head's, and only their sum over
// the two stages (PipelineRunner's embedding group) equals the whole model's
// one tied gradient, on both stages. Untied models keep the table on the
// first stage only. Each stage times its step, and pipeline_bubble_share
// turns equal stages' timings into 1F1B's formula. The 1F1B order itself is
// pipeline_schedule_test's.
#include "colrow/train/pipeline_runner.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <string>

#include "colrow/dist/local_communicator.h"
#include "colrow/dist/process_mesh.h"
#include "colrow/nn/pipeline_stage.h"
#include "colrow/train/pipeline_schedule.h"
#include "nn/model_test_cases.h"
#include "support/test_world.h"

namespace colrow {
namespace {

using testing::model_cases;
using testing::ModelCase;
using testing::random_ids;
using testing::world;

constexpr uint64_t kSeed = 11;
constexpr int kMicroBatches = 3;
constexpr int64_t kRows = 2, kSeq = 8;

Batch micro_batch(int j, int64_t vocab) {
  Batch b;
  b.rows = kRows;
  b.seq_len = kSeq;
  b.ids = random_ids(100 + j, kRows * kSeq, vocab);
  b.targets = random_ids(200 + j, kRows * kSeq, vocab);
  return b;
}

// Largest |a - b| over the largest |b| (at least 1).
double relative_difference(const Tensor& a, const Tensor& b) {
  double diff = 0.0, scale = 1.0;
  for (int64_t i = 0; i < b.numel(); ++i) {
    diff = std::max(diff, std::abs(static_cast<double>(a.data()[i]) - b.data()[i]));
    scale = std::max(scale, std::abs(static_cast<double>(b.data()[i])));
  }
  return diff / scale;
}

TEST(PipelineRunner, EveryStageHoldsTheWholeModelsGradientsTiedEmbeddingsSummed) {
  const int pp = world().size();
  if (pp < 2) GTEST_SKIP() << "pipeline stages need 2 or more ranks";
  ProcessMesh mesh(world(), /*tp=*/1, pp, /*dp=*/1);
  for (const ModelCase& c : model_cases()) {
    SCOPED_TRACE(c.name);
    ModelConfig config = c.config;
    config.n_layer = 4;
    GptModel stage(mesh.tp(), config, pipeline_stage(config.n_layer, pp, mesh.pp_rank()), kSeed,
                   /*sequence_parallel=*/false);
    PipelineRunner runner(stage, mesh.pp());
    const double loss =
        runner.train_step(kMicroBatches, [&](int j) { return micro_batch(j, config.vocab_size); });

    LocalCommunicator one;  // the whole model on this rank alone
    GptModel whole(one, config, kSeed);
    double whole_loss = 0.0;
    for (int j = 0; j < kMicroBatches; ++j) {
      const Batch b = micro_batch(j, config.vocab_size);
      whole_loss += whole.forward(b.ids, b.targets, b.rows, b.seq_len).mean();
      whole.backward();
    }
    if (stage.stage().is_last()) {
      EXPECT_NEAR(loss, whole_loss, 1e-6 * whole_loss);
    } else {
      EXPECT_EQ(loss, 0.0);
    }

    std::map<std::string, Parameter*> reference;
    for (Parameter* p : whole.parameters()) reference[p->name] = p;
    for (Parameter* p : stage.parameters()) {
      SCOPED_TRACE(p->name);
      ASSERT_EQ(reference.count(p->name), 1u);
      // The same fp32 operations on the same rows; only the tied table's two
      // contributions (lookups, head) and the micro-batches add up in another
      // order: each element sums at most 3 x 16 x 2 terms, a bound of ~100
      // ulps (6e-6) relative to the tensor's scale. A missing contribution
      // (the tied sum left out) is off by the head's whole share, O(1).
      EXPECT_LE(relative_difference(p->grad, reference[p->name]->grad), 1e-5);
    }
    Parameter* table = stage.word_embeddings();
    const bool holds_table =
        stage.stage().is_first() || (stage.stage().is_last() && config.tie_word_embeddings);
    const PipelineRunner::StepTiming& timing = runner.last_step_timing();
    EXPECT_GT(timing.busy_seconds, 0.0);
    EXPECT_GE(timing.seconds, timing.busy_seconds);
    ASSERT_EQ(table != nullptr, holds_table);
    if (table != nullptr) {
      EXPECT_EQ(table->pipeline_copy, !stage.stage().is_first());
    }
  }
}

// Evaluation through the stages sums the last stage's per-token losses in
// double, token by token: the whole model's losses summed the same way, to
// 1e-12 relative (the stages compute the same fp32 losses; an fp32 mean
// times the count would be off by ~1e-7). The other stages return {0, 0}.
TEST(PipelineRunner, EvaluationSumsTheWholeModelsPerTokenLossesInDouble) {
  const int pp = world().size();
  if (pp < 2) GTEST_SKIP() << "pipeline stages need 2 or more ranks";
  ProcessMesh mesh(world(), /*tp=*/1, pp, /*dp=*/1);
  ModelConfig config = model_cases().front().config;
  config.n_layer = 4;
  GptModel stage(mesh.tp(), config, pipeline_stage(config.n_layer, pp, mesh.pp_rank()), kSeed,
                 /*sequence_parallel=*/false);
  PipelineRunner runner(stage, mesh.pp());
  std::vector<Batch> batches;
  for (int j = 0; j < kMicroBatches; ++j) batches.push_back(micro_batch(j, config.vocab_size));
  batches[1].targets[3] = -100;  // an ignored target counts nowhere
  const auto [sum, count] = runner.evaluate(batches);

  LocalCommunicator one;
  GptModel whole(one, config, kSeed);
  double want = 0.0;
  int64_t counted = 0;
  for (const Batch& b : batches) {
    const CrossEntropyOutput out = whole.forward(b.ids, b.targets, b.rows, b.seq_len);
    for (int64_t i = 0; i < out.losses.numel(); ++i) want += out.losses.data()[i];
    counted += out.counted;
  }
  if (stage.stage().is_last()) {
    EXPECT_NEAR(sum, want, 1e-12 * want);
    EXPECT_EQ(count, static_cast<double>(counted));
    EXPECT_EQ(counted, kMicroBatches * kRows * kSeq - 1);
  } else {
    EXPECT_EQ(sum, 0.0);
    EXPECT_EQ(count, 0.0);
  }
}

// 1F1B with pp equal stages of forward f and backward 2f over m micro-batches
// runs m + pp - 1 slots of 3f on the slowest stage, m of them busy: the
// measured share then equals the schedule's formula. An uneven stage (one
// twice as slow) stretches the makespan and widens the bubble.
TEST(PipelineBubble, MeasuredShareOfEqualStagesIsTheFormulas) {
  for (int pp : {2, 4}) {
    for (int m : {1, 4, 8}) {
      const double f = 0.001;
      const std::vector<PipelineRunner::StepTiming> equal(pp, {(m + pp - 1) * 3 * f, m * 3 * f});
      EXPECT_NEAR(pipeline_bubble_share(equal), pipeline_bubble_share(pp, m), 1e-12);
    }
  }
  std::vector<PipelineRunner::StepTiming> uneven = {{9.0, 4.0}, {9.0, 8.0}};
  EXPECT_NEAR(pipeline_bubble_share(uneven), 1.0 - 6.0 / 9.0, 1e-12);
  EXPECT_EQ(pipeline_bubble_share({}), 0.0);
  EXPECT_EQ(pipeline_bubble_share({{0.0, 0.0}}), 0.0);
}

}  // namespace
}  // namespace colrow
