// When a CPU loop is worth OpenMP's threads: the one threshold of every
// element loop in colrow (the CPU kernels, dtype conversion in core, the
// safetensors decoder in io). Below it, forking and joining the threads costs
// more than they save (measured on the element-wise kernels). It lives in core
// so that the layers above kernels need not include a backend's header.
#pragma once

#include <cstdint>

namespace colrow {

constexpr int64_t kParallelElements = int64_t{1} << 15;

}  // namespace colrow
