// When the CPU kernels go parallel: below this many elements of work, OpenMP's
// fork and join cost more than the threads save (measured on the element-wise
// kernels; one threshold for all of them).
#pragma once

#include <cstdint>

namespace colrow::kernels::cpu {

constexpr int64_t kParallelElements = int64_t{1} << 15;

}  // namespace colrow::kernels::cpu
