// The vocabulary-parallel cross-entropy's passes over the local logits (see
// cross_entropy.h). This file is built with -fno-trapping-math so that the
// selects in exp_nonpositive if-convert and the row loops vectorize.
// Rows are cut into fixed chunks of kVocabChunk columns (parallel.h) and the
// work is split over (token, chunk): a few tokens over a large vocabulary
// still make many tasks. The forward pass reads a chunk from memory once:
// its max, then its sums over the same columns, now in L1. A row's chunks,
// and later the ranks' partials, combine in index order with their sums
// rescaled to the larger max in double, so the bits depend on the shape,
// never on the thread count.
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
#include "kernels/cross_entropy_combine.h"
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

// One chunk of a row: its max, and sum exp(x - max) and sum (x - max) over its
// columns (up to kVocabChunk of them: in L1 for the second loop).
struct ChunkPartial {
  float max = -kInf;
  double sum_exp = 0.0, sum_shifted = 0.0;
  int64_t columns = 0;
};

template <typename E>
ChunkPartial chunk_partial(const E* chunk, int64_t n, bool smoothing) {
  float m = -kInf;
  // The select, not std::max: GCC vectorizes only this form (same result,
  // NaN skipped here and propagated by the exp sum).
#pragma omp simd reduction(max : m)
  for (int64_t j = 0; j < n; ++j) {
    const float v = widen(chunk[j]);
    m = v > m ? v : m;
  }
  ChunkPartial p;
  p.max = m;
  p.columns = n;
  if (m == -kInf) {
    // Every logit -inf (no mass; sum (x - m) is -inf, not the NaN of -inf - -inf)
    // or NaN, which must still reach the loss.
    for (int64_t j = 0; j < n; ++j) {
      if (std::isnan(widen(chunk[j]))) p.sum_exp = std::numeric_limits<double>::quiet_NaN();
    }
    if (n > 0) p.sum_shifted = -std::numeric_limits<double>::infinity();
    return p;
  }
  if (smoothing) {  // and sum (x - max), label smoothing's term, in the same loop
    std::tie(p.sum_exp, p.sum_shifted) = lane_sums(n, [&](int64_t j) {
      const float shifted = widen(chunk[j]) - m;
      return std::pair<double, double>{exp_nonpositive(shifted), shifted};
    });
  } else {
    p.sum_exp =
        lane_sum(n, [&](int64_t j) -> double { return exp_nonpositive(widen(chunk[j]) - m); });
  }
  return p;
}

template <typename E>
void partials_rows(const E* x, int64_t ld, int64_t tokens, const CrossEntropyRows& rows,
                   float* partials) {
  const int64_t real = rows.real;
  const bool smoothing = rows.label_smoothing > 0.0f;
  const int32_t* targets = cross_entropy_targets(rows);
  const int32_t ignore = rows.ignore_index;
  const int64_t chunks = std::max<int64_t>(1, ceil_div(real, kVocabChunk));
  std::vector<ChunkPartial> partial(static_cast<size_t>(tokens * chunks));
#pragma omp parallel for schedule(static) if (tokens * real > kParallelElements)
  for (int64_t task = 0; task < tokens * chunks; ++task) {
    const int64_t t = task / chunks, j0 = task % chunks * kVocabChunk;
    const int64_t j1 = std::min(real, j0 + kVocabChunk);
    if (targets[t] == ignore) continue;
    partial[task] = chunk_partial(x + t * ld + j0, j1 - j0, smoothing);
  }
  // The chunks of a row in chunk order: the bits depend on the shape alone.
  for (int64_t t = 0; t < tokens; ++t) {
    float* out = partials + t * kCrossEntropyPartials;
    std::fill(out, out + kCrossEntropyPartials, 0.0f);
    if (targets[t] == ignore) continue;
    const ChunkPartial* part = partial.data() + t * chunks;
    float m = -kInf;
    for (int64_t c = 0; c < chunks; ++c) m = part[c].max > m ? part[c].max : m;
    SoftmaxSums row;
    for (int64_t c = 0; c < chunks; ++c) {
      row.add(part[c].max, part[c].sum_exp, part[c].sum_shifted, part[c].columns, m);
    }
    const int64_t mine = targets[t] - rows.vocab_start;
    out[0] = m;
    out[1] = static_cast<float>(row.sum_exp);
    out[2] = mine >= 0 && mine < real ? widen(x[t * ld + mine]) : 0.0f;
    out[3] = smoothing ? static_cast<float>(row.sum_shifted) : 0.0f;
  }
}

// dlogits may be the logits themselves (the gradient in place): each element
// is read before it is written, by the same iteration.
template <typename E>
void backward_rows(const E* x, int64_t ld, int64_t tokens, int64_t v_local,
                   const CrossEntropyRows& rows, const float* row_max, const float* sums,
                   const float* dl, float uniform_scale, E* grad) {
  const int64_t real = rows.real;
  const int32_t* targets = cross_entropy_targets(rows);
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

void cross_entropy_partials(const Tensor& logits_local, const CrossEntropyRows& rows,
                            Tensor& partials) {
  const int64_t tokens = check_cross_entropy_partials(logits_local, rows, partials);
  with_elements(logits_local, [&](const auto* x) {
    partials_rows(x, logits_local.row_stride(), tokens, rows, partials.data());
  });
}

void cross_entropy_combine(const Tensor& gathered, const CrossEntropyRows& rows, Tensor& max,
                           Tensor& sum_exp, Tensor& losses) {
  const int64_t tokens = check_cross_entropy_combine(gathered, rows, max, sum_exp, losses);
  if (tokens == 0) return;
  const int64_t ranks = gathered.size(0) / tokens;
  const int32_t* targets = cross_entropy_targets(rows);
  for (int64_t t = 0; t < tokens; ++t) {
    const CombinedToken c =
        combine_token(gathered.data(), tokens, t, ranks, targets[t] == rows.ignore_index,
                      rows.vocab_size, rows.vocab_size_local, rows.label_smoothing);
    max.data()[t] = c.max;
    sum_exp.data()[t] = c.sum_exp;
    losses.data()[t] = c.loss;
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
