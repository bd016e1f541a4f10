// Host-side helper of the CUDA kernels for their operands: which GPU they
// live on (refusing host tensors, which a kernel would read as device
// memory). Host data a launch needs goes up through kept_buffers.h.
// Plain C++: no CUDA types, so it reads the same in .cu and .cpp files.
#pragma once

#include <initializer_list>
#include <string>

#include "colrow/core/error.h"
#include "colrow/core/tensor.h"

namespace colrow::kernels::cuda {

// The index of the GPU the operands live on: that of the first non-empty one,
// which must be a CUDA tensor, with every other non-empty one on the same GPU
// (require_device). Null pointers and empty tensors hold no memory and are not
// checked, unless every operand is empty: then the first one's device counts.
inline int cuda_device_of(const char* what, std::initializer_list<const Tensor*> operands) {
  const Tensor* first = nullptr;
  for (const Tensor* t : operands) {
    if (t == nullptr) continue;
    if (first == nullptr || (first->numel() == 0 && t->numel() > 0)) first = t;
  }
  if (first == nullptr) {
    throw InternalError(std::string("[device] ") + what + ": no operands");
  }
  const Device device = first->device();
  if (!device.is_cuda()) {
    throw InternalError(std::string("[device] ") + what + ": an operand lives on " + device.str() +
                        ", not on a GPU. Move it with to() first: the CUDA kernels read device "
                        "memory only.");
  }
  require_device(what, device, operands);
  return device.index;
}

}  // namespace colrow::kernels::cuda
