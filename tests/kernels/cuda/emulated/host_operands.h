// The emulated launches (tests/kernels/cuda/emulated) run kernels on host
// memory, the warp emulation's "GPU": an operand on a real GPU is a test's
// mistake, refused as kernels/cuda/operands.h refuses a host operand.
#pragma once

#include <initializer_list>
#include <string>

#include "colrow/core/error.h"
#include "colrow/core/tensor.h"

namespace colrow::testing::emulated {

inline void require_host(const char* what, std::initializer_list<const Tensor*> operands) {
  for (const Tensor* t : operands) {
    if (t != nullptr && !t->device().is_cpu()) {
      throw InternalError(std::string("[emulation] ") + what + ": an operand lives on " +
                          t->device().str() + "; the emulated kernels take host tensors");
    }
  }
}

}  // namespace colrow::testing::emulated
