// PositionEmbedding: GPT-2's learned absolute positions (wpe), replicated.
// Token t of a sequence adds row t; every rank holds the whole table and sees
// the same gradients, so there is no communication.
//   x: [batch * seq, d_model] += wpe[t % seq]
#pragma once

#include <string>
#include <vector>

#include "colrow/nn/parameter.h"

namespace colrow {

class PositionEmbedding {
 public:
  PositionEmbedding(const std::string& name, int64_t max_positions, int64_t d_model,
                    const Init& init, uint64_t seed);

  // Adds the position rows to x in place; seq must not exceed max_positions.
  void forward(Tensor& x, int64_t batch, int64_t seq);
  // Accumulates the rows' gradients from dx (dx itself passes through unchanged).
  void backward(const Tensor& dx, int64_t batch, int64_t seq);

  Parameter& weight() { return weight_; }
  std::vector<Parameter*> parameters() { return {&weight_}; }
  int64_t max_positions() const { return weight_.value.size(0); }

 private:
  Parameter weight_;  // [max_positions, d_model]
};

}  // namespace colrow
