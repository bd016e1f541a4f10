// Argument and operand checks of the RoPE kernels, shared by
// kernels/cpu/rope.cpp and kernels/cuda/rope.cu (formulas in kernels/cpu/rope.h).
#pragma once

#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "colrow/core/error.h"
#include "colrow/core/tensor.h"

namespace colrow::kernels {

// The table's arguments: seq >= 1 and at least one inverse frequency, each
// finite and positive.
inline void check_rope_table(int64_t seq, const std::vector<double>& inv_freq) {
  bool ok = seq >= 1 && !inv_freq.empty();
  for (double f : inv_freq) ok = ok && f > 0.0 && std::isfinite(f);
  if (!ok) {
    throw InternalError(
        "[rope] table needs seq >= 1 and finite positive inverse frequencies; "
        "got seq " +
        std::to_string(seq) + " and " + std::to_string(inv_freq.size()) + " frequencies");
  }
}

// [tokens, width] with a contiguous last dim: a contiguous tensor, or a block
// of a wider one's columns (q and k in attention's fused qkv output).
inline bool rows_with_contiguous_last_dim(const Tensor& t) {
  return t.ndim() == 2 && (t.numel() == 0 || t.stride(1) == 1);
}

// x, y: [tokens, heads * head_dim] of one shape, each with a contiguous last
// dim (rows may be strided); cos, sin: contiguous [seq, head_dim / 2] with
// seq dividing tokens.
inline void check_rope(const Tensor& x, const Tensor& cos, const Tensor& sin, const Tensor& y,
                       const char* what) {
  const bool ok = rows_with_contiguous_last_dim(x) && rows_with_contiguous_last_dim(y) &&
                  x.shape() == y.shape() && cos.ndim() == 2 && cos.is_contiguous() &&
                  sin.shape() == cos.shape() && sin.is_contiguous() && cos.size(0) > 0 &&
                  cos.size(1) > 0 && x.size(0) % cos.size(0) == 0 &&
                  x.size(1) % (2 * cos.size(1)) == 0;
  if (!ok) {
    throw InternalError(std::string("[rope] ") + what +
                        ": need x, y [tokens, heads * head_dim] of one shape (last dims "
                        "contiguous) and "
                        "cos, sin [seq, head_dim / 2] with seq dividing tokens; got x " +
                        shape_to_string(x.shape()) + ", y " + shape_to_string(y.shape()) +
                        ", cos " + shape_to_string(cos.shape()) + ", sin " +
                        shape_to_string(sin.shape()));
  }
}

}  // namespace colrow::kernels
