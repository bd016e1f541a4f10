// CUDA reductions against the CPU kernels: sum_of_squares over parts of 0 to
// 100000 elements (several of the kernel's chunks), in double, within the
// bound of two summation orders and the same bits run to run; divide bitwise
// equal to the CPU (one IEEE division per element on both); errors.
// Built twice: on a GPU (label gpu), and with COLROW_WARP_EMULATION, where
// the same kernels run on the CPU through the warp emulation
// (emulated/reduce.h), so CI checks them without a GPU.
#ifdef COLROW_WARP_EMULATION
#include "kernels/cuda/emulated/reduce.h"
#else
#include "kernels/cuda/reduce.h"
#endif

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <vector>

#include "colrow/core/error.h"
#include "kernels/cpu/reduce.h"
#include "kernels/cuda/cuda_test_helpers.h"
#include "support/gpu.h"

namespace colrow {
namespace {

using testing::random_uniform;

namespace cpu = kernels::cpu;
#ifdef COLROW_WARP_EMULATION
namespace gpu = testing::emulated;
#else
namespace gpu = kernels::cuda;
#endif

TEST(CudaReduceTest, SumOfSquaresMatchesCpu) {
  COLROW_REQUIRE_GPU();
  const Device dev = testing::test_gpu();
  const Shape shapes[] = {{0}, {1}, {37}, {10, 100}, {4097}, {100000}, {3, 0}};
  std::vector<Tensor> host, device;
  uint32_t seed = 1;
  int64_t n = 0;
  for (const Shape& s : shapes) {
    const float scale = seed % 2 == 0 ? 1.0f : 1e-3f;  // magnitudes far apart
    host.push_back(random_uniform(s, seed++, -scale, scale));
    device.push_back(testing::copy_to(host.back(), dev));
    n += host.back().numel();
  }
  const double want = cpu::sum_of_squares(host);
  const double got = gpu::sum_of_squares(device);
  // Each x^2 of an fp32 x is exact in double; the two backends add the same
  // n nonnegative terms in different orders, each within gamma_n (double,
  // 2^-53) of the exact sum: |got - want| <= 2 n 2^-53 want.
  EXPECT_NEAR(got, want, 2.0 * static_cast<double>(n) * 0x1p-53 * want);
  // Fixed order: the same bits every run.
  const double again = gpu::sum_of_squares(device);
  EXPECT_EQ(std::memcmp(&got, &again, sizeof(double)), 0);
  // One part alone, and nothing at all.
  EXPECT_NEAR(gpu::sum_of_squares({device[2]}), cpu::sum_of_squares({host[2]}),
              2.0 * 37 * 0x1p-53 * cpu::sum_of_squares({host[2]}));
  EXPECT_EQ(gpu::sum_of_squares({}), 0.0);
  EXPECT_EQ(gpu::sum_of_squares({device[0]}), 0.0);
}

TEST(CudaReduceTest, DivideMatchesCpuBitwise) {
  COLROW_REQUIRE_GPU();
  const Device dev = testing::test_gpu();
  for (const float divisor : {3.0f, 7.0f, 0.1f}) {
    const Tensor x = random_uniform({33, 31}, 42, -1.0f, 1.0f);
    Tensor want = x.clone();
    cpu::divide(want, divisor);
    Tensor got = testing::copy_to(x, dev);
    gpu::divide(got, divisor);
    const std::vector<float> a = got.to_vector(), b = want.to_vector();
    EXPECT_EQ(std::memcmp(a.data(), b.data(), a.size() * sizeof(float)), 0)
        << "divisor " << divisor;
  }
}

TEST(CudaReduceTest, ErrorsAreInternalErrors) {
  COLROW_REQUIRE_GPU();
  const Device dev = testing::test_gpu();
  const Tensor wide = Tensor::zeros({4, 6}, dev);
  Tensor strided = wide.slice(1, 0, 3);
  EXPECT_THROW(gpu::sum_of_squares({strided}), InternalError);
  EXPECT_THROW(gpu::divide(strided, 2.0f), InternalError);
  if (!testing::kGpuIsHost) {
    EXPECT_THROW(gpu::sum_of_squares({Tensor::zeros({3}, dev), Tensor::zeros({3})}), InternalError)
        << "one part on the host";
    EXPECT_THROW(gpu::sum_of_squares({Tensor::zeros({0}), Tensor::zeros({3})}), InternalError)
        << "every part on the host";
  }
}

}  // namespace
}  // namespace colrow
