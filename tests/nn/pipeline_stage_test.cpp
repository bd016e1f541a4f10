// pipeline_layer_counts / pipeline_stage: the even split (the earlier stages
// take the remainder), --pp-layers as given, and each refusal's message.
#include "colrow/nn/pipeline_stage.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "colrow/core/error.h"

namespace colrow {
namespace {

std::string refusal(int n_layer, int stages, const std::vector<int>& requested) {
  try {
    pipeline_layer_counts(n_layer, stages, requested);
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "";
}

TEST(PipelineStage, EvenSplitGivesTheRemainderToTheEarlierStages) {
  EXPECT_EQ(pipeline_layer_counts(12, 1), std::vector<int>({12}));
  EXPECT_EQ(pipeline_layer_counts(4, 2), std::vector<int>({2, 2}));
  EXPECT_EQ(pipeline_layer_counts(6, 4), std::vector<int>({2, 2, 1, 1}));
  EXPECT_EQ(pipeline_layer_counts(7, 7), std::vector<int>({1, 1, 1, 1, 1, 1, 1}));
}

TEST(PipelineStage, StagesHoldConsecutiveLayers) {
  const std::vector<int> firsts = {0, 2, 4, 5}, sizes = {2, 2, 1, 1};
  for (int s = 0; s < 4; ++s) {
    const PipelineStage stage = pipeline_stage(6, 4, s);
    EXPECT_EQ(stage.first_layer, firsts[s]) << s;
    EXPECT_EQ(stage.n_layers, sizes[s]) << s;
    EXPECT_EQ(stage.is_first(), s == 0);
    EXPECT_EQ(stage.is_last(), s == 3);
  }
  const PipelineStage last = pipeline_stage(4, 2, 1, {3, 1});
  EXPECT_EQ(last.first_layer, 3);
  EXPECT_EQ(last.n_layers, 1);
}

TEST(PipelineStage, BadSplitsAreRefusedWithTheFix) {
  EXPECT_NE(refusal(4, 0, {}).find("pp (0) must be at least 1"), std::string::npos);
  EXPECT_NE(refusal(2, 3, {}).find("pp (3) is more stages than the 2 layers"), std::string::npos);
  for (const std::vector<int>& bad :
       std::vector<std::vector<int>>{{4}, {3, 0, 1}, {2, 1}, {5, -1}}) {
    const int stages = static_cast<int>(bad.size()) == 1 ? 2 : static_cast<int>(bad.size());
    const std::string message = refusal(4, stages, bad);
    EXPECT_NE(message.find("[pipeline] pp_layers ("), std::string::npos) << message;
    EXPECT_NE(message.find("Fix --pp-layers"), std::string::npos) << message;
  }
}

// Found by tests/fuzz/cli_flags_fuzz: the sum of --pp-layers entries near
// INT_MAX overflowed an int (undefined behaviour) before it was compared.
TEST(PipelineStage, HugeLayerCountsAreRefusedWithoutOverflow) {
  for (const std::vector<int>& bad :
       std::vector<std::vector<int>>{{2147483647, 2147483647}, {6, 2147483647}, {2147483647, 1}}) {
    const std::string message = refusal(4, 2, bad);
    EXPECT_NE(message.find("[pipeline] pp_layers ("), std::string::npos) << message;
  }
  // A sum that wraps to n_layer in 32 bits is refused too: 2 x 2147483647 + 6 = 2^32 + 4.
  EXPECT_NE(refusal(4, 3, {2147483647, 2147483647, 6}).find("pp_layers"), std::string::npos);
}

}  // namespace
}  // namespace colrow
