// Device memory that a CUDA kernel needs within one call (partial sums,
// uploaded ids and tables), kept for the program's life: one buffer per GPU
// and role, grown to the largest size asked for. Every user queues its work on
// the GPU's compute stream, so the next call's writes come after this call's
// reads in stream order. A warm training step then takes nothing from the
// allocator (the same addresses every step, what a CUDA graph of the step
// needs), and an upload no longer waits for the GPU: it goes through a pinned
// host buffer, asynchronously. A role is one call site's; two buffers that one
// call needs at once have two roles. Compute stream only.
#pragma once

#include <cstddef>
#include <cstdint>
#include <type_traits>
#include <vector>

#include "colrow/core/tensor.h"

namespace colrow::kernels::cuda {

// An fp32 view of `shape` in `role`'s buffer on GPU `device` (256-byte
// aligned, so doubles fit in twice the floats); its contents are what the
// last user left.
Tensor kept_scratch(int device, const char* role, const Shape& shape);

// `bytes` of host data in `role`'s device buffer: copied through a pinned
// buffer on the compute stream, after the work queued before it, without the
// host waiting for the GPU (only, where the role's previous copy has not run
// yet, for that copy). Data equal to the role's previous upload is not copied
// again. `data` may go once this returns. Both buffers hold at least
// `capacity` bytes: a role whose size varies with the data (the embedding's
// scatter plan) gives its bound, so that a later, larger upload neither
// allocates nor waits for a pinned buffer to be replaced.
const void* upload_kept(int device, const char* role, const void* data, size_t bytes,
                        size_t capacity = 0);

inline const int32_t* upload_kept(int device, const char* role, const std::vector<int32_t>& values,
                                  size_t capacity_values = 0) {
  return static_cast<const int32_t*>(upload_kept(device, role, values.data(),
                                                 values.size() * sizeof(int32_t),
                                                 capacity_values * sizeof(int32_t)));
}

// A table of trivially copyable rows (8-byte fields only, so host and device
// agree on the layout); the buffer's alignment makes the rows aligned.
template <typename Row>
const Row* upload_kept_table(int device, const char* role, const std::vector<Row>& rows) {
  static_assert(std::is_trivially_copyable_v<Row> && sizeof(Row) % sizeof(double) == 0,
                "table rows are copied as bytes and hold 8-byte fields only");
  return static_cast<const Row*>(upload_kept(device, role, rows.data(), rows.size() * sizeof(Row)));
}

}  // namespace colrow::kernels::cuda
