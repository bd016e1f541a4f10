// VocabParallelCrossEntropy: logits split by vocabulary columns over tp.
// Collectives: forward three all-reduces over tp of per-token values (max,
// sum of exps, target logit [+ sum of logits]); backward none.
#include "colrow/nn/vocab_parallel_cross_entropy.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <sstream>

#include "colrow/core/error.h"
#include "colrow/nn/vocab_parallel_embedding.h"

namespace colrow {
namespace {

constexpr int64_t kParallelElements = 1 << 14;  // below this, threads cost more than they save

// exp(z) for the shifted logits z = x - max <= 0, in a form the compiler
// vectorizes (glibc's expf stays a scalar call without -ffast-math, and
// -ffast-math would break the -inf / NaN semantics this file relies on; this
// file is built with -fno-trapping-math so the selects below if-convert).
// Cephes' expf: z = n ln2 + r, |r| <= ln2/2, ln2 in two parts (Cody-Waite),
// e^r by its degree-7 polynomial, 2^n through the exponent bits. Relative
// error below 1.5 u (u = 2^-24; 1.43 u, checked over every float in [-87, 0]);
// 0 below -87 (where e^z would turn subnormal) and for -inf; NaN stays NaN.
// About 8x faster than the scalar expf here (AVX-512).
inline float exp_nonpositive(float z) {
  const float zc = std::max(z, -87.0f);
  const float n = std::floor(zc * 1.44269504088896341f + 0.5f);  // in [-125, 0]
  const float r = (zc - n * 0.693359375f) + n * 2.12194440e-4f;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * r * r + r + 1.0f;
  const int32_t bits = (static_cast<int32_t>(n) + 127) << 23;
  float two_n;
  std::memcpy(&two_n, &bits, sizeof(two_n));
  const float e = p * two_n;  // unconditional, so the select below needs no branch
  return z < -87.0f ? 0.0f : e;
}

std::string format(float value) {
  std::ostringstream s;
  s << value;
  return s.str();
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

CrossEntropyOutput VocabParallelCrossEntropy::forward(const Tensor& logits_local,
                                                      const std::vector<int32_t>& targets) {
  // Everything that can fail is checked before the first collective; targets
  // are replicated, so every rank throws alike.
  const int64_t tokens = static_cast<int64_t>(targets.size()), v_local = vocab_size_local_;
  if (logits_local.ndim() != 2 || logits_local.size(0) != tokens ||
      logits_local.size(1) != v_local || (v_local > 1 && logits_local.stride(1) != 1)) {
    throw InternalError("[cross_entropy] logits_local " + shape_to_string(logits_local.shape()) +
                        " must be [tokens (" + std::to_string(tokens) +
                        "), padded_vocab_size/tp (" + std::to_string(v_local) +
                        ")] with contiguous rows");
  }
  counted_ = 0;
  for (size_t t = 0; t < targets.size(); ++t) {
    const int32_t target = targets[t];
    if (target == ignore_index_) continue;
    if (target < 0 || target >= vocab_size_) {
      throw InvalidInputError("[cross_entropy] target (" + std::to_string(target) +
                              ") at position " + std::to_string(t) +
                              " must be in [0, vocab_size (" + std::to_string(vocab_size_) +
                              ")) or be ignore_index (" + std::to_string(ignore_index_) +
                              "). Check that the labels match the model's vocabulary.");
    }
    ++counted_;
  }
  logits_ = logits_local;
  targets_ = targets;
  const bool smoothing = label_smoothing_ > 0.0f;
  ensure_shape(max_, {tokens});
  ensure_shape(sum_exp_, {tokens});
  ensure_shape(target_, smoothing ? Shape{tokens, 2} : Shape{tokens});
  ensure_shape(losses_, {tokens});
  const int64_t ld = logits_.row_stride(), real = real_local_, start = vocab_start_;
  const int32_t ignore = ignore_index_;
  const float* x = logits_.data();
  float *row_max = max_.data(), *sum_exp = sum_exp_.data(), *packed = target_.data();
  const int64_t stride = smoothing ? 2 : 1;
  const bool parallel = tokens * v_local > kParallelElements;

  // One pass per row over my real classes, while the row sits in cache: the
  // local max m_r (-inf when I have no real class; 0 on ignored rows), then
  // sum_j exp(x_j - m_r) and sum_j (x_j - m_r) in double.
  local_max_.resize(tokens);
  local_sum_exp_.resize(tokens);
  local_sum_shifted_.resize(tokens);
  float* local_max = local_max_.data();
  double *local_sum_exp = local_sum_exp_.data(), *local_sum_shifted = local_sum_shifted_.data();
#pragma omp parallel for schedule(static) if (parallel)
  for (int64_t t = 0; t < tokens; ++t) {
    float m = targets[t] == ignore ? 0.0f : -std::numeric_limits<float>::infinity();
    double s = 0.0, sx = 0.0;
    if (targets[t] != ignore && real > 0) {
      const float* row = x + t * ld;
      // The select, not std::max: GCC vectorizes only this form (same result,
      // NaN skipped here and propagated by the exp sum below).
#pragma omp simd reduction(max : m)
      for (int64_t j = 0; j < real; ++j) m = row[j] > m ? row[j] : m;
      if (m == -std::numeric_limits<float>::infinity()) {
        sx = -std::numeric_limits<double>::infinity();  // all my logits -inf: no mass
      } else {
#pragma omp simd reduction(+ : s, sx)
        for (int64_t j = 0; j < real; ++j) {
          const float z = row[j] - m;
          s += exp_nonpositive(z);
          sx += z;
        }
      }
    }
    local_max[t] = m;
    row_max[t] = m;
    local_sum_exp[t] = s;
    local_sum_shifted[t] = sx;
  }
  tp_.all_reduce_max(max_);  // all-reduce over tp: the max m over every real class, [tokens]

  // Shift my sums from m_r to the global m (one exp per row; exp(m_r - m) <= 1
  // never overflows): sum_j exp(x_j - m), sum_j (x_j - m), and the target's
  // x - m on the rank that owns it (0 elsewhere).
#pragma omp parallel for schedule(static) if (tokens > kParallelElements)
  for (int64_t t = 0; t < tokens; ++t) {
    float* out = packed + t * stride;
    sum_exp[t] = 0.0f;
    out[0] = 0.0f;
    if (smoothing) out[1] = 0.0f;
    if (targets[t] == ignore || real == 0) continue;
    const double m = row_max[t], shift = m - local_max[t];  // >= 0
    sum_exp[t] = static_cast<float>(local_sum_exp[t] * std::exp(-shift));
    if (smoothing) out[1] = static_cast<float>(local_sum_shifted[t] - real * shift);
    const int64_t mine = targets[t] - start;
    if (mine >= 0 && mine < real) out[0] = x[t * ld + mine] - row_max[t];
  }
  tp_.all_reduce_sum(sum_exp_);  // all-reduce over tp: the softmax denominator, [tokens]
  tp_.all_reduce_sum(target_);   // all-reduce over tp: target logit (+ logit sum), [tokens(, 2)]

  // From the reduced values only, so every rank computes the same bits:
  //   loss = log S - (1 - a) (x_target - m) - a/V sum_j (x_j - m)
  const double a = label_smoothing_, a_over_v = a / static_cast<double>(vocab_size_);
  float* losses = losses_.data();
  double total = 0.0;
  for (int64_t t = 0; t < tokens; ++t) {
    if (targets[t] == ignore) {
      losses[t] = 0.0f;
      continue;
    }
    const float* in = packed + t * stride;
    double loss = std::log(static_cast<double>(sum_exp[t])) - (1.0 - a) * in[0];
    if (smoothing) loss -= a_over_v * in[1];
    losses[t] = static_cast<float>(loss);
    total += losses[t];
  }
  CrossEntropyOutput out;
  out.losses = losses_;
  out.counted = counted_;
  out.mean = counted_ > 0 ? static_cast<float>(total / static_cast<double>(counted_))
                          : std::numeric_limits<float>::quiet_NaN();
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
  const int64_t tokens = static_cast<int64_t>(targets_.size());
  if (dloss.ndim() != 1 || dloss.size(0) != tokens || !dloss.is_contiguous()) {
    throw InternalError("[cross_entropy] dloss " + shape_to_string(dloss.shape()) +
                        " must be [tokens (" + std::to_string(tokens) + ")]");
  }
  return backward_scaled(dloss.data(), 0.0f);
}

const Tensor& VocabParallelCrossEntropy::backward_scaled(const float* dloss, float uniform_scale) {
  // [no communication] every rank holds the reduced max and sum, so its slice
  // of softmax - target distribution is local.
  const int64_t tokens = static_cast<int64_t>(targets_.size()), v_local = vocab_size_local_;
  ensure_shape(dlogits_, {tokens, v_local});
  const int64_t ld = logits_.row_stride(), real = real_local_, start = vocab_start_;
  const int32_t ignore = ignore_index_;
  const float a = label_smoothing_;
  const float a_over_v = static_cast<float>(static_cast<double>(a) / vocab_size_);
  const float one_minus_a = 1.0f - a;
  const float *x = logits_.data(), *row_max = max_.data(), *sum_exp = sum_exp_.data();
  float* grad = dlogits_.data();
#pragma omp parallel for schedule(static) if (tokens * v_local > kParallelElements)
  for (int64_t t = 0; t < tokens; ++t) {
    float* out = grad + t * v_local;
    if (targets_[t] == ignore) {
      std::fill(out, out + v_local, 0.0f);
      continue;
    }
    const float scale = dloss != nullptr ? dloss[t] : uniform_scale;
    const float* row = x + t * ld;
    const float m = row_max[t], inv_sum = 1.0f / sum_exp[t];
#pragma omp simd
    for (int64_t j = 0; j < real; ++j) {
      out[j] = scale * (exp_nonpositive(row[j] - m) * inv_sum - a_over_v);
    }
    const int64_t mine = targets_[t] - start;
    if (mine >= 0 && mine < real) out[mine] -= scale * one_minus_a;
    std::fill(out + real, out + v_local, 0.0f);  // padded classes: no gradient
  }
  return dlogits_;
}

}  // namespace colrow
