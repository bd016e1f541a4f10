// How the vocabulary-parallel cross-entropy's partial softmax sums combine,
// one rule for both backends (kernels/cpu/cross_entropy.h has the legend):
// the parts of a row (the CPU's column chunks) and then the ranks' partials
// are taken to the larger max with their sums rescaled in double, and one
// token's max, softmax denominator and loss come from every rank's partials
// in rank order, so every rank and both devices follow the same steps.
#pragma once

#include <cmath>
#include <cstdint>

#include "kernels/backend.h"

#ifndef COLROW_HOST_DEVICE
#ifdef __CUDACC__
#define COLROW_HOST_DEVICE __host__ __device__
#else
#define COLROW_HOST_DEVICE
#endif
#endif

namespace colrow::kernels {

// Sums over a row's parts, each taken to the row's max m (>= every part's
// own max): sum_j exp(x_j - m) and sum_j (x_j - m). A part without mass (its
// max -inf: no columns, or all -inf) adds its sums as they are (0 or NaN; 0
// or -inf), never the NaN of -inf - -inf.
struct SoftmaxSums {
  double sum_exp = 0.0, sum_shifted = 0.0;
  COLROW_HOST_DEVICE void add(float part_max, double part_sum_exp, double part_sum_shifted,
                              int64_t columns, float m) {
    if (part_max == -INFINITY) {
      sum_exp += part_sum_exp;
      sum_shifted += part_sum_shifted;
      return;
    }
    const double shift = static_cast<double>(part_max) - m;  // exact in double
    sum_exp += part_sum_exp * exp(shift);
    sum_shifted += part_sum_shifted + static_cast<double>(columns) * shift;
  }
};

// Rank r's real classes among its vocab_size_local columns.
COLROW_HOST_DEVICE inline int64_t real_classes_on(int64_t r, int64_t vocab_size,
                                                  int64_t vocab_size_local) {
  const int64_t left = vocab_size - r * vocab_size_local;
  return left < 0 ? 0 : (left < vocab_size_local ? left : vocab_size_local);
}

struct CombinedToken {
  float max = 0.0f, sum_exp = 0.0f, loss = 0.0f;
};

// Token t from gathered: [ranks * tokens, kCrossEntropyPartials], rank r's
// partials at rows [r tokens, (r + 1) tokens); a = label_smoothing,
// V = vocab_size. In double, rounded once:
//   loss = log S - (1 - a) (x_target - m) - a/V sum_j (x_j - m).
// An ignored token gives zeros.
COLROW_HOST_DEVICE inline CombinedToken combine_token(const float* gathered, int64_t tokens,
                                                      int64_t t, int64_t ranks, bool ignored,
                                                      int64_t vocab_size, int64_t vocab_size_local,
                                                      float label_smoothing) {
  CombinedToken out;
  if (ignored) return out;
  const double a = label_smoothing;
  const float* part = gathered + t * kCrossEntropyPartials;
  const int64_t rank_stride = tokens * kCrossEntropyPartials;
  float m = -INFINITY;
  for (int64_t r = 0; r < ranks; ++r) {
    const float mr = part[r * rank_stride];
    m = mr > m ? mr : m;
  }
  SoftmaxSums row;
  double target = 0.0;
  for (int64_t r = 0; r < ranks; ++r) {
    const float* p = part + r * rank_stride;
    row.add(p[0], p[1], p[3], real_classes_on(r, vocab_size, vocab_size_local), m);
    target += p[2];  // one rank's logit, zeros elsewhere: exact
  }
  double loss = log(row.sum_exp) - (1.0 - a) * (target - m);
  if (a > 0.0) loss -= a / static_cast<double>(vocab_size) * row.sum_shifted;  // not 0 x -inf
  out.max = m;
  out.sum_exp = static_cast<float>(row.sum_exp);
  out.loss = static_cast<float>(loss);
  return out;
}

}  // namespace colrow::kernels
