// bf16 operands of fp32 kernels: the reference pattern of mixed precision.
// Inputs are widened (exact), the fp32 kernel runs, and each bf16 output is
// rounded once, to nearest even, from its fp32 result; an accumulating output
// is widened first, so `out += x` rounds the sum once, not each term.
// Most kernels follow this rule natively, reading bf16 element by element
// (kernels/elements.h; kernels/cpu/element_blocks.h on the CPU), bit for bit
// or up to the order of their fp32 sums: the GEMMs and linear layers (tensor
// cores), bias, activations, norms, residual adds, RoPE, embeddings, the KV
// cache and the cross-entropy pieces. Fp32Operands applies it by copies where
// no native kernel exists: the plain training attention of either backend
// (the CUDA fused one reads bf16 natively). The collectives' fp32 wire for
// bf16 tensors (dist/fp32_wire.h) does the same in buffers a GPU group keeps.
// The conversions are core's (Tensor::to(DType), Tensor::convert_from), the
// same on every device, so this header is all there is to it.
#pragma once

#include <list>
#include <utility>
#include <vector>

#include "colrow/core/tensor.h"

namespace colrow::kernels {

// dst (any dtype; contiguous, or a view copy_from can write) = src (fp32),
// rounded once.
inline void store_rounded(const Tensor& src, Tensor& dst) {
  if (dst.is_contiguous()) {
    dst.convert_from(src.is_contiguous() ? src : src.clone());
  } else {
    dst.copy_from(src.to(dst.dtype()));
  }
}

// The fp32 operands of one kernel call: fp32 tensors pass through untouched
// (no copy, no allocation); bf16 ones are widened copies, and store() rounds
// the outputs' results back into them.
//   Fp32Operands f;
//   kernel(f.in(x), f.out(y), f.inout(accumulator));
//   f.store();
class Fp32Operands {
 public:
  const Tensor& in(const Tensor& t) {
    if (t.dtype() == DType::kF32) return t;
    return temporaries_.emplace_back(t.to(DType::kF32));
  }
  // An output the kernel overwrites.
  Tensor& out(Tensor& t) {
    if (t.dtype() == DType::kF32) return t;
    return keep_result(Tensor::empty(t.shape(), t.device()), t);
  }
  // An output the kernel reads and updates (accumulates into).
  Tensor& inout(Tensor& t) {
    if (t.dtype() == DType::kF32) return t;
    return keep_result(t.to(DType::kF32), t);
  }
  void store() {
    for (auto& [result, target] : outputs_) store_rounded(*result, *target);
    outputs_.clear();
  }

 private:
  // The fp32 buffer the kernel writes for `target`, stored into it by store().
  Tensor& keep_result(Tensor wide, Tensor& target) {
    Tensor& result = temporaries_.emplace_back(std::move(wide));
    outputs_.emplace_back(&result, &target);
    return result;
  }

  std::list<Tensor> temporaries_;  // stable references; empty (no allocation) when all are fp32
  std::vector<std::pair<Tensor*, Tensor*>> outputs_;
};

}  // namespace colrow::kernels
