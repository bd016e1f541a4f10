// The pieces of the vocabulary-parallel cross-entropy (Megatron's
// vocab_parallel_cross_entropy): two passes over the local logits, one forward
// and one backward, around a single all-gather of [tokens, 4] partials that
// the layer (nn/vocab_parallel_cross_entropy.cpp) issues between them. No
// probabilities are kept: the backward recomputes exp from the logits.
//   1. partials (forward: each logit read once). Per row t, over my real
//      classes j < real, with my max m_r = max_j x[t, j]:
//        p[t, 0] = m_r                      (-inf if real == 0 or every x is -inf)
//        p[t, 1] = sum_j exp(x[t, j] - m_r)
//        p[t, 2] = x[t, target - vocab_start] on the rank owning the target, 0 elsewhere
//        p[t, 3] = sum_j (x[t, j] - m_r) with label smoothing (-inf when m_r is
//                  -inf and real > 0), 0 without
//      all four 0 on ignored rows. Sums accumulate in double, rescaled in
//      double as a row's running max grows (online softmax).
//                                                  -> all-gather over tp
//   2. combine (kernels/cross_entropy_combine.h; every rank, from the gathered
//      partials alone, in rank order, so every rank gets the same bits): with
//      m = max_r m_r,
//        S = sum_r p_r1 exp(m_r - m),  z = sum_r p_r2 - m,
//        Z = sum_r (p_r3 + real_r (m_r - m)),
//        loss[t] = log S - (1 - a) z - a / V Z     (0 on ignored rows),
//      in double, rounded once; writes m and S for the backward.
//      real_r = clamp(V - r vocab_size_local, 0, vocab_size_local).
//   3. backward:  dx[t, j] = scale_t (exp(x - m) / S - a / V) - scale_t (1 - a) [j = target],
//                 0 on padded columns and ignored rows; scale_t = dloss[t], or
//                 uniform_scale when dloss is null.
// logits_local: [tokens, vocab_size_local] with contiguous rows (may be a
// strided view); partials: [tokens, 4]; gathered: [ranks * tokens, 4] (rank
// r's partials at rows [r tokens, (r + 1) tokens)); max, sum_exp, losses:
// [tokens]. a = label_smoothing, V = vocab_size.
// exp(-inf) = 0 and NaN propagates: a NaN logit makes its row's loss NaN.
// No total: a GPU's losses stay there until the caller needs their mean
// (CrossEntropyOutput::mean, after the step).
#pragma once

#include "kernels/backend.h"

namespace colrow::kernels::cpu {

void cross_entropy_partials(const Tensor& logits_local, const CrossEntropyRows& rows,
                            Tensor& partials);
void cross_entropy_combine(const Tensor& gathered, const CrossEntropyRows& rows, Tensor& max,
                           Tensor& sum_exp, Tensor& losses);
void cross_entropy_backward(const Tensor& logits_local, const CrossEntropyRows& rows,
                            const Tensor& max, const Tensor& sum_exp, const Tensor* dloss,
                            float uniform_scale, Tensor& dlogits_local);

}  // namespace colrow::kernels::cpu
