// The KV cache of incremental decoding (nn/kv_cache.h), as two kernels.
// Legend: a step runs n new tokens of B sequences; sequence b lives in cache
// slot rows.slots[b] and its new tokens take positions rows.starts[b] + i,
// i < n. Activations are token-major: row b*n + i is token i of sequence b.
//   kv_cache_append:  cache[slot_b, g, start_b + i, :] = x[b*n + i, g*HS:(g+1)*HS]
//   cached_attention: query i of sequence b (position p = start_b + i) attends
//     to the cached keys and values at positions [0, p] of its slot (causal;
//     the keys of this step must already be appended), or with a sliding
//     window > 0 to positions (p - window, p]. Query head h reads KV
//     head h / (NH / NKV) (GQA/MQA), with HF's scale 1/sqrt(HS):
//       out[b*n + i, h] = softmax_j(q . k_j / sqrt(HS)) v_j
// Shapes and checks: kernels/checks/kv_cache.h.
#pragma once

#include "colrow/core/tensor.h"
#include "kernels/backend.h"

namespace colrow::kernels::cpu {

void kv_cache_append(const Tensor& x, const CacheRows& rows, Tensor& cache);

// scores: scratch [B*n, NH, L]; on return row (b*n + i, h) holds the
// attention probabilities over positions [0, p], zeros for the later
// positions of the step (and for those the window masks).
void cached_attention(const Tensor& q, const Tensor& k_cache, const Tensor& v_cache,
                      const CacheRows& rows, int64_t window, Tensor& scores, Tensor& out);

}  // namespace colrow::kernels::cpu
