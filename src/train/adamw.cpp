// AdamW as torch.optim.AdamW (single-tensor path) over a tp x dp mesh, with
// ZeRO-1 as Megatron's DistributedOptimizer does it: one flat gradient buffer,
// reduce-scattered over dp; each dp rank keeps moments for its slice only,
// updates it, and the updated parameters are all-gathered over dp.
// Collectives: see adamw.h; every one is on its own tagged line below.
#include "colrow/train/adamw.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <memory>
#include <string>

#include "colrow/core/error.h"
#include "colrow/nn/parameter_group.h"
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
    total_size_ += p->value.numel();
    counted_.push_back(p->shard.first_replica(tp_.rank(), tp_.size()) && !p->pipeline_copy);
    decayed_.push_back(config_.decays(*p));
  }
  const Device device = params_.empty() ? Device::cpu() : params_.front()->value.device();
  lay_out_buckets(device);
  exp_avg_ = Tensor::zeros({slice_size_}, device);
  exp_avg_sq_ = Tensor::zeros({slice_size_}, device);
}

size_t AdamW::unit_start(size_t last) const {
  const ParameterGroup* group = params_[last]->group;
  if (group == nullptr) return last;
  const size_t parts = group->size();
  bool listed_in_order = last + 1 >= parts;
  for (size_t k = 0; listed_in_order && k < parts; ++k) {
    listed_in_order = params_[last + 1 - parts + k] == &group->part(k);
  }
  if (!listed_in_order) {
    throw InternalError("[adamw] " + params_[last]->name +
                        ": the parts of a parameter group are listed together, in the group's "
                        "order (as the layers' parameters() list them)");
  }
  return last + 1 - parts;
}

void AdamW::lay_out_buckets(Device device) {
  // Parameters from the end of the list (backward's first) into buckets of
  // at least bucket_size elements; then each bucket keeps the list's order.
  // The parts of a ParameterGroup (attention's fused q, k, v) go as one unit:
  // side by side, in the group's order, in one bucket, so that their
  // gradients move into the buffer as the group's one tensor.
  std::vector<std::vector<size_t>> groups;
  int64_t filled = 0;
  for (size_t end = params_.size(); end > 0;) {
    const size_t first = unit_start(end - 1);
    if (groups.empty() || (config_.bucket_size > 0 && filled >= config_.bucket_size)) {
      groups.emplace_back();
      filled = 0;
    }
    for (size_t i = end; i-- > first;) {
      groups.back().insert(groups.back().begin(), i);
      filled += params_[i]->value.numel();
    }
    end = first;
  }
  const int64_t dp_size = config_.zero == 1 ? dp_.size() : 1;
  offsets_.assign(params_.size(), 0);
  bucket_of_.assign(params_.size(), 0);
  for (std::vector<size_t>& group : groups) {
    Bucket bucket;
    bucket.begin = padded_size_;
    for (size_t i : group) {
      offsets_[i] = padded_size_ + bucket.size;
      bucket_of_[i] = buckets_.size();
      bucket.size += params_[i]->value.numel();
    }
    // Padded so that dp equal parts tile the bucket; the padding stays zero.
    bucket.size = (bucket.size + dp_size - 1) / dp_size * dp_size;
    bucket.part_size = bucket.size / dp_size;
    bucket.part_begin = bucket.begin + bucket.part_size * (config_.zero == 1 ? dp_.rank() : 0);
    bucket.slice_offset = config_.zero == 1 ? slice_size_ : bucket.begin;
    bucket.params = std::move(group);
    padded_size_ += bucket.size;
    slice_size_ += bucket.part_size;
    buckets_.push_back(std::move(bucket));
  }
  flat_ = Tensor::zeros({padded_size_}, device);
  // The gradients move into it (Megatron's contiguous grad buffer): backward
  // accumulates there, the fp32 dp reduction starts from there without a
  // copy, and the model holds no second set of them.
  for (size_t i = 0; i < params_.size(); ++i) {
    if (ParameterGroup* group = params_[i]->group) {
      // Its first part: the whole group's rows, which the layout kept together.
      if (&group->part(0) == params_[i]) {
        group->move_grads_into(flat_.slice(0, offsets_[i], group->grad().numel()));
      }
      continue;
    }
    Tensor& grad = params_[i]->grad;
    Tensor place = flat_.slice(0, offsets_[i], grad.numel()).view(grad.shape());
    place.copy_from(grad);
    grad = place;  // a handle: the old storage goes when its last handle does
  }
  // zero 0: every rank owns everything, and the sums land in place
  grad_slice_ = config_.zero == 1 ? Tensor::zeros({slice_size_}, device) : flat_;
  if (config_.zero == 1) param_slice_ = Tensor::zeros({slice_size_}, device);
  if (config_.grad_reduce_dtype == DType::kBF16 && dp_.size() > 1) {
    wire_ = Tensor::zeros({padded_size_}, device, DType::kBF16);
    if (config_.zero == 1) wire_slice_ = Tensor::zeros({slice_size_}, device, DType::kBF16);
  }
  for (Bucket& bucket : buckets_) {
    bucket.flat = flat_.slice(0, bucket.begin, bucket.size);
    bucket.part = grad_slice_.slice(0, bucket.slice_offset, bucket.part_size);
    if (wire_.owns_storage()) {
      bucket.wire = wire_.slice(0, bucket.begin, bucket.size);
      if (config_.zero == 1)
        bucket.wire_part = wire_slice_.slice(0, bucket.slice_offset, bucket.part_size);
    }
    if (config_.zero == 1) {
      bucket.params_part = param_slice_.slice(0, bucket.slice_offset, bucket.part_size);
    }
  }
  reported_.assign(params_.size(), false);
  unreported_.assign(buckets_.size(), 0);
  reset_buckets();
}

void AdamW::zero_grad() {
  flat_.zero();  // every gradient, and the buckets' padding, in one pass
}

double AdamW::step(float lr, int micro_batches) {
  const double norm = reduce_and_norm(micro_batches);
  // A NaN or Inf anywhere: no rank updates anything (the norm is the same
  // on every rank), so the weights and moments stay as they were.
  if (!std::isfinite(norm)) return norm;
  const double coefficient = clip_coefficient(norm, config_.grad_clip);
  ++step_count_;
  update(lr, static_cast<float>(coefficient));
  if (config_.zero == 1) gather_parameters();
  return norm;
}

AdamW::Owned AdamW::owned(size_t i) const {
  const Bucket& bucket = buckets_[bucket_of_[i]];
  const int64_t begin = std::max(offsets_[i], bucket.part_begin);
  const int64_t end =
      std::min(offsets_[i] + params_[i]->value.numel(), bucket.part_begin + bucket.part_size);
  return {begin, end, bucket.slice_offset + (begin - bucket.part_begin)};
}

void AdamW::pack_bucket(const Bucket& bucket, Tensor& buffer) {
  int64_t end = bucket.begin;
  for (size_t i : bucket.params) {
    const Tensor& grad = params_[i]->grad;
    Tensor place = buffer.slice(0, offsets_[i], grad.numel());
    // fp32 on the wire: the gradient is there already (lay_out_buckets)
    if (place.raw_data() != grad.raw_data()) place.view(grad.shape()).convert_from(grad);
    end = offsets_[i] + grad.numel();
  }
  buffer.slice(0, end, bucket.begin + bucket.size - end).zero();
}

void AdamW::grads_ready(const std::vector<size_t>& indices) {
  if (!config_.overlap_grad_reduce || dp_.size() == 1) return;
  for (size_t i : indices) {
    if (i >= params_.size() || reported_[i]) {
      throw InternalError(
          "[adamw] grads_ready: parameter " + std::to_string(i) +
          (i >= params_.size() ? " is not in the optimizer" : " was reported twice in one step"));
    }
    reported_[i] = true;
    const size_t b = bucket_of_[i];
    if (--unreported_[b] == 0) start_bucket(b);
  }
}

void AdamW::start_bucket(size_t b) {
  Bucket& bucket = buckets_[b];
  unreported_[b] = 0;  // started: step() leaves it to its collective
  const bool bf16_wire = wire_.owns_storage();
  pack_bucket(bucket, bf16_wire ? wire_ : flat_);  // while the ones before cross
  if (bf16_wire && config_.zero == 0) {
    // [dp grads] all-reduce bucket b over dp as bf16
    in_flight_.push_back(dp_.start_all_reduce_sum_bf16_wire(bucket.wire));
  } else if (bf16_wire) {
    // [dp grads] reduce-scatter bucket b over dp as bf16
    in_flight_.push_back(dp_.start_reduce_scatter_sum_bf16_wire(bucket.wire, bucket.wire_part));
  } else if (config_.zero == 0) {
    // [dp grads] all-reduce bucket b over dp; its part of grad_slice_ is itself
    in_flight_.push_back(dp_.start_all_reduce_sum(bucket.flat));
  } else {
    // [dp grads] reduce-scatter bucket b over dp: [size] -> this rank's [size/dp]
    in_flight_.push_back(dp_.start_reduce_scatter_sum(bucket.flat, bucket.part));
  }
}

void AdamW::reduce_grads() {
  for (size_t b = 0; b < buckets_.size(); ++b) {
    if (unreported_[b] > 0) start_bucket(b);
  }
  for (auto& pending : in_flight_) pending->wait();
  in_flight_.clear();
  if (wire_.owns_storage()) {
    if (config_.zero == 0) {
      flat_.convert_from(wire_);
    } else {
      grad_slice_.convert_from(wire_slice_);
    }
  }
  reset_buckets();
}

void AdamW::reset_buckets() {
  std::fill(reported_.begin(), reported_.end(), false);
  for (size_t b = 0; b < buckets_.size(); ++b) unreported_[b] = buckets_[b].params.size();
}

// grads -> grad_slice_ (dp-averaged); returns the global norm of the averaged grads.
double AdamW::reduce_and_norm(int micro_batches) {
  reduce_grads();
  // The same float division in both modes, so equal sums give equal averages
  // (none for one replica and one micro-batch: ops::divide skips x / 1).
  ops::divide(grad_slice_, static_cast<float>(dp_.size()) * static_cast<float>(micro_batches));

  // Squares of the counted parameters' elements inside this rank's slice.
  std::vector<Tensor> counted, uncounted;
  for (size_t i = 0; i < params_.size(); ++i) {
    const auto [begin, end, local] = owned(i);
    if (begin < end) {
      (counted_[i] ? counted : uncounted).push_back(grad_slice_.slice(0, local, end - begin));
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
    const auto [begin, end, local] = owned(i);
    if (begin >= end) continue;
    const int64_t n = end - begin;
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
    const auto [begin, end, local] = owned(i);
    if (begin >= end) continue;
    param_slice_.slice(0, local, end - begin)
        .copy_from(params_[i]
                       ->value.view({params_[i]->value.numel()})
                       .slice(0, begin - offsets_[i], end - begin));
  }
  for (Bucket& bucket : buckets_) {
    // [dp params] all-gather bucket b's updated parts over dp: [size/dp] -> [size]
    dp_.all_gather(bucket.params_part, bucket.flat);
  }
  for (size_t i = 0; i < params_.size(); ++i) {
    Tensor& value = params_[i]->value;
    value.copy_from(flat_.slice(0, offsets_[i], value.numel()).view(value.shape()));
    params_[i]->refresh_compute();  // the other ranks' slices of it changed too
  }
}

Tensor AdamW::gather_slices(const Tensor& slice) {
  if (config_.zero == 0) return slice;
  Tensor whole = Tensor::empty({padded_size_}, slice.device());  // the buckets tile it
  for (const Bucket& bucket : buckets_) {
    Tensor out = whole.slice(0, bucket.begin, bucket.size);
    // [dp] every rank's part of bucket b
    dp_.all_gather(slice.slice(0, bucket.slice_offset, bucket.part_size), out);
  }
  return whole;
}

void AdamW::copy_own_slice(const Tensor& whole, Tensor& slice) const {
  for (const Bucket& bucket : buckets_) {
    slice.slice(0, bucket.slice_offset, bucket.part_size)
        .copy_from(whole.slice(0, bucket.part_begin, bucket.part_size));
  }
}

}  // namespace colrow
