// The CUDA twin of kernels/cpu/cross_entropy.h: the three pieces of the
// vocabulary-parallel cross-entropy (the forward pass's partials, their combine
// over ranks into the loss, backward), with the formulas, ignored rows, padded
// columns, label smoothing and -inf / NaN behaviour documented there. Targets
// are host vectors, uploaded here; one thread block per token row for the
// passes over the logits, one thread per token for the combine, reductions in a
// fixed order (the same bits every run).
#pragma once

#include "kernels/backend.h"

namespace colrow::kernels::cuda {

// Uploads the targets the pieces below will read, so that they find them in
// place (Backend::stage_cross_entropy_targets).
void stage_cross_entropy_targets(int device, const std::vector<int32_t>& targets);

// logits_local: [tokens, vocab_size_local] with contiguous rows -> partials: [tokens, 4]
void cross_entropy_partials(const Tensor& logits_local, const CrossEntropyRows& rows,
                            Tensor& partials);
// gathered: [ranks * tokens, 4] -> max, sum_exp, losses: [tokens], 0 on
// ignored rows; no host wait (the caller sums the losses when it needs the
// mean: CrossEntropyOutput::mean).
void cross_entropy_combine(const Tensor& gathered, const CrossEntropyRows& rows, Tensor& max,
                           Tensor& sum_exp, Tensor& losses);
// dloss: [tokens] or null (then uniform_scale) -> dlogits_local: [tokens, vocab_size_local]
void cross_entropy_backward(const Tensor& logits_local, const CrossEntropyRows& rows,
                            const Tensor& max, const Tensor& sum_exp, const Tensor* dloss,
                            float uniform_scale, Tensor& dlogits_local);

}  // namespace colrow::kernels::cuda
