// Embedding lookups and their gradients, for token-major activations.
//   Vocabulary-parallel (Megatron's VocabParallelEmbedding, input-masked):
//     ids: [tokens] (host), table_local: [vocab_size_local, d] holding global
//     rows [vocab_start, vocab_start + vocab_size_local)
//     forward   y[t] = table_local[ids[t] - vocab_start] if the id is local, else 0
//     backward  dtable_local[ids[t] - vocab_start] += dy[t] for local ids
//   Learned positions (GPT-2's wpe): row t of x is at position t % seq
//     forward   x[t] += table[t % seq]
//     backward  dtable[p] += sum over sequences b of dx[b * seq + p]
// Gradients accumulate, and always in token order for each row (parallel over
// (distinct id, feature block) or (position, feature block), never over the
// tokens of one row): deterministic, no atomics.
#pragma once

#include <cstdint>
#include <vector>

#include "colrow/core/tensor.h"

namespace colrow::kernels::cpu {

// table_local, y: last dim contiguous; y: [tokens, d] (overwritten)
void embedding_forward(const std::vector<int32_t>& ids, int64_t vocab_start,
                       const Tensor& table_local, Tensor& y);
// dy: [tokens, d] with contiguous rows -> dtable_local: [vocab_size_local, d] (accumulated)
void embedding_backward(const std::vector<int32_t>& ids, int64_t vocab_start, const Tensor& dy,
                        Tensor& dtable_local);

// x: [tokens, d] contiguous, tokens a multiple of seq; table: [max_positions >= seq, d]
void position_embedding_forward(Tensor& x, const Tensor& table, int64_t seq);
// dx: [tokens, d] contiguous -> dtable: [max_positions, d] (rows < seq accumulated)
void position_embedding_backward(const Tensor& dx, int64_t seq, Tensor& dtable);

}  // namespace colrow::kernels::cpu
