// AdamW as torch.optim.AdamW (single-tensor path) over a tp x dp mesh, with
// ZeRO-1 as Megatron's DistributedOptimizer does it: one flat gradient buffer,
// reduce-scattered over dp; each dp rank keeps moments for its slice only,
// updates it, and the updated parameters are all-gathered over dp.
// Collectives: see adamw.h; every one is on its own tagged line below.
#include "colrow/train/adamw.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>

#include "colrow/core/error.h"
#include "colrow/train/grad_norm.h"
#include "kernels/ops.h"

namespace colrow {

AdamW::AdamW(Communicator& tp, Communicator& dp, std::vector<Parameter*> params, AdamWConfig config,
             Communicator* pp)
    : tp_(tp), dp_(dp), pp_(pp), params_(std::move(params)), config_(std::move(config)) {
  validate(config_);
  for (const Parameter* p : params_) {
    if (!p->value.is_contiguous() || !p->grad.is_contiguous() ||
        p->value.shape() != p->grad.shape()) {
      throw InternalError("[adamw] " + p->name + ": value and grad must be contiguous, one shape");
    }
    offsets_.push_back(total_size_);
    total_size_ += p->value.numel();
    counted_.push_back(p->shard.first_replica(tp_.rank(), tp_.size()) && !p->pipeline_copy);
    decayed_.push_back(config_.decays(*p));
  }
  const Device device = params_.empty() ? Device::cpu() : params_.front()->value.device();
  if (config_.zero == 1) {
    // Padded so that dp equal slices tile the buffer; the padding stays zero.
    const int64_t dp_size = dp_.size();
    padded_size_ = (total_size_ + dp_size - 1) / dp_size * dp_size;
    slice_size_ = padded_size_ / dp_size;
    slice_begin_ = slice_size_ * dp_.rank();
    grad_slice_ = Tensor::zeros({slice_size_}, device);
    param_slice_ = Tensor::zeros({slice_size_}, device);
  } else {
    padded_size_ = total_size_;
    slice_size_ = total_size_;
    slice_begin_ = 0;
  }
  flat_ = Tensor::zeros({padded_size_}, device);
  if (config_.zero == 0) grad_slice_ = flat_;  // every rank owns everything
  if (config_.grad_reduce_dtype == DType::kBF16 && dp_.size() > 1) {
    wire_ = Tensor::zeros({padded_size_}, device, DType::kBF16);
    if (config_.zero == 1) wire_slice_ = Tensor::zeros({slice_size_}, device, DType::kBF16);
  }
  exp_avg_ = Tensor::zeros({slice_size_}, device);
  exp_avg_sq_ = Tensor::zeros({slice_size_}, device);
}

void AdamW::zero_grad() {
  for (Parameter* p : params_) p->zero_grad();
}

double AdamW::step(float lr) {
  const double norm = reduce_and_norm();
  // A NaN or Inf anywhere: no rank updates anything (the norm is the same
  // on every rank), so the weights and moments stay as they were.
  if (!std::isfinite(norm)) return norm;
  const double coefficient = clip_coefficient(norm, config_.grad_clip);
  ++step_count_;
  update(lr, static_cast<float>(coefficient));
  if (config_.zero == 1) gather_parameters();
  return norm;
}

// The part of parameter i inside this rank's slice: [begin, end) of the flat
// layout, empty when begin >= end.
std::pair<int64_t, int64_t> AdamW::in_slice(size_t i) const {
  return {std::max(offsets_[i], slice_begin_),
          std::min(offsets_[i] + params_[i]->value.numel(), slice_begin_ + slice_size_)};
}

void AdamW::pack_grads(Tensor& buffer) {
  for (size_t i = 0; i < params_.size(); ++i) {
    buffer.slice(0, offsets_[i], params_[i]->grad.numel())
        .view(params_[i]->grad.shape())
        .convert_from(params_[i]->grad);  // a copy, or the one rounding to bf16
  }
  buffer.slice(0, total_size_, padded_size_ - total_size_).zero();
}

void AdamW::reduce_grads() {
  if (wire_.owns_storage()) {
    pack_grads(wire_);  // each rank's gradients, rounded to bf16
    if (config_.zero == 0) {
      // [dp grads] all-reduce the flat grads over dp, as bf16; grad_slice_ is flat_
      dp_.all_reduce_sum_bf16_wire(wire_);
      flat_.convert_from(wire_);
    } else {
      // [dp grads] reduce-scatter the flat grads over dp, as bf16: [padded] -> [padded/dp]
      dp_.reduce_scatter_sum_bf16_wire(wire_, wire_slice_);
      grad_slice_.convert_from(wire_slice_);
    }
    return;
  }
  pack_grads(flat_);
  if (config_.zero == 0) {
    // [dp grads] all-reduce the flat grads over dp; grad_slice_ is flat_
    dp_.all_reduce_sum(flat_);
  } else {
    // [dp grads] reduce-scatter the flat grads over dp: [padded] -> [padded/dp]
    dp_.reduce_scatter_sum(flat_, grad_slice_);
  }
}

// grads -> grad_slice_ (dp-averaged); returns the global norm of the averaged grads.
double AdamW::reduce_and_norm() {
  reduce_grads();
  // The same float division in both modes, so equal sums give equal averages.
  ops::divide(grad_slice_, static_cast<float>(dp_.size()));

  // Squares of the counted parameters' elements inside this rank's slice.
  std::vector<Tensor> counted, uncounted;
  for (size_t i = 0; i < params_.size(); ++i) {
    const auto [begin, end] = in_slice(i);
    if (begin < end) {
      (counted_[i] ? counted : uncounted)
          .push_back(grad_slice_.slice(0, begin - slice_begin_, end - begin));
    }
  }
  double partial = ops::sum_of_squares(counted);
  // A replica the norm does not count (a tp copy, the last stage's tied
  // table) must still make it non-finite when it is, or its rank alone
  // would apply a NaN.
  if (!uncounted.empty() && !std::isfinite(ops::sum_of_squares(uncounted))) {
    partial = std::numeric_limits<double>::quiet_NaN();
  }
  if (config_.zero == 1) {
    // [norm] the slices of one tp rank's gradients lie on its dp ranks: sum them
    partial = sum_over(dp_, partial);
  }
  // [norm] sum over tp, each element of the full model counted once
  partial = sum_over(tp_, partial);
  // [norm] and over the pipeline stages, which hold different layers
  if (pp_ != nullptr) partial = sum_over(*pp_, partial);
  return std::sqrt(partial);
}

// torch.optim.AdamW's _single_tensor_adamw on this rank's slice, one kernel
// for every parameter; `grad_scale` is the clipping factor (1 when not clipping).
void AdamW::update(float lr, float grad_scale) {
  const double bias_correction1 = 1.0 - std::pow(static_cast<double>(config_.beta1), step_count_);
  const double bias_correction2 = 1.0 - std::pow(static_cast<double>(config_.beta2), step_count_);
  ops::AdamWStep step;
  step.step_size = static_cast<float>(lr / bias_correction1);
  step.bias_correction2_sqrt = static_cast<float>(std::sqrt(bias_correction2));
  step.decay = static_cast<float>(1.0 - static_cast<double>(lr) * config_.weight_decay);
  step.beta1 = config_.beta1;
  step.beta2 = config_.beta2;
  step.eps = config_.eps;
  step.grad_scale = grad_scale;
  std::vector<ops::AdamWSegment> segments;
  for (size_t i = 0; i < params_.size(); ++i) {
    const auto [begin, end] = in_slice(i);
    if (begin >= end) continue;
    const int64_t n = end - begin, local = begin - slice_begin_;
    ops::AdamWSegment segment;
    segment.param =
        params_[i]->value.view({params_[i]->value.numel()}).slice(0, begin - offsets_[i], n);
    segment.grad = grad_slice_.slice(0, local, n);
    segment.exp_avg = exp_avg_.slice(0, local, n);
    segment.exp_avg_sq = exp_avg_sq_.slice(0, local, n);
    // bf16 training: the compute copy renewed in the same pass, unless the
    // ZeRO-1 gather renews it whole anyway
    const Tensor& copy = params_[i]->compute_copy;
    if (copy.owns_storage() && config_.zero == 0) {
      segment.compute = copy.view({copy.numel()}).slice(0, begin - offsets_[i], n);
    }
    segment.decay = decayed_[i];
    segments.push_back(std::move(segment));
  }
  ops::adamw_update(segments, step);
}

// zero 1: every dp rank's updated slice -> every parameter on every dp rank.
void AdamW::gather_parameters() {
  for (size_t i = 0; i < params_.size(); ++i) {
    const auto [begin, end] = in_slice(i);
    if (begin >= end) continue;
    param_slice_.slice(0, begin - slice_begin_, end - begin)
        .copy_from(params_[i]
                       ->value.view({params_[i]->value.numel()})
                       .slice(0, begin - offsets_[i], end - begin));
  }
  // [dp params] all-gather the updated slices over dp: [padded/dp] -> [padded]
  dp_.all_gather(param_slice_, flat_);
  for (size_t i = 0; i < params_.size(); ++i) {
    Tensor& value = params_[i]->value;
    value.copy_from(flat_.slice(0, offsets_[i], value.numel()).view(value.shape()));
    params_[i]->refresh_compute();  // the other ranks' slices of it changed too
  }
}

}  // namespace colrow
