// Operand checks of the vocabulary-parallel embedding kernels, shared by
// kernels/cpu/embedding.cpp and kernels/cuda/embedding.cu:
// table_local, dtable_local: [vocab_size_local, d]; y, dy: [tokens, d]; all
// 2-d with a contiguous last dim (rows may be strided, e.g. column blocks).
// The position embedding's checks stay with each kernel: the CPU one needs
// contiguous tables, the CUDA one reads them through their row stride.
#pragma once

#include <cstdint>
#include <string>

#include "colrow/core/error.h"
#include "colrow/core/tensor.h"

namespace colrow::kernels {

// 2-d with a contiguous last dim (its rows may be strided).
inline bool has_embedding_rows(const Tensor& t) {
  return t.ndim() == 2 && (t.size(1) <= 1 || t.stride(1) == 1);
}

inline void check_embedding_forward(const Tensor& table_local, const Tensor& y, int64_t tokens) {
  if (!has_embedding_rows(table_local) || !has_embedding_rows(y) || y.size(0) != tokens ||
      y.size(1) != table_local.size(1)) {
    throw InternalError(
        "[embedding] embedding_forward: table_local " + shape_to_string(table_local.shape()) +
        " and y " + shape_to_string(y.shape()) + " must be [vocab_size_local, d] and [tokens (" +
        std::to_string(tokens) + "), d] with contiguous rows");
  }
}

inline void check_embedding_backward(const Tensor& dy, const Tensor& dtable_local, int64_t tokens) {
  if (!has_embedding_rows(dy) || !has_embedding_rows(dtable_local) || dy.size(0) != tokens ||
      dy.size(1) != dtable_local.size(1)) {
    throw InternalError("[embedding] embedding_backward: dy " + shape_to_string(dy.shape()) +
                        " and dtable_local " + shape_to_string(dtable_local.shape()) +
                        " must be [tokens (" + std::to_string(tokens) +
                        "), d] and [vocab_size_local, d] with contiguous rows");
  }
}

}  // namespace colrow::kernels
