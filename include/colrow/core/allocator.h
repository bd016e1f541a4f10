// Allocator: one per device, owning every tensor's memory there. The CPU's
// hands out 64-byte aligned host memory; the CUDA one caches cudaMalloc blocks
// (never managed memory), so a training step that frees and re-allocates the
// same sizes does not call into the driver. Tensors hold their storage through
// it (core/tensor.h); nothing else allocates device memory.
#pragma once

#include <cstddef>
#include <mutex>
#include <string>

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
  // Calls of allocate() since the start. A training step that makes none once
  // warm reuses the same addresses every time: what a CUDA graph of it needs,
  // and no allocator work on the step's path.
  virtual size_t allocation_count() const = 0;
};

// Bytes an allocator has handed out and not taken back, now and at most:
// what bytes_in_use() and peak_bytes_in_use() report. Thread-safe.
class AllocationCounter {
 public:
  void allocated(size_t bytes) {
    std::lock_guard<std::mutex> lock(mutex_);
    in_use_ += bytes;
    ++allocations_;
    if (in_use_ > peak_) peak_ = in_use_;
  }
  void freed(size_t bytes) {
    std::lock_guard<std::mutex> lock(mutex_);
    in_use_ -= bytes;
  }
  size_t in_use() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return in_use_;
  }
  size_t peak() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return peak_;
  }
  size_t allocations() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return allocations_;
  }

 private:
  mutable std::mutex mutex_;
  size_t in_use_ = 0;
  size_t peak_ = 0;
  size_t allocations_ = 0;
};

// What the program is allocating for ("model parameters", "forward pass,
// micro-batch 2 of 4"): out-of-memory errors name it, so a user learns which
// phase did not fit, not only a byte count. Scoped and per thread; nested
// phases read outermost first ("train step 3 > backward pass").
class MemoryPhase {
 public:
  explicit MemoryPhase(std::string name);
  ~MemoryPhase();
  MemoryPhase(const MemoryPhase&) = delete;
  MemoryPhase& operator=(const MemoryPhase&) = delete;
  // " while allocating for <phases>", or "" outside every phase.
  static std::string describe_current();
};

// The allocator of `device`, alive for the whole program. ConfigError for a
// CUDA device in a build without CUDA.
Allocator& allocator_for(Device device);

}  // namespace colrow
