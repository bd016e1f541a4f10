// The pieces of the vocabulary-parallel cross-entropy (Megatron's
// vocab_parallel_cross_entropy) that touch the logits; the layer
// (nn/vocab_parallel_cross_entropy.cpp) issues the all-reduces between them:
//   1. local_max:  m_r[t] = max_{j < real} x[t, j]   (-inf if real == 0; 0 on
//                  ignored rows)                    -> all-reduce max -> m[t]
//   2. sums:       sum_exp[t] = sum_{j < real} exp(x[t, j] - m[t]),
//                  target_logit[t, 0] = x[t, target - vocab_start] - m[t] on the
//                  rank owning the target (0 elsewhere), and with label
//                  smoothing target_logit[t, 1] = sum_{j < real} (x[t, j] - m[t]).
//                  Zero on ignored rows. Sums accumulate in double.
//                                                   -> all-reduce sum of both
//   3. loss:       loss[t] = log S - (1 - a) target_logit[t, 0]
//                            - a / V target_logit[t, 1]     (0 on ignored rows),
//                  from reduced values only, so every rank gets the same bits.
//                  No total: a GPU's losses stay there until the caller needs
//                  their mean (CrossEntropyOutput::mean, after the step).
//   4. backward:   dx[t, j] = scale_t (exp(x - m) / S - a / V) - scale_t (1 - a) [j = target],
//                  0 on padded columns and ignored rows; scale_t = dloss[t], or
//                  uniform_scale when dloss is null.
// logits_local: [tokens, vocab_size_local] with contiguous rows (may be a
// strided view); max, sum_exp, losses: [tokens]; target_logit: [tokens] or
// [tokens, 2] with label smoothing. a = label_smoothing, V = vocab_size.
// exp(-inf) = 0 and NaN propagates: a NaN logit makes its row's loss NaN.
#pragma once

#include "kernels/backend.h"

namespace colrow::kernels::cpu {

void cross_entropy_local_max(const Tensor& logits_local, const CrossEntropyRows& rows, Tensor& max);
void cross_entropy_sums(const Tensor& logits_local, const CrossEntropyRows& rows, const Tensor& max,
                        Tensor& sum_exp, Tensor& target_logit);
void cross_entropy_loss(const Tensor& sum_exp, const Tensor& target_logit,
                        const CrossEntropyRows& rows, Tensor& losses);
void cross_entropy_backward(const Tensor& logits_local, const CrossEntropyRows& rows,
                            const Tensor& max, const Tensor& sum_exp, const Tensor* dloss,
                            float uniform_scale, Tensor& dlogits_local);

}  // namespace colrow::kernels::cpu
