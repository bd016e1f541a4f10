// Element-wise CPU kernels over operands of either dtype, written once on
// fp32 arrays: map_element_blocks walks the flat operands in parallel.h's
// fixed element blocks (or, when some operand is a 2-d view with strided
// rows, each row's blocks) and hands each block's fp32 values to the body. fp32
// operands are passed in place; bf16 ones are widened into a per-block
// buffer, and the body's fp32 outputs rounded back once. The body runs the
// same code on the same fp32 values either way, so a bf16 result is the fp32
// kernel's on the widened inputs, rounded once, bit for bit, even where the
// vector math functions of -ffast-math round differently from the scalar
// ones (kernels/cpu/activation.cpp).
#pragma once

#include <array>
#include <cstdint>
#include <type_traits>

#include "colrow/core/bfloat16.h"
#include "colrow/core/tensor.h"
#include "kernels/cpu/parallel.h"
#include "kernels/elements.h"

namespace colrow::kernels::cpu {

// body(in, out, n): in[k] and out[k] point at n fp32 values of the block;
// an output may be an input too, element for element (body reads all of an
// element's inputs before it writes any of its outputs).
template <size_t kIn, size_t kOut, typename Body>
void map_element_blocks(const char* what, const std::array<const Tensor*, kIn>& in,
                        const std::array<Tensor*, kOut>& out, Body&& body) {
  static_assert(kIn > 0 && kOut > 0);
  // The bf16 buffers live on each OpenMP thread's stack: at most 5 x 16 KiB,
  // well inside glibc's default thread stack (and any OMP_STACKSIZE >= 128K).
  static_assert((kIn + kOut) * kElementBlock * sizeof(float) <= 96 * 1024);
  std::array<const Tensor*, kIn + kOut> all;
  for (size_t k = 0; k < kIn; ++k) all[k] = in[k];
  for (size_t k = 0; k < kOut; ++k) all[kIn + k] = out[k];
  // Contiguous operands are one row of numel elements; otherwise every
  // operand is [rows, cols] with a contiguous last dim (the caller checked),
  // read through its own row stride.
  bool contiguous = true;
  for (const Tensor* t : all) contiguous = contiguous && t->is_contiguous();
  const int64_t rows = contiguous ? 1 : in[0]->size(0);
  const int64_t cols = contiguous ? in[0]->numel() : in[0]->size(1);
  std::array<int64_t, kIn + kOut> ld{};
  for (size_t k = 0; k < all.size(); ++k) ld[k] = contiguous ? 0 : all[k]->row_stride();
  with_element_type(what, all, [&](auto e) {
    using E = decltype(e);
    for_each_row_block(rows, cols, [&](int64_t r, int64_t i0, int64_t i1) {
      const int64_t n = i1 - i0;
      std::array<const float*, kIn> in_block;
      std::array<float*, kOut> out_block;
      if constexpr (std::is_same_v<E, float>) {
        for (size_t k = 0; k < kIn; ++k) in_block[k] = elements<float>(*in[k]) + r * ld[k] + i0;
        for (size_t k = 0; k < kOut; ++k) {
          out_block[k] = elements<float>(*out[k]) + r * ld[kIn + k] + i0;
        }
        body(in_block, out_block, n);
      } else {
        alignas(64) float buffer[kIn + kOut][kElementBlock];
        for (size_t k = 0; k < kIn; ++k) {
          const E* src = elements<E>(*in[k]) + r * ld[k] + i0;
#pragma omp simd
          for (int64_t i = 0; i < n; ++i) buffer[k][i] = widen(src[i]);
          in_block[k] = buffer[k];
        }
        for (size_t k = 0; k < kOut; ++k) out_block[k] = buffer[kIn + k];
        body(in_block, out_block, n);
        for (size_t k = 0; k < kOut; ++k) {
          E* dst = elements<E>(*out[k]) + r * ld[kIn + k] + i0;
#pragma omp simd
          for (int64_t i = 0; i < n; ++i) dst[i] = narrow<E>(buffer[kIn + k][i]);
        }
      }
    });
  });
}

}  // namespace colrow::kernels::cpu
