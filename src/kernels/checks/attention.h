// Shape checks of the causal attention kernels, shared by
// kernels/cpu/attention.cpp and the CUDA kernels (attention.cu,
// flash_attention.cu, tensor_core_attention.cu; each adds the
// check of its own backward scratch, whose shape differs). Legend as there:
// B batch, T seq, NH query heads, NKV key/value heads, HS head_dim.
//   q, out, dout, dq: [B*T, NH*HS]   k, v, dk, dv: [B*T, NKV*HS]
//   probs: [B, NH, T, T] (or lse: [B, NH, T] for the fused kernels), contiguous and non-empty
// 2-d operands may be strided views (a fused qkv buffer) with a contiguous last dim.
#pragma once

#include <cstdint>
#include <string>

#include "colrow/core/error.h"
#include "colrow/core/tensor.h"

namespace colrow::kernels {

struct AttentionDims {
  int64_t batch, seq, n_head, n_kv_head, head_dim, group;  // group = NH / NKV
};

[[noreturn]] inline void attention_fail(const char* what, const std::string& detail) {
  throw InternalError(std::string("[attention] ") + what + ": " + detail);
}

// The attention window: 0 (fully causal) or a sliding window of at least one key.
inline void check_window(int64_t window, const char* what) {
  if (window < 0)
    attention_fail(what, "window must be >= 0 (0: none), got " + std::to_string(window));
}

// t: [rows, cols] with a contiguous last dim (any layout when empty).
inline bool is_attention_matrix(const Tensor& t, int64_t rows, int64_t cols) {
  return t.ndim() == 2 && t.size(0) == rows && t.size(1) == cols &&
         (t.numel() == 0 || t.stride(1) == 1);
}

// The dimensions of q, k, v and out (dout in backward), given batch, n_head
// and seq in `d` (read from what forward saved), or InternalError; `saved`
// names that tensor for the message.
inline AttentionDims check_attention_operands(AttentionDims d, const Tensor& q, const Tensor& k,
                                              const Tensor& v, const Tensor& saved,
                                              const Tensor& out, const char* what) {
  const int64_t tokens = d.batch * d.seq;
  if (q.ndim() != 2 || k.ndim() != 2 || q.size(1) % d.n_head != 0 || q.size(1) == 0) {
    attention_fail(what, "q " + shape_to_string(q.shape()) + " does not hold " +
                             std::to_string(d.n_head) + " heads");
  }
  d.head_dim = q.size(1) / d.n_head;
  d.n_kv_head = k.size(1) / d.head_dim;
  const bool ok =
      d.n_kv_head >= 1 && k.size(1) % d.head_dim == 0 && d.n_head % d.n_kv_head == 0 &&
      is_attention_matrix(q, tokens, q.size(1)) && is_attention_matrix(k, tokens, k.size(1)) &&
      is_attention_matrix(v, tokens, k.size(1)) && is_attention_matrix(out, tokens, q.size(1));
  if (!ok) {
    attention_fail(what, "shapes do not match: q " + shape_to_string(q.shape()) + ", k " +
                             shape_to_string(k.shape()) + ", v " + shape_to_string(v.shape()) +
                             ", saved " + shape_to_string(saved.shape()) + ", out " +
                             shape_to_string(out.shape()) +
                             " (rows must be batch * seq; k, v whole heads of q's head_dim, their "
                             "count dividing n_head; last dims contiguous)");
  }
  d.group = d.n_head / d.n_kv_head;
  return d;
}

// The dimensions of q, k, v, probs and out (dout in backward), or InternalError.
inline AttentionDims check_attention(const Tensor& q, const Tensor& k, const Tensor& v,
                                     const Tensor& probs, const Tensor& out, const char* what) {
  if (probs.ndim() != 4 || !probs.is_contiguous() || probs.size(2) != probs.size(3) ||
      probs.numel() == 0) {
    attention_fail(what, "probs must be a non-empty contiguous [batch, n_head, seq, seq], got " +
                             shape_to_string(probs.shape()));
  }
  return check_attention_operands({probs.size(0), probs.size(2), probs.size(1), 0, 0, 0}, q, k, v,
                                  probs, out, what);
}

// The same with the rows' log-sum-exp lse: [batch, n_head, seq] in place of
// the probabilities (the fused kernels).
inline AttentionDims check_attention_lse(const Tensor& q, const Tensor& k, const Tensor& v,
                                         const Tensor& lse, const Tensor& out, const char* what) {
  if (lse.ndim() != 3 || !lse.is_contiguous() || lse.numel() == 0) {
    attention_fail(what, "lse must be a non-empty contiguous [batch, n_head, seq], got " +
                             shape_to_string(lse.shape()));
  }
  return check_attention_operands({lse.size(0), lse.size(2), lse.size(1), 0, 0, 0}, q, k, v, lse,
                                  out, what);
}

// dq like q, dk and dv like k.
inline void check_attention_grads(const Tensor& q, const Tensor& k, const AttentionDims& d,
                                  const Tensor& dq, const Tensor& dk, const Tensor& dv,
                                  const char* what) {
  const int64_t tokens = d.batch * d.seq;
  if (!is_attention_matrix(dq, tokens, q.size(1)) || !is_attention_matrix(dk, tokens, k.size(1)) ||
      !is_attention_matrix(dv, tokens, k.size(1))) {
    attention_fail(what, "gradients dq " + shape_to_string(dq.shape()) + ", dk " +
                             shape_to_string(dk.shape()) + ", dv " + shape_to_string(dv.shape()) +
                             " must match q " + shape_to_string(q.shape()) + " and k " +
                             shape_to_string(k.shape()));
  }
}

}  // namespace colrow::kernels
