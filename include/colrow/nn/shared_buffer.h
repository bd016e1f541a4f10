// shared_buffer: activation buffers that every layer of a model can share
// because each layer uses them only within one forward or one backward call,
// as Megatron's global memory buffer holds sequence parallelism's gathered
// inputs. A buffer is named by its role and identified by its shape, device
// and dtype; the same arguments give the same tensor (same storage) for the
// life of the program. Its contents are whatever the last user left.
#pragma once

#include <string>

#include "colrow/core/tensor.h"

namespace colrow {

Tensor& shared_buffer(const std::string& role, const Shape& shape, Device device,
                      DType dtype = DType::kF32);

}  // namespace colrow
