// The split of a model's blocks over pipeline stages.
#include "colrow/nn/pipeline_stage.h"

#include <numeric>
#include <string>

#include "colrow/core/error.h"

namespace colrow {
namespace {

std::string list_text(const std::vector<int>& values) {
  std::string text;
  for (size_t i = 0; i < values.size(); ++i) text += (i ? "," : "") + std::to_string(values[i]);
  return text;
}

}  // namespace

PipelineStage PipelineStage::whole(const ModelConfig& config) {
  PipelineStage stage;
  stage.n_layers = config.n_layer;
  return stage;
}

std::vector<int> pipeline_layer_counts(int n_layer, int stages, const std::vector<int>& requested) {
  if (stages < 1) {
    throw ConfigError("[pipeline] pp (" + std::to_string(stages) +
                      ") must be at least 1. Pass --pp as a positive integer.");
  }
  if (stages > n_layer) {
    throw ConfigError("[pipeline] pp (" + std::to_string(stages) + ") is more stages than the " +
                      std::to_string(n_layer) +
                      " layers of the model: every stage needs at least one layer. Choose "
                      "--pp " +
                      std::to_string(n_layer) + " or fewer.");
  }
  if (requested.empty()) {
    std::vector<int> counts(stages, n_layer / stages);
    for (int s = 0; s < n_layer % stages; ++s) ++counts[s];
    return counts;
  }
  // In int64: entries near INT_MAX (--pp-layers 2147483647,1) must not overflow the sum.
  const int64_t sum = std::accumulate(requested.begin(), requested.end(), int64_t{0});
  bool positive = true;
  for (int n : requested) positive = positive && n >= 1;
  if (static_cast<int>(requested.size()) != stages || !positive || sum != n_layer) {
    throw ConfigError("[pipeline] pp_layers (" + list_text(requested) + ") must list " +
                      std::to_string(stages) +
                      " layer counts, one per stage, each at least 1, "
                      "summing to the model's " +
                      std::to_string(n_layer) +
                      " layers. Fix --pp-layers, or leave it out to split the layers evenly.");
  }
  return requested;
}

PipelineStage pipeline_stage(int n_layer, int stages, int index,
                             const std::vector<int>& requested) {
  const std::vector<int> counts = pipeline_layer_counts(n_layer, stages, requested);
  if (index < 0 || index >= stages) {
    throw InternalError("[pipeline] stage " + std::to_string(index) + " of " +
                        std::to_string(stages));
  }
  PipelineStage stage;
  stage.index = index;
  stage.count = stages;
  stage.first_layer = std::accumulate(counts.begin(), counts.begin() + index, 0);
  stage.n_layers = counts[index];
  return stage;
}

}  // namespace colrow
