// PipelineStage: the part of the model one pipeline stage holds (Megatron's
// split of the layers over pp): a run of consecutive transformer blocks, plus
// the token and position embeddings on the first stage and the final norm,
// the output head and the loss on the last. With tied word embeddings the
// last stage keeps its own copy of the embedding table for the head, whose
// gradient is summed with the first stage's every step (Megatron's embedding
// group), so both copies stay one weight. pp = 1 is one stage holding all.
#pragma once

#include <vector>

#include "colrow/nn/model_config.h"

namespace colrow {

struct PipelineStage {
  int index = 0;        // 0 .. count-1
  int count = 1;        // pp
  int first_layer = 0;  // this stage's blocks: [first_layer, first_layer + n_layers)
  int n_layers = 0;

  bool is_first() const { return index == 0; }
  bool is_last() const { return index == count - 1; }
  // The whole model as one stage.
  static PipelineStage whole(const ModelConfig& config);
};

// Blocks per stage: `requested` (--pp-layers) when given, otherwise n_layer as
// even as it goes, the earlier stages taking one more (6 over 4: 2, 2, 1, 1).
// Pure, identical on every rank; ConfigError (value, rule, fix) when stages <
// 1, stages > n_layer (every stage needs a block), or `requested` has another
// length than stages, an entry below 1, or does not sum to n_layer.
std::vector<int> pipeline_layer_counts(int n_layer, int stages,
                                       const std::vector<int>& requested = {});

// Stage `index` of `stages` under pipeline_layer_counts.
PipelineStage pipeline_stage(int n_layer, int stages, int index,
                             const std::vector<int>& requested = {});

}  // namespace colrow
