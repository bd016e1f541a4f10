// Norm: the normalization a model family uses, behind one type: LayerNorm
// (gpt2: weight and bias) or RMSNorm (llama: weight only). Replicated
// parameters, no communication (see layer_norm.h, rms_norm.h).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "colrow/nn/layer_norm.h"
#include "colrow/nn/model_config.h"
#include "colrow/nn/rms_norm.h"

namespace colrow {

class Norm {
 public:
  // name: the parameter prefix ("h.0.ln_1", "model.layers.0.input_layernorm").
  Norm(const ModelConfig& config, const std::string& name, uint64_t seed);

  // x: [tokens, d_model] -> [tokens, d_model]; x must stay unchanged until backward.
  const Tensor& forward(const Tensor& x) { return layer_ ? layer_->forward(x) : rms_->forward(x); }
  const Tensor& backward(const Tensor& dy) {
    return layer_ ? layer_->backward(dy) : rms_->backward(dy);
  }
  // The residual add fused in (LayerNorm::forward_add, backward_add).
  const Tensor& forward_add(const Tensor& x, const Tensor& residual, Tensor& sum) {
    return layer_ ? layer_->forward_add(x, residual, sum) : rms_->forward_add(x, residual, sum);
  }
  void backward_add(const Tensor& dy, const Tensor& dresidual, Tensor& dx) {
    layer_ ? layer_->backward_add(dy, dresidual, dx) : rms_->backward_add(dy, dresidual, dx);
  }
  // dx in a buffer every layer shares (LayerNorm::share_buffers).
  void share_buffers() { layer_ ? layer_->share_buffers() : rms_->share_buffers(); }
  std::vector<Parameter*> parameters() {
    return layer_ ? layer_->parameters() : rms_->parameters();
  }

 private:
  std::unique_ptr<LayerNorm> layer_;
  std::unique_ptr<RMSNorm> rms_;
};

}  // namespace colrow
