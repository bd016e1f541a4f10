// bf16 operands of fp32 kernels: the reference pattern of mixed precision.
// Inputs are widened (exact), the fp32 kernel runs, and each bf16 output is
// rounded once, to nearest even, from its fp32 result; an accumulating output
// is widened first, so `out += x` rounds the sum once, not each term. Every
// operation in kernels/ops.h accepts bf16 tensors this way on every backend;
// the GEMMs and linear layers take them natively (tensor cores), with the same
// numbers up to the order of their fp32 sums. Native bf16 kernels of other
// operations must give what this pattern gives, within their summation order.
// `Convert` is a device's conversion: convert(src, dst), both contiguous.
#pragma once

#include <list>
#include <utility>
#include <vector>

#include "colrow/core/tensor.h"

namespace colrow::kernels {

// t itself when fp32; else a contiguous fp32 copy of any view of it.
template <typename Convert>
Tensor widened(const Tensor& t, Convert&& convert) {
  if (t.dtype() == DType::kF32) return t;
  Tensor wide = Tensor::empty(t.shape(), t.device());
  convert(t.is_contiguous() ? t : t.clone(), wide);
  return wide;
}

// dst (any dtype; contiguous, or a view copy_from can write) = src (fp32),
// rounded once.
template <typename Convert>
void store_rounded(const Tensor& src, Tensor& dst, Convert&& convert) {
  if (dst.dtype() == DType::kF32) {
    dst.copy_from(src);
    return;
  }
  const Tensor flat = src.is_contiguous() ? src : src.clone();
  if (dst.is_contiguous()) {
    convert(flat, dst);
    return;
  }
  Tensor narrow = Tensor::empty(dst.shape(), dst.device(), dst.dtype());
  convert(flat, narrow);
  dst.copy_from(narrow);
}

// The fp32 operands of one kernel call: fp32 tensors pass through untouched
// (no copy, no allocation); bf16 ones are widened copies, and store() rounds
// the outputs' results back into them.
//   Fp32Operands f(convert);
//   kernel(f.in(x), f.out(y), f.inout(accumulator));
//   f.store();
template <typename Convert>
class Fp32Operands {
 public:
  explicit Fp32Operands(Convert convert) : convert_(std::move(convert)) {}

  const Tensor& in(const Tensor& t) {
    if (t.dtype() == DType::kF32) return t;
    return temporaries_.emplace_back(widened(t, convert_));
  }
  // An output the kernel overwrites.
  Tensor& out(Tensor& t) {
    if (t.dtype() == DType::kF32) return t;
    outputs_.emplace_back(&temporaries_.emplace_back(Tensor::empty(t.shape(), t.device())), &t);
    return temporaries_.back();
  }
  // An output the kernel reads and updates (accumulates into).
  Tensor& inout(Tensor& t) {
    if (t.dtype() == DType::kF32) return t;
    outputs_.emplace_back(&temporaries_.emplace_back(widened(t, convert_)), &t);
    return temporaries_.back();
  }
  void store() {
    for (auto& [result, target] : outputs_) store_rounded(*result, *target, convert_);
    outputs_.clear();
  }

 private:
  Convert convert_;
  std::list<Tensor> temporaries_;  // stable references; empty (no allocation) when all are fp32
  std::vector<std::pair<Tensor*, Tensor*>> outputs_;
};

}  // namespace colrow::kernels
