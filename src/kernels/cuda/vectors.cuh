// 16-byte accesses for the element-wise and row kernels (8 bf16 or 4 fp32 per
// load or store): one element per access leaves a kernel at a fraction of a
// GPU's memory bandwidth (a fifth to a third on an H200, measured on the
// norms, the bias add and the loss, 2026-11-28). A kernel takes V elements at
// a time where its rows allow it (rows_in_vectors) and one otherwise; the
// values are the same either way, each widened as read and rounded once as
// written (core/bfloat16.h).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <initializer_list>
#include <type_traits>

#include "colrow/core/bfloat16.h"
#include "colrow/core/tensor.h"

namespace colrow::kernels::cuda {

// Elements of E in one 16-byte access.
template <typename E>
constexpr int kPerVector = 16 / static_cast<int>(sizeof(E));

__host__ __device__ inline bool aligned_16(const void* p) {
  return reinterpret_cast<uintptr_t>(p) % 16 == 0;
}

// Whether every row of t starts on 16 bytes (its data and its row stride).
inline bool aligned_rows(const Tensor& t) {
  return aligned_16(t.raw_data()) &&
         t.row_stride() * static_cast<int64_t>(dtype_bytes(t.dtype())) % 16 == 0;
}

// Whether every row of these tensors (nulls skipped; a 1-D one is one row)
// starts on 16 bytes and holds whole 16-byte vectors.
inline bool rows_in_vectors(std::initializer_list<const Tensor*> tensors) {
  for (const Tensor* t : tensors) {
    if (t == nullptr) continue;
    const int64_t bytes = static_cast<int64_t>(dtype_bytes(t->dtype()));
    const int64_t width = t->ndim() == 2 ? t->size(1) : t->numel();
    if (!aligned_16(t->raw_data()) || width * bytes % 16 != 0 ||
        (t->ndim() == 2 && !aligned_rows(*t))) {
      return false;
    }
  }
  return true;
}

// A launch of kernel<E, V> with V = 16 bytes of E where `vectors`, 1 otherwise.
template <typename E, typename Launch>
void with_chunk(bool vectors, Launch&& launch) {
  if (vectors) {
    launch(std::integral_constant<int, kPerVector<E>>{});
  } else {
    launch(std::integral_constant<int, 1>{});
  }
}

// V elements of E from p (16-byte aligned when V > 1), widened; and V of E
// to p.
template <int V, typename E>
__device__ __forceinline__ void load_chunk(const E* p, float (&out)[V]) {
  if constexpr (V == 1) {
    out[0] = widen(*p);
  } else {
    alignas(16) E raw[V];
    *reinterpret_cast<uint4*>(raw) = *reinterpret_cast<const uint4*>(p);
#pragma unroll
    for (int i = 0; i < V; ++i) out[i] = widen(raw[i]);
  }
}
template <int V, typename E>
__device__ __forceinline__ void store_chunk(E* p, const E (&in)[V]) {
  if constexpr (V == 1) {
    *p = in[0];
  } else {
    *reinterpret_cast<uint4*>(p) = *reinterpret_cast<const uint4*>(in);
  }
}

}  // namespace colrow::kernels::cuda
