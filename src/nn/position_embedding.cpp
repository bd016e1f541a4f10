// Learned absolute positions (GPT-2's wpe).
#include "colrow/nn/position_embedding.h"

#include "colrow/core/error.h"
#include "kernels/ops.h"

namespace colrow {
namespace {

void require_tokens(const Tensor& x, int64_t batch, int64_t seq) {
  if (x.ndim() != 2 || x.size(0) != batch * seq) {
    throw InternalError("[position_embedding] activations " + shape_to_string(x.shape()) +
                        " must be [batch (" + std::to_string(batch) + ") * seq (" +
                        std::to_string(seq) + "), d_model]");
  }
}

}  // namespace

PositionEmbedding::PositionEmbedding(const std::string& name, int64_t max_positions,
                                     int64_t d_model, const Init& init, uint64_t seed)
    : weight_(name + ".weight", ShardSpec::replicated({max_positions, d_model}), init, seed) {}

void PositionEmbedding::forward(Tensor& x, int64_t batch, int64_t seq) {
  if (seq > max_positions()) {
    throw InvalidInputError("[position_embedding] sequence length (" + std::to_string(seq) +
                            ") must be at most max_position_embeddings (" +
                            std::to_string(max_positions()) + "). Use a shorter --seq-len.");
  }
  require_tokens(x, batch, seq);
  ops::position_embedding_forward(x, weight_.compute(), seq);  // row t is at position t % seq
}

void PositionEmbedding::backward(const Tensor& dx, int64_t batch, int64_t seq) {
  require_tokens(dx, batch, seq);
  ops::position_embedding_backward(dx, seq, weight_.grad);
}

}  // namespace colrow
