// RMSNorm (Hugging Face's LlamaRMSNorm; LLaMA's input_layernorm,
// post_attention_layernorm and norm):
//   x: [tokens, d] -> y = weight * x / sqrt(mean_j(x_j^2) + eps): [tokens, d]
// weight (ones) is replicated over tp. Every rank normalizes the same
// replicated x and receives the same replicated dy, so every rank computes the
// same weight gradient: no collective, forward or backward. Under sequence
// parallelism it is a partial sum over this rank's token rows, summed over tp
// by GptModel::backward (Parameter::sequence_parallel).
#pragma once

#include <string>
#include <vector>

#include "colrow/nn/parameter.h"

namespace colrow {

class RMSNorm {
 public:
  // Throws ConfigError unless d >= 1 and eps is finite and >= 0. eps defaults
  // to LLaMA's rms_norm_eps; the seed is unused by the ones initializer.
  RMSNorm(const std::string& name, int64_t d, float eps = 1e-6f, uint64_t seed = 0);

  // x: [tokens, d]; x must stay unchanged until backward.
  const Tensor& forward(const Tensor& x);
  // dy: [tokens, d] -> dx: [tokens, d]; accumulates the weight gradient.
  const Tensor& backward(const Tensor& dy);
  // The residual add before the norm, in the norm's pass (llm.c's fused
  // residual; kernels/cpu/norm.h): sum = x + residual, written into the
  // caller's sum ([tokens, d], which must stay unchanged until backward),
  // and y = norm(sum). The bits of ops::add, then forward(sum).
  const Tensor& forward_add(const Tensor& x, const Tensor& residual, Tensor& sum);
  // dx = dresidual + backward(dy), written into the caller's dx in the same
  // pass (the bits of backward, then ops::add).
  void backward_add(const Tensor& dy, const Tensor& dresidual, Tensor& dx);
  // Its transient tensors (dx) from now on live in buffers
  // every layer shares (nn/shared_buffer.h: layer_buffer): what backward
  // returns is then valid until the next layer's call, not until this one's.
  void share_buffers() { shared_buffers_ = true; }

  Parameter& weight() { return weight_; }
  std::vector<Parameter*> parameters() { return {&weight_}; }
  int64_t d() const { return d_; }
  float eps() const { return eps_; }

 private:
  int64_t d_;
  float eps_;
  Parameter weight_;  // [d], replicated, ones
  Tensor x_;          // [tokens, d]: the caller's input, read by backward
  Tensor y_;          // [tokens, d]
  Tensor rstd_;       // [tokens]
  Tensor dx_;         // [tokens, d]
  bool shared_buffers_ = false;

  // Sizes y and the statistics for x's tokens.
  void prepare_forward(const Tensor& x);
};

}  // namespace colrow
