// The CUDA caching allocator: a freed block of the same size is handed out
// again without the driver, bytes are counted, to() round-trips bitwise, and
// running out of GPU memory is one BackendError naming the phase, the bytes
// asked for and the bytes free, after which the allocator still works.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "colrow/core/allocator.h"
#include "colrow/core/error.h"
#include "colrow/core/tensor.h"
#include "support/gpu.h"

namespace colrow {
namespace {

TEST(CudaAllocator, ReusesAFreedBlockOfTheSameSize) {
  COLROW_REQUIRE_GPU();
  const Device gpu = testing::test_gpu();
  Allocator& allocator = allocator_for(gpu);
  const size_t before = allocator.bytes_in_use();
  const float* first = nullptr;
  {
    Tensor t = Tensor::empty({1000, 37}, gpu);
    first = t.data();
    EXPECT_GE(allocator.bytes_in_use(), before + 1000 * 37 * 4);
  }
  EXPECT_EQ(allocator.bytes_in_use(), before);
  Tensor again = Tensor::empty({1000, 37}, gpu);
  EXPECT_EQ(again.data(), first);  // from the cache, not a new cudaMalloc
  EXPECT_GE(allocator.peak_bytes_in_use(), before + 1000 * 37 * 4);
}

TEST(CudaAllocator, ToAndBackIsBitwise) {
  COLROW_REQUIRE_GPU();
  std::vector<float> values(1237);
  for (size_t i = 0; i < values.size(); ++i) values[i] = 1.0f / static_cast<float>(i + 3);
  const Tensor host = Tensor::from_vector({1237}, values);
  const Tensor device = host.to(testing::test_gpu());
  EXPECT_EQ(device.device(), testing::test_gpu());
  EXPECT_EQ(device.to(Device::cpu()).to_vector(), values);
}

TEST(CudaAllocator, OutOfMemoryNamesPhaseBytesAskedAndFree) {
  COLROW_REQUIRE_GPU();
  const Device gpu = testing::test_gpu();
  const MemoryPhase phase("forward pass, micro-batch 2 of 4");
  try {
    Tensor::empty({int64_t{1} << 40}, gpu);  // 4 TiB: more than any GPU has
    ADD_FAILURE() << "4 TiB fitted on " << gpu.str();
  } catch (const BackendError& e) {
    const std::string message = e.what();
    EXPECT_NE(message.find("out of memory on " + gpu.str()), std::string::npos) << message;
    EXPECT_NE(message.find("4096.00 GiB asked for"), std::string::npos) << message;
    EXPECT_NE(message.find(" free of "), std::string::npos) << message;
    EXPECT_NE(message.find("while allocating for forward pass, micro-batch 2 of 4"),
              std::string::npos)
        << message;
  }
  Tensor still = Tensor::zeros({64}, gpu);  // the failure left the allocator usable
  EXPECT_EQ(still.to(Device::cpu()).to_vector(), std::vector<float>(64, 0.0f));
}

}  // namespace
}  // namespace colrow
