// Operand checks of the vocabulary-parallel cross-entropy kernels, shared by
// kernels/cpu/cross_entropy.cpp and kernels/cuda/cross_entropy.cu (shapes as
// documented in kernels/cpu/cross_entropy.h):
//   logits_local: [tokens, vocab_size_local >= real] with contiguous rows,
//     fp32 or bf16 (read natively: each element widened, exactly)
//   max, sum_exp, losses, dloss: [tokens]; partials: [tokens, 4]; gathered:
//   [ranks * tokens, 4]; all contiguous and fp32.
// dlogits_local's check stays with each kernel: the CPU writes contiguous
// rows, the GPU writes through the row stride.
#pragma once

#include <cstdint>
#include <string>

#include "colrow/core/error.h"
#include "colrow/core/tensor.h"
#include "kernels/backend.h"

namespace colrow::kernels {

[[noreturn]] inline void cross_entropy_fail(const char* what, const std::string& detail) {
  throw InternalError(std::string("[cross_entropy] ") + what + ": " + detail);
}

// The token count: rows.tokens, or rows.targets' rows from first_row on;
// rows.targets must be set and hold [first_row, first_row + tokens).
inline int64_t cross_entropy_tokens(const char* what, const CrossEntropyRows& rows) {
  if (rows.targets == nullptr) cross_entropy_fail(what, "rows.targets is null");
  const int64_t held = static_cast<int64_t>(rows.targets->size());
  const int64_t tokens = rows.tokens < 0 ? held - rows.first_row : rows.tokens;
  if (rows.first_row < 0 || tokens < 0 || rows.first_row + tokens > held) {
    cross_entropy_fail(what, std::to_string(tokens) + " rows from row " +
                                 std::to_string(rows.first_row) + " must lie within the " +
                                 std::to_string(held) + " targets");
  }
  return tokens;
}

// The first of the logits' targets (after cross_entropy_tokens checked them).
inline const int32_t* cross_entropy_targets(const CrossEntropyRows& rows) {
  return rows.targets->data() + rows.first_row;
}

inline void check_cross_entropy_logits(const char* what, const Tensor& logits,
                                       const CrossEntropyRows& rows, int64_t tokens) {
  if (logits.ndim() != 2 || logits.size(0) != tokens ||
      (logits.size(1) > 1 && logits.stride(1) != 1) || rows.real < 0 ||
      rows.real > logits.size(1)) {
    cross_entropy_fail(what, "logits " + shape_to_string(logits.shape()) + " must be [tokens (" +
                                 std::to_string(tokens) + "), vocab_size_local >= real (" +
                                 std::to_string(rows.real) + ")] with contiguous rows");
  }
}

// t: [tokens], contiguous, fp32.
inline void check_cross_entropy_vector(const char* what, const char* name, const Tensor& t,
                                       int64_t tokens) {
  if (t.ndim() != 1 || t.size(0) != tokens || !t.is_contiguous() || t.dtype() != DType::kF32) {
    cross_entropy_fail(what, std::string(name) + " " + shape_to_string(t.shape()) + " " +
                                 dtype_name(t.dtype()) + " must be [tokens (" +
                                 std::to_string(tokens) + ")], contiguous, fp32");
  }
}

// dlogits: the logits' dtype (the gradient of bf16 logits is bf16, rounded once).
inline void check_cross_entropy_grad_dtype(const char* what, const Tensor& logits,
                                           const Tensor& dlogits) {
  if (dlogits.dtype() != logits.dtype()) {
    cross_entropy_fail(what, std::string("dlogits_local is ") + dtype_name(dlogits.dtype()) +
                                 ", the logits " + dtype_name(logits.dtype()) +
                                 ": the gradient takes the logits' dtype");
  }
}

// dlogits: like the logits, [tokens, vocab_size_local] with contiguous rows
// (rows may be strided), of their dtype.
inline void check_cross_entropy_dlogits_rows(const char* what, const Tensor& logits,
                                             int64_t tokens, const Tensor& dlogits) {
  const int64_t v_local = logits.size(1);
  if (dlogits.ndim() != 2 || dlogits.size(0) != tokens || dlogits.size(1) != v_local ||
      (v_local > 1 && dlogits.stride(1) != 1)) {
    cross_entropy_fail(what, "dlogits_local " + shape_to_string(dlogits.shape()) +
                                 " must be like logits " + shape_to_string(logits.shape()) +
                                 " with contiguous rows");
  }
  check_cross_entropy_grad_dtype(what, logits, dlogits);
}

// t: [rows, kCrossEntropyPartials], contiguous, fp32.
inline void check_cross_entropy_partials_shape(const char* what, const char* name, const Tensor& t,
                                               int64_t rows, const std::string& rule) {
  if (t.ndim() != 2 || t.size(0) != rows || t.size(1) != kCrossEntropyPartials ||
      !t.is_contiguous() || t.dtype() != DType::kF32) {
    cross_entropy_fail(what, std::string(name) + " " + shape_to_string(t.shape()) + " " +
                                 dtype_name(t.dtype()) + " must be [" + rule + ", " +
                                 std::to_string(kCrossEntropyPartials) + "], contiguous, fp32");
  }
}

// The whole operand checks of each piece; each returns the token count.
inline int64_t check_cross_entropy_partials(const Tensor& logits_local,
                                            const CrossEntropyRows& rows, const Tensor& partials) {
  const char* what = "cross_entropy_partials";
  const int64_t tokens = cross_entropy_tokens(what, rows);
  check_cross_entropy_logits(what, logits_local, rows, tokens);
  check_cross_entropy_partials_shape(what, "partials", partials, tokens,
                                     "tokens (" + std::to_string(tokens) + ")");
  return tokens;
}

// Label smoothing spreads a / vocab_size over every real class.
inline void check_smoothing_vocab(const char* what, const CrossEntropyRows& rows) {
  if (rows.label_smoothing > 0.0f && rows.vocab_size < 1) {
    cross_entropy_fail(what, "vocab_size " + std::to_string(rows.vocab_size) +
                                 " must be positive with label smoothing");
  }
}

inline int64_t check_cross_entropy_combine(const Tensor& gathered, const CrossEntropyRows& rows,
                                           const Tensor& max, const Tensor& sum_exp,
                                           const Tensor& losses) {
  const char* what = "cross_entropy_combine";
  const int64_t tokens = cross_entropy_tokens(what, rows);
  const int64_t ranks = tokens > 0 && gathered.ndim() == 2 ? gathered.size(0) / tokens : 1;
  check_cross_entropy_partials_shape(what, "gathered", gathered, ranks * tokens,
                                     "ranks x tokens (" + std::to_string(tokens) + ")");
  if (ranks < 1) cross_entropy_fail(what, "gathered holds no rank's partials");
  check_cross_entropy_vector(what, "max", max, tokens);
  check_cross_entropy_vector(what, "sum_exp", sum_exp, tokens);
  check_cross_entropy_vector(what, "losses", losses, tokens);
  check_smoothing_vocab(what, rows);
  // Label smoothing's sum counts each rank's real classes.
  if (rows.label_smoothing > 0.0f &&
      (rows.vocab_size_local < 1 || ranks * rows.vocab_size_local < rows.vocab_size)) {
    cross_entropy_fail(what, "vocab_size_local " + std::to_string(rows.vocab_size_local) + " x " +
                                 std::to_string(ranks) + " ranks must cover vocab_size " +
                                 std::to_string(rows.vocab_size) + " with label smoothing");
  }
  return tokens;
}

// All but dlogits_local (see the top of this file); dloss may be null.
inline int64_t check_cross_entropy_backward(const Tensor& logits_local,
                                            const CrossEntropyRows& rows, const Tensor& max,
                                            const Tensor& sum_exp, const Tensor* dloss) {
  const char* what = "cross_entropy_backward";
  const int64_t tokens = cross_entropy_tokens(what, rows);
  check_cross_entropy_logits(what, logits_local, rows, tokens);
  check_cross_entropy_vector(what, "max", max, tokens);
  check_cross_entropy_vector(what, "sum_exp", sum_exp, tokens);
  if (dloss != nullptr) check_cross_entropy_vector(what, "dloss", *dloss, tokens);
  check_smoothing_vocab(what, rows);
  return tokens;
}

}  // namespace colrow::kernels
