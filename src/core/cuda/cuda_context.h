// The per-GPU context every CUDA kernel and communicator shares: one compute
// stream per device, on which kernels, cuBLAS calls, copies and NCCL
// collectives are queued in program order, so no host synchronization is
// needed between them. Sizes of launches are derived here once.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace colrow::cuda {

// Makes `device` current on this thread and returns its compute stream
// (created on first use, alive for the program).
cudaStream_t compute_stream(int device);

// The host's waits for the GPU, counted (device_runtime::host_wait_count).
// They poll (core/host_wait.h): a failed NCCL communicator or --comm-timeout
// ends them in BackendError instead of a hang.
void wait_for_stream(cudaStream_t stream);
void wait_for_event(cudaEvent_t event);  // no wait, and none counted, when it has happened
// Polls until `stream` is idle, uncounted: before a call that would block
// inside the driver behind the stream's work (a copy with pageable memory).
void drain_stream(cudaStream_t stream);

// Blocks for a 1-d grid of `n` threads at `threads` per block (at least 1).
inline unsigned int blocks_for(int64_t n, int threads) {
  const int64_t b = (n + threads - 1) / threads;
  return static_cast<unsigned int>(b < 1 ? 1 : b);
}

}  // namespace colrow::cuda
