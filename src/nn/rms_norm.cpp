// RMSNorm: replicated weight, no collectives (see the header).
#include "colrow/nn/rms_norm.h"

#include "colrow/core/error.h"
#include "colrow/nn/shared_buffer.h"
#include "kernels/ops.h"
#include "nn/norm_checks.h"

namespace colrow {
namespace {

constexpr const char* kComponent = "rms_norm";

int64_t validated_d(const std::string& name, int64_t d, float eps) {
  return norm_checks::validated_d(kComponent, name, d, eps,
                                  "Use 1e-6 or 1e-5 (the model's rms_norm_eps).");
}

void require_tokens_by(const Tensor& t, int64_t d, const std::string& name, const char* what) {
  norm_checks::require_tokens_by(kComponent, t, d, name, what);
}

}  // namespace

RMSNorm::RMSNorm(const std::string& name, int64_t d, float eps, uint64_t seed)
    : d_(validated_d(name, d, eps)),
      eps_(eps),
      weight_(name + ".weight", ShardSpec::replicated({d}), Init::ones(), seed) {}

void RMSNorm::prepare_forward(const Tensor& x) {
  require_tokens_by(x, d_, weight_.name, "x");
  const int64_t tokens = x.size(0);
  ensure_shape(y_, {tokens, d_}, weight_.value.device(), x.dtype());
  ensure_shape(rstd_, {tokens}, weight_.value.device());
}

const Tensor& RMSNorm::forward(const Tensor& x) {
  // x: [tokens, d] (replicated) -> y: [tokens, d] (replicated); no communication
  prepare_forward(x);
  x_ = x;
  ops::rms_norm_forward(x_, weight_.compute(), eps_, y_, rstd_);
  return y_;
}

const Tensor& RMSNorm::forward_add(const Tensor& x, const Tensor& residual, Tensor& sum) {
  prepare_forward(x);
  x_ = sum;  // backward's input: the sum the kernel writes
  ops::rms_norm_forward(x, weight_.compute(), eps_, y_, rstd_, &residual, &sum);
  return y_;
}

const Tensor& RMSNorm::backward(const Tensor& dy) {
  // dy: [tokens, d] -> dx: [tokens, d]. No collective here: a replicated dy
  // gives every rank the same weight gradient; under sequence parallelism it
  // is partial, and GptModel::backward sums it over tp.
  norm_checks::require_dy_like_x(kComponent, dy, x_, d_, weight_.name);
  layer_buffer(dx_, shared_buffers_, "norm.dx", dy.shape(), weight_.value.device(), dy.dtype());
  ops::rms_norm_backward(x_, weight_.compute(), rstd_, dy, dx_, weight_.grad);
  return dx_;
}

void RMSNorm::backward_add(const Tensor& dy, const Tensor& dresidual, Tensor& dx) {
  norm_checks::require_dy_like_x(kComponent, dy, x_, d_, weight_.name);
  ops::rms_norm_backward(x_, weight_.compute(), rstd_, dy, dx, weight_.grad, &dresidual);
}

}  // namespace colrow
