// What the emulated launches (tests/kernels/cuda/emulated) share: their
// operands are host memory, the warp emulation's "GPU" (an operand on a real
// GPU is a test's mistake, refused as kernels/cuda/operands.h refuses a host
// operand), and the element-wise kernels' 1-d grid. Include it after
// support/warp_emulation.h, in files built with COLROW_WARP_EMULATION.
#pragma once

#include <cstdint>
#include <functional>
#include <initializer_list>
#include <string>

#include "colrow/core/error.h"
#include "colrow/core/tensor.h"
#include "core/cuda/cuda_context.h"
#include "support/warp_emulation.h"

namespace colrow::testing::emulated {

inline void require_host(const char* what, std::initializer_list<const Tensor*> operands) {
  for (const Tensor* t : operands) {
    if (t != nullptr && !t->device().is_cpu()) {
      throw InternalError(std::string("[emulation] ") + what + ": an operand lives on " +
                          t->device().str() + "; the emulated kernels take host tensors");
    }
  }
}

// One thread per element of n, `threads` to a block (blocks_for's grid, as
// the .cu files launch element-wise kernels); the threads never meet.
inline void over_elements(int64_t n, int threads, const std::function<void()>& thread) {
  emulation::launch_independent(colrow::cuda::blocks_for(n, threads), threads, thread);
}

}  // namespace colrow::testing::emulated
