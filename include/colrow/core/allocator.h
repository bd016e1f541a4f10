// Allocator: one per device, owning every tensor's memory there. The CPU's
// hands out 64-byte aligned host memory; the CUDA one caches cudaMalloc blocks
// (never managed memory), so a training step that frees and re-allocates the
// same sizes does not call into the driver. Tensors hold their storage through
// it (core/tensor.h); nothing else allocates device memory.
#pragma once

#include <cstddef>

#include "colrow/core/device.h"

namespace colrow {

class Allocator {
 public:
  virtual ~Allocator() = default;
  virtual Device device() const = 0;
  // At least `bytes` (>= 1) bytes, aligned for any element type. BackendError
  // on failure, naming the bytes asked for and, on a GPU, the bytes free.
  virtual void* allocate(size_t bytes) = 0;
  // `bytes` as given to allocate.
  virtual void deallocate(void* p, size_t bytes) = 0;
  // Bytes handed out and not returned, now and at most since the start.
  virtual size_t bytes_in_use() const = 0;
  virtual size_t peak_bytes_in_use() const = 0;
};

// The allocator of `device`, alive for the whole program. ConfigError for a
// CUDA device in a build without CUDA.
Allocator& allocator_for(Device device);

}  // namespace colrow
