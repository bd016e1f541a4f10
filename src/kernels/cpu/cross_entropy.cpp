// The vocabulary-parallel cross-entropy's passes over the local logits (see
// cross_entropy.h). This file is built with -fno-trapping-math so that the
// selects in exp_nonpositive if-convert and the row loops vectorize.
// Rows are cut into fixed chunks of kVocabChunk columns (parallel.h) and the
// work is split over (token, chunk): a few tokens over a large vocabulary
// still make many tasks. The max and the sums combine the chunks' partials in
// chunk order, so the bits depend on the shape, never on the thread count.
// Logits of either dtype are read natively (E: float or bf16 bits), each
// element widened as it is read, so bf16 logits cost no fp32 copy; the
// arithmetic is fp32 (the sums double) whatever E, and a bf16 gradient is
// each fp32 gradient rounded once: the fp32 kernel's numbers, bit for bit.
#include "kernels/cpu/cross_entropy.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <tuple>
#include <vector>

#include "colrow/core/bfloat16.h"
#include "colrow/core/error.h"
#include "kernels/checks/cross_entropy.h"
#include "kernels/cpu/parallel.h"
#include "kernels/elements.h"

namespace colrow::kernels::cpu {
namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();

// exp(z) for the shifted logits z = x - max <= 0, in a form the compiler
// vectorizes (glibc's expf stays a scalar call without -ffast-math, and
// -ffast-math would break the -inf / NaN semantics this file relies on).
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
  // n is in [-125, 0] but for a NaN z, which takes 0 here (e is NaN through
  // p anyway): converting NaN to int, and shifting what that gives, is UB.
  const float n_defined = n >= -126.0f ? n : 0.0f;
  const int32_t bits = (static_cast<int32_t>(n_defined) + 127) << 23;
  float two_n;
  std::memcpy(&two_n, &bits, sizeof(two_n));
  const float e = p * two_n;  // unconditional, so the select below needs no branch
  return z < -87.0f ? 0.0f : e;
}

template <typename E>
void local_max_rows(const E* x, int64_t ld, int64_t tokens, const CrossEntropyRows& rows,
                    float* row_max) {
  const int64_t real = rows.real;
  const std::vector<int32_t>& targets = *rows.targets;
  const int32_t ignore = rows.ignore_index;
  const int64_t chunks = std::max<int64_t>(1, ceil_div(real, kVocabChunk));
  std::vector<float> partial(static_cast<size_t>(tokens * chunks));
#pragma omp parallel for schedule(static) if (tokens * real > kParallelElements)
  for (int64_t task = 0; task < tokens * chunks; ++task) {
    const int64_t t = task / chunks, j0 = task % chunks * kVocabChunk;
    const int64_t j1 = std::min(real, j0 + kVocabChunk);
    if (targets[t] == ignore) continue;
    const E* row = x + t * ld;
    float m = -kInf;
    // The select, not std::max: GCC vectorizes only this form (same result,
    // NaN skipped here and propagated by the exp sum).
#pragma omp simd reduction(max : m)
    for (int64_t j = j0; j < j1; ++j) {
      const float v = widen(row[j]);
      m = v > m ? v : m;
    }
    partial[task] = m;
  }
  for (int64_t t = 0; t < tokens; ++t) {
    float m = targets[t] == ignore ? 0.0f : -kInf;
    if (targets[t] != ignore) {
      for (int64_t c = 0; c < chunks; ++c) {
        m = partial[t * chunks + c] > m ? partial[t * chunks + c] : m;
      }
    }
    row_max[t] = m;
  }
}

template <typename E>
void sums_rows(const E* x, int64_t ld, int64_t tokens, const CrossEntropyRows& rows,
               const float* row_max, float* sums, float* packed) {
  const int64_t real = rows.real;
  const bool smoothing = rows.label_smoothing > 0.0f;
  const int64_t width = smoothing ? 2 : 1;
  const std::vector<int32_t>& targets = *rows.targets;
  const int32_t ignore = rows.ignore_index;
  const int64_t start = rows.vocab_start;
  const int64_t chunks = std::max<int64_t>(1, ceil_div(real, kVocabChunk));
  std::vector<double> partial(static_cast<size_t>(2 * tokens * chunks));  // (s, sx) per task
#pragma omp parallel for schedule(static) if (tokens * real > kParallelElements)
  for (int64_t task = 0; task < tokens * chunks; ++task) {
    const int64_t t = task / chunks, j0 = task % chunks * kVocabChunk;
    const int64_t j1 = std::min(real, j0 + kVocabChunk);
    const float m = row_max[t];
    if (targets[t] == ignore || m == -kInf) continue;
    const E* row = x + t * ld;
    const E* chunk = row + j0;
    if (smoothing) {  // and sum (x - max), label smoothing's term, in the same pass
      std::tie(partial[2 * task], partial[2 * task + 1]) = lane_sums(j1 - j0, [&](int64_t j) {
        const float shifted = widen(chunk[j]) - m;
        return std::pair<double, double>{exp_nonpositive(shifted), shifted};
      });
    } else {
      partial[2 * task] = lane_sum(
          j1 - j0, [&](int64_t j) -> double { return exp_nonpositive(widen(chunk[j]) - m); });
    }
  }
  for (int64_t t = 0; t < tokens; ++t) {
    float* out = packed + t * width;
    double s = 0.0, sx = 0.0;
    out[0] = 0.0f;
    if (targets[t] != ignore && real > 0) {
      const E* row = x + t * ld;
      const float m = row_max[t];
      if (m == -kInf) {
        sx = -std::numeric_limits<double>::infinity();  // every logit -inf: no mass
      } else {
        for (int64_t c = 0; c < chunks; ++c) {
          s += partial[2 * (t * chunks + c)];
          sx += partial[2 * (t * chunks + c) + 1];
        }
      }
      const int64_t mine = targets[t] - start;
      if (mine >= 0 && mine < real) out[0] = widen(row[mine]) - m;
    }
    sums[t] = static_cast<float>(s);
    if (smoothing) out[1] = static_cast<float>(sx);
  }
}

// dlogits may be the logits themselves (the gradient in place): each element
// is read before it is written, by the same iteration.
template <typename E>
void backward_rows(const E* x, int64_t ld, int64_t tokens, int64_t v_local,
                   const CrossEntropyRows& rows, const float* row_max, const float* sums,
                   const float* dl, float uniform_scale, E* grad) {
  const int64_t real = rows.real;
  const std::vector<int32_t>& targets = *rows.targets;
  const int32_t ignore = rows.ignore_index;
  const int64_t start = rows.vocab_start;
  const float a = rows.label_smoothing;
  // 0 without smoothing, whatever vocab_size holds (0 when unset), as on the GPU.
  const float a_over_v =
      a > 0.0f ? static_cast<float>(static_cast<double>(a) / rows.vocab_size) : 0.0f;
  const float one_minus_a = 1.0f - a;
  const int64_t chunks = std::max<int64_t>(1, ceil_div(v_local, kVocabChunk));
#pragma omp parallel for schedule(static) if (tokens * v_local > kParallelElements)
  for (int64_t task = 0; task < tokens * chunks; ++task) {
    const int64_t t = task / chunks, j0 = task % chunks * kVocabChunk;
    const int64_t j1 = std::min(v_local, j0 + kVocabChunk), jr = std::min(real, j1);
    E* out = grad + t * v_local;
    if (targets[t] == ignore) {
      std::fill(out + j0, out + j1, narrow<E>(0.0f));
      continue;
    }
    const float scale = dl != nullptr ? dl[t] : uniform_scale;
    const E* row = x + t * ld;
    const float m = row_max[t], inv_sum = 1.0f / sums[t];
    const float target_step = scale * one_minus_a;
    const int64_t mine = targets[t] - start;
#pragma omp simd
    for (int64_t j = j0; j < jr; ++j) {
      const float g = scale * (exp_nonpositive(widen(row[j]) - m) * inv_sum - a_over_v);
      out[j] = narrow<E>(j == mine ? g - target_step : g);
    }
    std::fill(out + std::max(j0, jr), out + j1, narrow<E>(0.0f));  // padded classes: no gradient
  }
}

}  // namespace

void cross_entropy_local_max(const Tensor& logits_local, const CrossEntropyRows& rows,
                             Tensor& max) {
  const int64_t tokens = check_cross_entropy_local_max(logits_local, rows, max);
  with_elements(logits_local, [&](const auto* x) {
    local_max_rows(x, logits_local.row_stride(), tokens, rows, max.data());
  });
}

void cross_entropy_sums(const Tensor& logits_local, const CrossEntropyRows& rows, const Tensor& max,
                        Tensor& sum_exp, Tensor& target_logit) {
  const int64_t tokens = check_cross_entropy_sums(logits_local, rows, max, sum_exp, target_logit);
  with_elements(logits_local, [&](const auto* x) {
    sums_rows(x, logits_local.row_stride(), tokens, rows, max.data(), sum_exp.data(),
              target_logit.data());
  });
}

void cross_entropy_loss(const Tensor& sum_exp, const Tensor& target_logit,
                        const CrossEntropyRows& rows, Tensor& losses) {
  const int64_t tokens = check_cross_entropy_loss(sum_exp, target_logit, rows, losses);
  const bool smoothing = rows.label_smoothing > 0.0f;
  const int64_t width = smoothing ? 2 : 1;
  //   loss = log S - (1 - a) (x_target - m) - a/V sum_j (x_j - m)
  const double a = rows.label_smoothing, a_over_v = a / static_cast<double>(rows.vocab_size);
  const std::vector<int32_t>& targets = *rows.targets;
  const float *sums = sum_exp.data(), *packed = target_logit.data();
  float* out = losses.data();
  for (int64_t t = 0; t < tokens; ++t) {
    if (targets[t] == rows.ignore_index) {
      out[t] = 0.0f;
      continue;
    }
    const float* in = packed + t * width;
    double loss = std::log(static_cast<double>(sums[t])) - (1.0 - a) * in[0];
    if (smoothing) loss -= a_over_v * in[1];
    out[t] = static_cast<float>(loss);
  }
}

void cross_entropy_backward(const Tensor& logits_local, const CrossEntropyRows& rows,
                            const Tensor& max, const Tensor& sum_exp, const Tensor* dloss,
                            float uniform_scale, Tensor& dlogits_local) {
  const char* what = "cross_entropy_backward";
  const int64_t tokens = check_cross_entropy_backward(logits_local, rows, max, sum_exp, dloss);
  const int64_t v_local = dlogits_local.size(-1);
  if (dlogits_local.ndim() != 2 || !dlogits_local.is_contiguous() ||
      dlogits_local.size(0) != tokens || v_local != logits_local.size(1)) {
    cross_entropy_fail(what, "dlogits_local " + shape_to_string(dlogits_local.shape()) +
                                 " must be contiguous and shaped like logits_local " +
                                 shape_to_string(logits_local.shape()));
  }
  check_cross_entropy_grad_dtype(what, logits_local, dlogits_local);
  const float* dl = dloss != nullptr ? dloss->data() : nullptr;
  with_elements(logits_local, [&](const auto* x) {
    using E = element_of<decltype(x)>;
    E* grad = static_cast<E*>(dlogits_local.raw_data());
    backward_rows(x, logits_local.row_stride(), tokens, v_local, rows, max.data(), sum_exp.data(),
                  dl, uniform_scale, grad);
  });
}

}  // namespace colrow::kernels::cpu
