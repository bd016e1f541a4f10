// VocabParallelCrossEntropy: logits split by vocabulary columns over tp.
// Collectives: forward one all-gather over tp of per-token partials (max, sum
// of exps, target logit, sum of logits); backward none. The passes over the
// logits and the combine are kernels (kernels/cpu/cross_entropy.h); this file
// orders them around the collective.
#include "colrow/nn/vocab_parallel_cross_entropy.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <sstream>

#include "colrow/core/error.h"
#include "colrow/nn/shared_buffer.h"
#include "colrow/nn/vocab_parallel_embedding.h"
#include "kernels/ops.h"

namespace colrow {
namespace {

std::string format(float value) {
  std::ostringstream s;
  s << value;
  return s.str();
}

// What the cross-entropy kernels need to know of this rank's classes.
ops::CrossEntropyRows kernel_rows(const std::vector<int32_t>& targets, int64_t first_row,
                                  int64_t tokens, int32_t ignore_index, int64_t vocab_start,
                                  int64_t real, int64_t vocab_size, int64_t vocab_size_local,
                                  float label_smoothing) {
  ops::CrossEntropyRows rows;
  rows.targets = &targets;
  rows.first_row = first_row;
  rows.tokens = tokens;
  rows.ignore_index = ignore_index;
  rows.vocab_start = vocab_start;
  rows.real = real;
  rows.vocab_size = vocab_size;
  rows.vocab_size_local = vocab_size_local;
  rows.label_smoothing = label_smoothing;
  return rows;
}

int64_t validated_local(int64_t vocab_size, int64_t padded, int tp, float label_smoothing) {
  validate_cross_entropy(vocab_size, padded, tp, label_smoothing);
  return padded / tp;
}

}  // namespace

void validate_cross_entropy(int64_t vocab_size, int64_t padded_vocab_size, int tp,
                            float label_smoothing) {
  validate_vocab_sizes("cross_entropy", vocab_size, padded_vocab_size, tp);
  if (!(label_smoothing >= 0.0f && label_smoothing <= 1.0f)) {
    throw ConfigError("[cross_entropy] label_smoothing (" + format(label_smoothing) +
                      ") must be in [0, 1]. Use 0 for none, 0.1 as is common.");
  }
}

double loss_sum(const Tensor& losses) {
  if (losses.ndim() != 1 || losses.dtype() != DType::kF32) {
    throw InternalError("[cross_entropy] losses " + shape_to_string(losses.shape()) +
                        " must be fp32 [tokens]");
  }
  const Tensor host = losses.to(Device::cpu());  // no copy on the CPU
  double total = 0.0;
  const float* loss = host.data();
  for (int64_t t = 0; t < host.numel(); ++t) total += loss[t * host.stride(0)];  // ignored: + 0
  return total;
}

float mean_loss(const Tensor& losses, int64_t counted) {
  const double total = loss_sum(losses);  // checks the losses even when none counts
  if (counted == 0) return std::numeric_limits<float>::quiet_NaN();
  return static_cast<float>(total / static_cast<double>(counted));
}

VocabParallelCrossEntropy::VocabParallelCrossEntropy(Communicator& tp, int64_t vocab_size,
                                                     int64_t padded_vocab_size,
                                                     float label_smoothing, int32_t ignore_index)
    : tp_(tp),
      vocab_size_(vocab_size),
      padded_vocab_size_(padded_vocab_size),
      label_smoothing_(label_smoothing),
      ignore_index_(ignore_index),
      vocab_size_local_(validated_local(vocab_size, padded_vocab_size, tp.size(), label_smoothing)),
      vocab_start_(tp.rank() * vocab_size_local_),
      real_local_(std::clamp(vocab_size - vocab_start_, int64_t{0}, vocab_size_local_)) {}

int64_t VocabParallelCrossEntropy::counted_targets(const std::vector<int32_t>& targets,
                                                   int64_t first, int64_t count) const {
  int64_t counted = 0;
  for (int64_t t = first; t < first + count; ++t) {
    const int32_t target = targets[static_cast<size_t>(t)];
    if (target == ignore_index_) continue;
    if (target < 0 || target >= vocab_size_) {
      throw InvalidInputError("[cross_entropy] target (" + std::to_string(target) +
                              ") at position " + std::to_string(t) +
                              " must be in [0, vocab_size (" + std::to_string(vocab_size_) +
                              ")) or be ignore_index (" + std::to_string(ignore_index_) +
                              "). Check that the labels match the model's vocabulary.");
    }
    ++counted;
  }
  return counted;
}

int64_t VocabParallelCrossEntropy::stage(const std::vector<int32_t>& targets, Device device) const {
  const int64_t counted = counted_targets(targets, 0, static_cast<int64_t>(targets.size()));
  ops::stage_cross_entropy_targets(device, targets);
  return counted;
}

CrossEntropyOutput VocabParallelCrossEntropy::forward(const Tensor& logits_local,
                                                      const std::vector<int32_t>& targets) {
  const int64_t tokens = static_cast<int64_t>(targets.size());
  if (logits_local.ndim() == 2 && logits_local.size(0) != tokens) {
    throw InternalError("[cross_entropy] logits_local " + shape_to_string(logits_local.shape()) +
                        " must have a row per target (" + std::to_string(tokens) + ")");
  }
  return forward_rows(logits_local, targets, 0);
}

CrossEntropyOutput VocabParallelCrossEntropy::forward_rows(const Tensor& logits_local,
                                                           const std::vector<int32_t>& targets,
                                                           int64_t first_row) {
  // Everything that can fail is checked before the first collective; targets
  // are replicated, so every rank throws alike.
  const int64_t v_local = vocab_size_local_;
  const int64_t tokens = logits_local.ndim() == 2 ? logits_local.size(0) : -1;
  if (tokens < 0 || logits_local.size(1) != v_local ||
      (v_local > 1 && logits_local.stride(1) != 1) || first_row < 0 ||
      first_row + tokens > static_cast<int64_t>(targets.size())) {
    throw InternalError("[cross_entropy] logits_local " + shape_to_string(logits_local.shape()) +
                        " must be [rows, padded_vocab_size/tp (" + std::to_string(v_local) +
                        ")] with contiguous rows, its rows from " + std::to_string(first_row) +
                        " on within the " + std::to_string(targets.size()) + " targets");
  }
  counted_ = counted_targets(targets, first_row, tokens);
  logits_ = logits_local;
  logits_consumed_ = false;
  targets_ = targets;  // the same size for a batch's chunks: no allocation
  first_row_ = first_row;
  const Device device = logits_local.device();
  partials_ = leading_rows(storage_.partials, {tokens, kernels::kCrossEntropyPartials}, device);
  max_ = leading_rows(storage_.max, {tokens}, device);
  sum_exp_ = leading_rows(storage_.sum_exp, {tokens}, device);
  losses_ = leading_rows(storage_.losses, {tokens}, device);
  const ops::CrossEntropyRows rows =
      kernel_rows(targets_, first_row_, tokens, ignore_index_, vocab_start_, real_local_,
                  vocab_size_, v_local, label_smoothing_);

  // One pass over my logits: per row, my real classes' max, sum of exps and
  // sum of logits (both relative to that max), and the target logit if mine.
  ops::cross_entropy_partials(logits_, rows, partials_);
  const Tensor* gathered = &partials_;
  if (tp_.size() > 1) {
    gathered_ = leading_rows(storage_.gathered,
                             {tp_.size() * tokens, kernels::kCrossEntropyPartials}, device);
    tp_.all_gather(partials_, gathered_);  // all-gather over tp: [tp * tokens, 4]
    gathered = &gathered_;
  }
  // The global max, the softmax denominator and the loss, from the gathered
  // partials only, in rank order, so every rank computes the same bits.
  ops::cross_entropy_combine(*gathered, rows, max_, sum_exp_, losses_);
  CrossEntropyOutput out;
  out.losses = losses_;
  out.counted = counted_;
  return out;
}

const Tensor& VocabParallelCrossEntropy::backward() {
  // The mean's gradient; with nothing counted the loss is NaN but no gradient
  // flows (every row is ignored), so the scale does not matter.
  return backward_scaled(nullptr, counted_ > 0 ? 1.0f / static_cast<float>(counted_) : 0.0f);
}

const Tensor& VocabParallelCrossEntropy::backward(float grad_scale) {
  return backward_scaled(nullptr, grad_scale);
}

const Tensor& VocabParallelCrossEntropy::backward(const Tensor& dloss) {
  const int64_t tokens = logits_.ndim() == 2 ? logits_.size(0) : 0;
  if (dloss.ndim() != 1 || dloss.size(0) != tokens || !dloss.is_contiguous()) {
    throw InternalError("[cross_entropy] dloss " + shape_to_string(dloss.shape()) +
                        " must be [tokens (" + std::to_string(tokens) + ")]");
  }
  return backward_scaled(&dloss, 0.0f);
}

const Tensor& VocabParallelCrossEntropy::backward_scaled(const Tensor* dloss, float uniform_scale) {
  // [no communication] every rank holds the reduced max and sum, so its slice
  // of softmax - target distribution is local.
  const int64_t tokens = logits_.ndim() == 2 ? logits_.size(0) : 0;
  if (logits_consumed_) {
    throw InternalError(
        "[cross_entropy] backward again after a backward that wrote the gradient over the "
        "logits: run forward first");
  }
  // In place, each element is read before it is overwritten, by the same
  // thread; otherwise into this layer's own buffer (never the caller's).
  logits_consumed_ = in_place_ && logits_.is_contiguous();
  Tensor& grad = logits_consumed_ ? logits_ : dlogits_;
  if (!logits_consumed_) {
    dlogits_ = leading_rows(storage_.dlogits, {tokens, vocab_size_local_}, logits_.device(),
                            logits_.dtype());
  }
  const ops::CrossEntropyRows rows =
      kernel_rows(targets_, first_row_, tokens, ignore_index_, vocab_start_, real_local_,
                  vocab_size_, vocab_size_local_, label_smoothing_);
  ops::cross_entropy_backward(logits_, rows, max_, sum_exp_, dloss, uniform_scale, grad);
  return grad;
}

}  // namespace colrow
