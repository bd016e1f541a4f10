// plan_training: the defaults it resolves, and one ConfigError for each rule
// on train's flags, whatever the world size.
#include "colrow/train/training_plan.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <limits>
#include <string>

#include "colrow/core/error.h"

namespace colrow {
namespace {

ModelConfig tiny() {
  return model_preset("gpt2-tiny");
}

// The ConfigError's text, or "" when the plan was made.
std::string refusal(const TrainOptions& o, int world_size) {
  try {
    plan_training(o, tiny(), world_size);
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "";
}

TEST(TrainingPlanTest, ResolvesTheDefaults) {
  TrainOptions o;
  o.steps = 100, o.batch = 4, o.seq_len = 32, o.grad_accum = 3, o.lr = 1e-3, o.dp = 2;
  const TrainingPlan plan = plan_training(o, tiny(), /*world_size=*/4);
  EXPECT_EQ(plan.tp, 2);                            // world / (pp x dp)
  EXPECT_EQ(plan.tokens_per_step, 4 * 32 * 3 * 2);  // batch x seq x accum x dp
  EXPECT_EQ(plan.adam.zero, 1);                     // ZeRO-1 when dp > 1
  EXPECT_DOUBLE_EQ(plan.schedule.min_lr, 1e-4);     // lr / 10
  EXPECT_EQ(plan.schedule.warmup_steps, 5);         // steps / 20
  EXPECT_EQ(plan.schedule.total_steps, 100);
  ASSERT_EQ(plan.stage_layers.size(), 1u);
  EXPECT_EQ(plan.stage_layers[0], tiny().n_layer);

  o.zero = 0, o.min_lr = 0.0, o.warmup = 0, o.pp = 2;
  const TrainingPlan asked = plan_training(o, tiny(), 4);
  EXPECT_EQ(asked.tp, 1);
  EXPECT_EQ(asked.adam.zero, 0);
  EXPECT_EQ(asked.schedule.min_lr, 0.0);
  EXPECT_EQ(asked.schedule.warmup_steps, 0);
  EXPECT_EQ(asked.stage_layers.size(), 2u);
}

TEST(TrainingPlanTest, RefusesEachBadFlagWithItsRule) {
  const TrainOptions good;
  ASSERT_EQ(refusal(good, 1), "");
  auto with = [&](auto change) {
    TrainOptions o = good;
    change(o);
    return o;
  };
  EXPECT_NE(refusal(good, 3).find("tp"), std::string::npos);  // gpt2-tiny's heads over 3
  EXPECT_NE(refusal(with([](TrainOptions& o) { o.steps = 0; }), 1).find("steps (0)"),
            std::string::npos);
  EXPECT_NE(refusal(with([](TrainOptions& o) { o.seq_len = 1 << 20; }), 1)
                .find("max_position_embeddings"),
            std::string::npos);
  const std::string overflow = refusal(with([](TrainOptions& o) {
                                         o.batch = std::numeric_limits<int64_t>::max() / 2;
                                         o.seq_len = 4;
                                       }),
                                       1);
  EXPECT_NE(overflow.find("must fit in 64 bits"), std::string::npos) << overflow;
  EXPECT_NE(
      refusal(with([](TrainOptions& o) { o.sequence_parallel = true, o.batch = 1, o.seq_len = 3; }),
              2)
          .find("--sequence-parallel"),
      std::string::npos);
  EXPECT_NE(refusal(with([](TrainOptions& o) { o.resume = "a", o.init = "b"; }), 1)
                .find("exclude each other"),
            std::string::npos);
  EXPECT_NE(refusal(with([](TrainOptions& o) { o.min_lr = 1.0, o.lr = 0.5; }), 1).find("min_lr"),
            std::string::npos);
  EXPECT_NE(refusal(with([](TrainOptions& o) { o.zero = 2; }), 1).find("zero (2)"),
            std::string::npos);
  EXPECT_NE(refusal(with([](TrainOptions& o) { o.pp = 2, o.pp_layers = {1}; }), 2).find("pp"),
            std::string::npos);
  // --cuda-graph: a micro-batch the graph cannot hold (stages, per-op timing,
  // reductions started during backward)
  EXPECT_EQ(refusal(with([](TrainOptions& o) { o.cuda_graph = true; }), 1), "");
  EXPECT_NE(refusal(with([](TrainOptions& o) { o.cuda_graph = true, o.pp = 2; }), 2).find("--pp 2"),
            std::string::npos);
  EXPECT_NE(refusal(with([](TrainOptions& o) { o.cuda_graph = true, o.profile = 3; }), 1)
                .find("--profile"),
            std::string::npos);
  EXPECT_NE(refusal(with([](TrainOptions& o) {
                      o.cuda_graph = true, o.overlap_grad_reduce = true, o.dp = 2;
                    }),
                    2)
                .find("--overlap-grad-reduce"),
            std::string::npos);
  EXPECT_EQ(
      refusal(with([](TrainOptions& o) { o.cuda_graph = true, o.overlap_grad_reduce = true; }), 1),
      "");  // nothing to overlap at dp 1
}

}  // namespace
}  // namespace colrow
