// What one more layer costs in memory during training, per rank: exactly the
// activations its backward reads, and nothing it only passes on. The input
// gradients inside backward and the row-parallel outputs live in buffers all
// blocks share (nn/shared_buffer.h: layer_buffer), so models of 2 and 4
// layers differ by 2 x this, byte for byte:
//   replicated [tokens, d]:        norm_1's and norm_2's outputs, h, y    4 N d
//   split over tp [tokens, d/tp]:  q, k, v, attention's output            4 N d / tp
//   [tokens, ffn/tp]:              c_fc's output, the GELU's output       2 N ffn / tp
//                                  (the GELU recomputed in backward: N ffn / tp)
//   attention's saved statistics   (the CPU kernel's probabilities)
//   [tokens]:                      each norm's mean and rstd              4 N
// floats, at tp = the world size. The sizes are whole 64-byte lines, so the
// host allocator's rounding adds nothing. Before the shared buffers a layer
// also held 13 more tensors (every input gradient inside it, and both
// row-parallel outputs): this test fails if one comes back.
#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "colrow/core/allocator.h"
#include "colrow/nn/gpt_model.h"
#include "kernels/ops.h"
#include "nn/model_test_cases.h"
#include "support/test_world.h"

namespace colrow {
namespace {

using testing::random_ids;
using testing::small_gpt2_config;
using testing::world;

constexpr int64_t kBatch = 2, kSeq = 8, kTokens = kBatch * kSeq;

ModelConfig config_with_layers(int n_layer) {
  ModelConfig c = small_gpt2_config();  // d 48, 12 heads of 4, ffn 192
  c.n_layer = n_layer;
  return c;
}

// Host bytes that one forward and backward of a fresh n-layer model leaves
// held, beyond its parameters and gradients.
int64_t bytes_held_by_training(int n_layer, bool recompute_activation) {
  const Allocator& host = allocator_for(Device::cpu());
  const ModelConfig c = config_with_layers(n_layer);
  GptModel model(world(), c, /*seed=*/3);
  model.set_recompute_activation(recompute_activation);
  const int64_t before = static_cast<int64_t>(host.bytes_in_use());
  model.forward(random_ids(1, kTokens, c.vocab_size), random_ids(2, kTokens, c.vocab_size), kBatch,
                kSeq);
  model.backward();
  return static_cast<int64_t>(host.bytes_in_use()) - before;
}

TEST(GptModelMemoryTest, OneMoreLayerCostsOnlyTheActivationsBackwardReads) {
  const int64_t tp = world().size();
  const ModelConfig c = small_gpt2_config();
  const int64_t n = kTokens, d = c.d_model, ffn = c.ffn_hidden_size;
  const int64_t saved = shape_numel(ops::attention_saved_shape(
      Device::cpu(), {kBatch, c.n_head / tp, kSeq, c.head_dim, DType::kF32}));
  for (bool recompute : {false, true}) {
    // A first model makes the shared buffers, which then exist for both below.
    bytes_held_by_training(1, recompute);
    const int64_t per_layer =
        (bytes_held_by_training(4, recompute) - bytes_held_by_training(2, recompute)) / 2;
    const int64_t hidden_tensors = recompute ? 1 : 2;
    const int64_t floats =
        4 * n * d + 4 * n * d / tp + hidden_tensors * n * ffn / tp + saved + 4 * n;
    EXPECT_EQ(per_layer, floats * 4) << "tp " << tp << (recompute ? ", GELU recomputed" : "");
  }
}

}  // namespace
}  // namespace colrow
