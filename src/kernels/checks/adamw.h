// Operand check of the AdamW kernels, shared by kernels/cpu/adamw.cpp and
// kernels/cuda/adamw.cu: a segment's param, grad and moments are contiguous
// fp32 of one length; its compute copy is empty, or contiguous bf16 of that
// length.
#pragma once

#include <string>

#include "colrow/core/error.h"
#include "colrow/core/tensor.h"
#include "kernels/backend.h"

namespace colrow::kernels {

inline void check_adamw_segment(const AdamWSegment& s) {
  const int64_t n = s.param.numel();
  bool ok = true;
  for (const Tensor* t : {&s.param, &s.grad, &s.exp_avg, &s.exp_avg_sq}) {
    ok = ok && t->is_contiguous() && t->numel() == n && t->dtype() == DType::kF32;
  }
  if (s.compute.owns_storage()) {
    ok = ok && s.compute.is_contiguous() && s.compute.numel() == n &&
         s.compute.dtype() == DType::kBF16;
  }
  if (!ok) {
    throw InternalError("[adamw] segment: param " + shape_to_string(s.param.shape()) + ", grad " +
                        shape_to_string(s.grad.shape()) + ", exp_avg " +
                        shape_to_string(s.exp_avg.shape()) + ", exp_avg_sq " +
                        shape_to_string(s.exp_avg_sq.shape()) +
                        " must be contiguous fp32 of one length, and the compute copy (if any) "
                        "bf16 of that length");
  }
}

}  // namespace colrow::kernels
