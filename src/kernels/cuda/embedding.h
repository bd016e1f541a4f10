// The CUDA twin of kernels/cpu/embedding.h: vocabulary-parallel and learned
// position embeddings, forward and backward. Shapes and formulas are
// documented there. Token ids are host vectors, uploaded here; gradients are
// summed in token order for each row, as on the CPU: the same bits, no atomics.
#pragma once

#include <cstdint>
#include <vector>

#include "colrow/core/tensor.h"

namespace colrow::kernels::cuda {

// ids: [tokens] (host), table_local: [vocab_size_local, d] -> y: [tokens, d] (overwritten)
void embedding_forward(const std::vector<int32_t>& ids, int64_t vocab_start,
                       const Tensor& table_local, Tensor& y);
// dy: [tokens, d] -> dtable_local: [vocab_size_local, d] (accumulated)
void embedding_backward(const std::vector<int32_t>& ids, int64_t vocab_start, const Tensor& dy,
                        Tensor& dtable_local);

// Uploads what embedding_forward and embedding_backward of these ids will read
// (the ids, the gradient's plan over my rows [vocab_start, vocab_start +
// rows_local)), so that they find it in place and upload nothing: how a CUDA
// graph of them is fed a new batch before each replay.
void stage_embedding_ids(int device, const std::vector<int32_t>& ids, int64_t vocab_start,
                         int64_t rows_local);

// x: [tokens, d] contiguous, tokens a multiple of seq; table: [max_positions >= seq, d]
void position_embedding_forward(Tensor& x, const Tensor& table, int64_t seq);
// dx: [tokens, d] contiguous -> dtable: [max_positions, d] (rows < seq accumulated)
void position_embedding_backward(const Tensor& dx, int64_t seq, Tensor& dtable);

}  // namespace colrow::kernels::cuda
