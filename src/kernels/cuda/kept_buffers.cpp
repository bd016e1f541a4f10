// Kept device buffers of the CUDA kernels (see kept_buffers.h).
#include "kernels/cuda/kept_buffers.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <cstring>
#include <map>
#include <mutex>
#include <string>
#include <utility>

#include "colrow/core/error.h"

#include "core/cuda/cuda_check.h"
#include "core/cuda/cuda_context.h"
#include "core/device_runtime.h"

namespace colrow::kernels::cuda {
namespace {

using Key = std::pair<int, std::string>;

// Grown, never shrunk: the old block goes back to the cache, handed out again
// only to work queued after the kernels that read it on this stream.
Tensor& grown(Tensor& buffer, int device, int64_t floats) {
  if (!buffer.owns_storage() || buffer.numel() < floats) {
    buffer = Tensor::empty({floats > 0 ? floats : 1}, Device::cuda(device));
  }
  return buffer;
}

int64_t floats_for(size_t bytes) {
  return static_cast<int64_t>((bytes + sizeof(float) - 1) / sizeof(float));
}

// One role's upload path: the device buffer, the pinned host buffer the copy
// reads, and an event after the last copy (the pinned buffer is rewritten
// only once that copy has run).
struct Upload {
  Tensor device_buffer;
  void* pinned = nullptr;
  size_t pinned_bytes = 0;
  size_t last_bytes = 0;  // of the data now in both buffers
  cudaEvent_t copied = nullptr;
};

std::mutex g_mutex;
// Never destroyed: the buffers outlive the allocators' statics, and pinned
// memory goes back with the process.
auto* g_scratch = new std::map<Key, Tensor>;
auto* g_uploads = new std::map<Key, Upload>;

}  // namespace

Tensor kept_scratch(int device, const char* role, const Shape& shape) {
  const int64_t n = shape_numel(shape);
  std::lock_guard<std::mutex> lock(g_mutex);
  const Tensor& buffer = grown((*g_scratch)[{device, role}], device, n);
  return buffer.slice(0, 0, n).view(shape);  // a handle: no copy, no allocation
}

const void* upload_kept(int device, const char* role, const void* data, size_t bytes,
                        size_t capacity) {
  std::lock_guard<std::mutex> lock(g_mutex);
  Upload& u = (*g_uploads)[{device, role}];
  cudaStream_t stream = colrow::cuda::compute_stream(device);  // makes `device` current
  const size_t room = std::max(bytes, capacity);
  const bool regrown =
      !u.device_buffer.owns_storage() || u.device_buffer.numel() < floats_for(room);
  grown(u.device_buffer, device, floats_for(room));
  if (bytes == 0) return u.device_buffer.data();
  if (!regrown && bytes == u.last_bytes && std::memcmp(u.pinned, data, bytes) == 0) {
    return u.device_buffer.data();  // already there, queued before anything that reads it now
  }
  if (device_runtime::capturing(device)) {
    // A replay would copy whatever the pinned buffer holds then: the data
    // must be staged before the capture (GptModel::stage_inputs).
    throw InternalError(std::string("[cuda graph] an upload to '") + role +
                        "' while the stream is captured: stage it before the captured region");
  }
  if (u.copied == nullptr) {
    COLROW_CUDA_CHECK(cudaEventCreateWithFlags(&u.copied, cudaEventDisableTiming));
  } else {
    colrow::cuda::wait_for_event(u.copied);  // the DMA has read the pinned buffer
  }
  u.last_bytes = 0;  // until this copy is queued: nothing to compare with
  if (u.pinned_bytes < bytes) {
    if (u.pinned != nullptr) COLROW_CUDA_CHECK(cudaFreeHost(u.pinned));
    u.pinned = nullptr;
    u.pinned_bytes = 0;
    COLROW_CUDA_CHECK(cudaHostAlloc(&u.pinned, room, cudaHostAllocPortable));
    u.pinned_bytes = room;
  }
  std::memcpy(u.pinned, data, bytes);
  COLROW_CUDA_CHECK(
      cudaMemcpyAsync(u.device_buffer.data(), u.pinned, bytes, cudaMemcpyHostToDevice, stream));
  COLROW_CUDA_CHECK(cudaEventRecord(u.copied, stream));
  u.last_bytes = bytes;
  return u.device_buffer.data();
}

}  // namespace colrow::kernels::cuda
