// GPU tests: carry the ctest label `gpu` (cmake: colrow_add_gpu_test) and, on a
// machine without a GPU or in a build without CUDA, report themselves skipped
// with one line saying why. They never pass as if they had run.
#pragma once

#include <gtest/gtest.h>

#include <string>

#include "colrow/core/device.h"
#include "colrow/core/tensor.h"

namespace colrow::testing {

#ifdef COLROW_WARP_EMULATION
// A GPU test compiled a second time against the warp emulation
// (support/warp_emulation.h): its "GPU" is the host, always there.
inline std::string gpu_unavailable() {
  return "";
}
inline Device test_gpu(int /*local_rank*/ = 0) {
  return Device::cpu();
}
// Host operands are what the emulated kernels take, so a test's checks that
// the CUDA kernels refuse them do not apply.
inline constexpr bool kGpuIsHost = true;
#else
// "" when a GPU can be used, else the reason none can.
inline std::string gpu_unavailable() {
  if (!cuda_built()) return "colrow was built without CUDA (-DCOLROW_CUDA=OFF)";
  if (cuda_device_count() == 0) return "no GPU is visible to this process";
  return "";
}

// The GPU this test rank uses: local rank mod the GPUs visible.
inline Device test_gpu(int local_rank = 0) {
  return Device::cuda(local_rank % cuda_device_count());
}
inline constexpr bool kGpuIsHost = false;
#endif

// A copy of t on `device` in memory of its own: a GPU test's upload.
// Tensor::to returns t itself when t is there already, as every host tensor
// is under the warp emulation; a kernel would then write into the test's
// inputs.
inline Tensor copy_to(const Tensor& t, Device device) {
  Tensor copy = Tensor::empty(t.shape(), device, t.dtype());
  copy.copy_from(t);
  return copy;
}

}  // namespace colrow::testing

// First line of every GPU test body.
#define COLROW_REQUIRE_GPU()                                                                     \
  do {                                                                                           \
    const std::string colrow_gpu_reason_ = ::colrow::testing::gpu_unavailable();                 \
    if (!colrow_gpu_reason_.empty()) GTEST_SKIP() << "GPU test skipped: " << colrow_gpu_reason_; \
  } while (0)
