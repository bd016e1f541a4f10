// Learned absolute positions (GPT-2's wpe).
#include "colrow/nn/position_embedding.h"

#include "colrow/core/error.h"

namespace colrow {

PositionEmbedding::PositionEmbedding(const std::string& name, int64_t max_positions,
                                     int64_t d_model, const Init& init, uint64_t seed)
    : weight_(name + ".weight", ShardSpec::replicated({max_positions, d_model}), init, seed) {}

void PositionEmbedding::forward(Tensor& x, int64_t batch, int64_t seq) {
  if (seq > max_positions()) {
    throw InvalidInputError("[position_embedding] sequence length (" + std::to_string(seq) +
                            ") must be at most max_position_embeddings (" +
                            std::to_string(max_positions()) + "). Use a shorter --seq-len.");
  }
  const int64_t d = x.size(1);
  const float* table = weight_.value.data();
  float* out = x.data();
#pragma omp parallel for schedule(static) if (batch * seq * d > (1 << 15))
  for (int64_t token = 0; token < batch * seq; ++token) {
    const float* row = table + (token % seq) * d;
    float* dst = out + token * d;
#pragma omp simd
    for (int64_t j = 0; j < d; ++j) dst[j] += row[j];
  }
}

void PositionEmbedding::backward(const Tensor& dx, int64_t batch, int64_t seq) {
  const int64_t d = dx.size(1);
  const float* in = dx.data();
  float* grad = weight_.grad.data();
  // Parallel over positions: each position's row is owned by one thread.
#pragma omp parallel for schedule(static) if (batch * seq * d > (1 << 15))
  for (int64_t t = 0; t < seq; ++t) {
    float* row = grad + t * d;
    for (int64_t b = 0; b < batch; ++b) {
      const float* src = in + (b * seq + t) * d;
#pragma omp simd
      for (int64_t j = 0; j < d; ++j) row[j] += src[j];
    }
  }
}

}  // namespace colrow
