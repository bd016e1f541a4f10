// bf16 tensors cross ranks as fp32: a collective on bf16 operands runs on
// their fp32 widenings (exact) and each bf16 result is rounded once from its
// fp32 value (kernels/mixed_precision.h), so a sum over ranks rounds once, not
// at every hop, and gathers and broadcasts move the values unchanged. The wire
// carries twice the bytes a bf16 collective would; the *_bf16_wire sums of
// Communicator halve them where that is worth a rounding (gradients under
// --grad-reduce-dtype bf16). The host and device backends call these first in
// every collective.
#pragma once

#include "colrow/core/tensor.h"
#include "kernels/mixed_precision.h"  // header only: dist links no kernels

namespace colrow::dist {

// In place (all-reduce, broadcast): false, having done nothing, when x is fp32.
template <typename Collective>
bool on_fp32_wire(Tensor& x, Collective&& collective) {
  if (x.dtype() == DType::kF32) return false;
  kernels::Fp32Operands f;
  collective(f.inout(x));
  f.store();
  return true;
}

// in -> out (all-gather, reduce-scatter): false when both are fp32.
template <typename Collective>
bool on_fp32_wire(const Tensor& in, Tensor& out, Collective&& collective) {
  if (in.dtype() == DType::kF32 && out.dtype() == DType::kF32) return false;
  kernels::Fp32Operands f;
  collective(f.in(in), f.out(out));
  f.store();
  return true;
}

}  // namespace colrow::dist
