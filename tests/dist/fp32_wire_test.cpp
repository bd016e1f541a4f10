// dist/fp32_wire.h: bf16 operands cross a collective as their fp32 widenings
// and each result is rounded once; a kept Fp32Wire (a GPU group's) reuses its
// buffers, so a warm step's bf16 collectives allocate nothing. On the CPU with
// stand-in collectives: an in-place "sum" (x * 3 + 1, one fp32 rounding, then
// one bf16 rounding) and a "gather" (in twice into out).
#include "dist/fp32_wire.h"

#include <gtest/gtest.h>

#include <vector>

#include "colrow/core/allocator.h"
#include "colrow/core/bfloat16.h"

namespace colrow {
namespace {

Tensor bf16_tensor(const std::vector<float>& values) {
  return Tensor::from_vector({static_cast<int64_t>(values.size())}, values).to(DType::kBF16);
}

// What the wire must give: the fp32 result of the widened value, rounded once.
float rounded(float x) {
  return bf16_to_float(float_to_bf16(x));
}

TEST(Fp32Wire, RoundsEachResultOnceAndReusesItsBuffers) {
  const std::vector<float> values = {1.0f, -2.5f, 0.3f, 1e-3f, 7.75f, 100.0f, -0.01f};
  auto sum = [](Tensor& w) {
    ASSERT_EQ(w.dtype(), DType::kF32);
    for (int64_t i = 0; i < w.numel(); ++i) w.data()[i] = w.data()[i] * 3.0f + 1.0f;
  };
  auto gather = [](const Tensor& in, Tensor& out) {
    ASSERT_EQ(in.dtype(), DType::kF32);
    ASSERT_EQ(out.dtype(), DType::kF32);
    for (int64_t i = 0; i < out.numel(); ++i) out.data()[i] = in.data()[i % in.numel()];
  };
  dist::Fp32Wire wire;
  const Allocator& host = allocator_for(Device::cpu());
  for (int call = 0; call < 3; ++call) {
    Tensor x = bf16_tensor(values);
    const std::vector<float> widened = x.to(DType::kF32).to_vector();
    Tensor out =
        Tensor::zeros({2 * static_cast<int64_t>(values.size())}, Device::cpu(), DType::kBF16);
    const size_t before = host.allocation_count();
    ASSERT_TRUE(wire.run(x, sum));
    ASSERT_TRUE(wire.run(x, out, gather));
    // The first call makes the two buffers; later ones reuse them.
    if (call > 0) {
      EXPECT_EQ(host.allocation_count(), before) << "call " << call;
    }
    const std::vector<float> got = x.to(DType::kF32).to_vector();
    const std::vector<float> gathered = out.to(DType::kF32).to_vector();
    for (size_t i = 0; i < values.size(); ++i) {
      const float expected = rounded(widened[i] * 3.0f + 1.0f);
      EXPECT_EQ(got[i], expected) << i;
      EXPECT_EQ(gathered[i], expected) << i;  // gathers move the bf16 values unchanged
      EXPECT_EQ(gathered[i + values.size()], expected) << i;
    }
  }
  // A smaller operand fits the buffers; fp32 operands pass untouched.
  Tensor small = bf16_tensor({2.0f});
  const size_t before = host.allocation_count();
  ASSERT_TRUE(wire.run(small, sum));
  EXPECT_EQ(host.allocation_count(), before);
  EXPECT_EQ(small.to(DType::kF32).to_vector()[0], 7.0f);
  Tensor fp32 = Tensor::full({3}, 1.0f);
  EXPECT_FALSE(wire.run(fp32, sum));
  EXPECT_EQ(fp32.to_vector(), std::vector<float>(3, 1.0f));
}

}  // namespace
}  // namespace colrow
