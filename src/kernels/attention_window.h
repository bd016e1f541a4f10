// The causal mask with an optional sliding window, one rule for every
// attention kernel (CPU and CUDA, training and the KV cache): the query at
// position i sees keys [first_visible_key(i, window), i]. window 0: fully
// causal, keys [0, i]; window w > 0 (Mistral's sliding_window, Hugging
// Face's sliding_window_overlay): keys j with i - w < j <= i.
#pragma once

#include <cstdint>

#ifdef __CUDACC__
#define COLROW_HOST_DEVICE __host__ __device__
#else
#define COLROW_HOST_DEVICE
#endif

namespace colrow::kernels {

COLROW_HOST_DEVICE constexpr int64_t first_visible_key(int64_t i, int64_t window) {
  return window > 0 && i >= window ? i - window + 1 : 0;
}

}  // namespace colrow::kernels
