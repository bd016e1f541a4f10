// Devices, allocators and the rules of moving data: names parse and print,
// the CPU allocator counts its bytes, to() is shallow on the same device, an
// operation across devices is refused, and asking for a GPU where none can be
// used is one ConfigError that says why and what to do.
#include "colrow/core/device.h"

#include <gtest/gtest.h>

#include <string>

#include "colrow/core/allocator.h"
#include "colrow/core/error.h"
#include "colrow/core/tensor.h"

namespace colrow {
namespace {

TEST(Device, ParsesAndPrints) {
  EXPECT_EQ(parse_device("cpu"), Device::cpu());
  EXPECT_EQ(parse_device("cuda"), Device::cuda(0));
  EXPECT_EQ(parse_device("cuda:3"), Device::cuda(3));
  EXPECT_EQ(Device::cuda(2).str(), "cuda:2");
  EXPECT_EQ(Device::cpu().str(), "cpu");
  for (const char* bad : {"gpu", "cuda:", "cuda:x", "cuda:-1", "CPU", ""}) {
    try {
      parse_device(bad);
      ADD_FAILURE() << bad << " parsed";
    } catch (const ConfigError& e) {
      EXPECT_NE(std::string(e.what()).find("must be cpu, cuda or cuda:N"), std::string::npos);
    }
  }
}

TEST(Device, CpuAllocatorCountsItsBytes) {
  Allocator& cpu = allocator_for(Device::cpu());
  const size_t before = cpu.bytes_in_use();
  {
    Tensor t = Tensor::zeros({1000});
    EXPECT_EQ(cpu.bytes_in_use(), before + 4032);  // rounded up to whole cache lines
    EXPECT_GE(cpu.peak_bytes_in_use(), before + 4032);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(t.data()) % 64, 0u);
  }
  EXPECT_EQ(cpu.bytes_in_use(), before);
}

TEST(Device, CpuAllocatorReusesLargeBlocks) {
  Allocator& cpu = allocator_for(Device::cpu());
  const size_t before = cpu.bytes_in_use();
  const int64_t floats = (int64_t{3} << 20) / 4 + 1;  // 3 MiB + 4 bytes: held as 4 MiB
  const float* first = nullptr;
  {
    Tensor t = Tensor::zeros({floats});
    first = t.data();
    EXPECT_EQ(cpu.bytes_in_use(), before + (size_t{4} << 20));
    EXPECT_EQ(reinterpret_cast<uintptr_t>(first) % (size_t{2} << 20), 0u);  // huge-page aligned
  }
  EXPECT_EQ(cpu.bytes_in_use(), before);
  // The freed block comes back for the next tensor of its rounded size (no
  // new pages to fault in), and is zeroed like any fresh tensor.
  Tensor again = Tensor::zeros({floats - 100});
  EXPECT_EQ(again.data(), first);
  for (float v : again.to_vector()) ASSERT_EQ(v, 0.0f);
}

TEST(Device, AllocationFailureNamesBytesAndPhase) {
  // 2^60 bytes: beyond any address space, so the allocation fails on every machine.
  const MemoryPhase outer("train step 3");
  const MemoryPhase inner("backward pass");
  try {
    Tensor::empty({int64_t{1} << 58});
    ADD_FAILURE() << "an allocation of 2^60 bytes succeeded";
  } catch (const BackendError& e) {
    const std::string message = e.what();
    EXPECT_NE(message.find("1152921504606846976 bytes"), std::string::npos) << message;
    EXPECT_NE(message.find("while allocating for train step 3 > backward pass"), std::string::npos)
        << message;
  }
}

TEST(Device, MemoryPhasesNestAndEnd) {
  EXPECT_EQ(MemoryPhase::describe_current(), "");
  {
    const MemoryPhase outer("model parameters");
    EXPECT_EQ(MemoryPhase::describe_current(), " while allocating for model parameters");
  }
  EXPECT_EQ(MemoryPhase::describe_current(), "");
}

TEST(Device, ToTheSameDeviceIsShallow) {
  Tensor t = Tensor::from_vector({2}, {1.0f, 2.0f});
  Tensor u = t.to(Device::cpu());
  EXPECT_EQ(u.data(), t.data());
  EXPECT_EQ(u.device(), Device::cpu());
}

TEST(Device, EnsureShapeFollowsTheDevice) {
  Tensor t;
  ensure_shape(t, {3, 4}, Device::cpu());
  const float* p = t.data();
  ensure_shape(t, {3, 4}, Device::cpu());
  EXPECT_EQ(t.data(), p);  // kept: same shape, same device
}

TEST(Device, NoGpuIsOneClearError) {
  if (cuda_device_count() > 0) GTEST_SKIP() << "a GPU is visible; this checks the GPU-less path";
  try {
    cuda_device_for(0);
    ADD_FAILURE() << "a GPU was found";
  } catch (const ConfigError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("[device] device (cuda) needs a GPU, but "), std::string::npos) << what;
    EXPECT_NE(what.find("use --device cpu"), std::string::npos) << what;
  }
  // Nothing can be allocated there either, and the message says why.
  EXPECT_THROW(Tensor::empty({4}, Device::cuda(0)), ConfigError);
}

TEST(Device, MixedDevicesAreRefused) {
  const Tensor a = Tensor::zeros({2});
  Tensor absent;  // an undefined tensor (an optional operand) is ignored by the check,
  // whatever the device asked for: Tensor() reads as one element on the cpu
  EXPECT_NO_THROW(require_device("op", Device::cpu(), {&a, &absent}));
  EXPECT_NO_THROW(require_device("op", Device::cuda(0), {&absent}));
  try {
    require_device("op", Device::cuda(0), {&a});
    ADD_FAILURE() << "a cpu tensor passed as cuda:0";
  } catch (const InternalError& e) {
    EXPECT_NE(std::string(e.what()).find("lives on cpu, the others on cuda:0"), std::string::npos);
  }
}

}  // namespace
}  // namespace colrow
