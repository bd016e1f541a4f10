// kernels::cuda RoPE against kernels::cpu on the same inputs: the table bit
// for bit (both are the CPU's double computation), forward and backward bit
// for bit (both devices spell out the same fused multiply-adds), over odd
// shapes (tokens 1 .. 129, head_dim 2 .. 128, 1 .. 5 heads) and with linearly
// scaled frequencies; in place equal to out of place; strided rows (q and k
// as column blocks of attention's fused qkv output); position 0 the
// identity; InternalError on bad shapes and arguments.
// Built twice: on a GPU (label gpu), and with COLROW_WARP_EMULATION, where
// the same kernels run on the CPU through the warp emulation
// (emulated/rope.h), so CI checks them without a GPU.
#ifdef COLROW_WARP_EMULATION
#include "kernels/cuda/emulated/rope.h"
#else
#include "kernels/cuda/rope.h"
#endif

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "colrow/core/error.h"
#include "kernels/cpu/rope.h"
#include "kernels/cuda/cuda_test_helpers.h"
#include "support/gpu.h"

namespace colrow {
namespace {

#ifdef COLROW_WARP_EMULATION
namespace gpu = testing::emulated;
#else
namespace gpu = kernels::cuda;
#endif

using testing::random_exact;

struct RopeCase {
  int64_t batch, seq, heads, head_dim;
  double theta;
  double linear_factor = 1.0;  // rope_scaling {"type": "linear"}: frequencies / factor
};
// tokens = batch * seq: 1, 7, 74, 129; LLaMA's 10000 and LLaMA 3's 500000;
// linear scaling by 4 and 8 (the model tests' llama_biases_linear_rope).
const RopeCase kCases[] = {{1, 1, 1, 2, 10000.0},         {1, 7, 3, 6, 500000.0},
                           {2, 37, 2, 128, 10000.0},      {3, 43, 5, 64, 10000.0},
                           {2, 37, 2, 128, 10000.0, 8.0}, {1, 7, 3, 6, 10000.0, 4.0}};

std::string label(const RopeCase& c) {
  return "batch " + std::to_string(c.batch) + ", seq " + std::to_string(c.seq) + ", heads " +
         std::to_string(c.heads) + ", head_dim " + std::to_string(c.head_dim) + ", linear factor " +
         std::to_string(c.linear_factor);
}

// HF's default inverse frequencies, theta^(-2i / head_dim), i < head_dim / 2,
// divided by the linear scaling factor.
std::vector<double> inverse_frequencies(const RopeCase& c) {
  std::vector<double> f(static_cast<size_t>(c.head_dim / 2));
  for (size_t i = 0; i < f.size(); ++i) {
    f[i] = 1.0 / std::pow(c.theta, (2.0 * i) / c.head_dim) / c.linear_factor;
  }
  return f;
}

struct Tables {
  Tensor cos, sin;          // host, from kernels::cpu
  Tensor cos_gpu, sin_gpu;  // from kernels::cuda
};
Tables tables(const RopeCase& c, Device gpu) {
  Tables t;
  const Shape shape = {c.seq, c.head_dim / 2};
  t.cos = Tensor::empty(shape);
  t.sin = Tensor::empty(shape);
  kernels::cpu::rope_table(c.seq, inverse_frequencies(c), t.cos, t.sin);
  t.cos_gpu = Tensor::empty(shape, gpu);
  t.sin_gpu = Tensor::empty(shape, gpu);
  gpu::rope_table(c.seq, inverse_frequencies(c), t.cos_gpu, t.sin_gpu);
  return t;
}

TEST(CudaRopeTest, TableIsBitwiseTheCpuTable) {
  COLROW_REQUIRE_GPU();
  const Device gpu = testing::test_gpu();
  for (const RopeCase& c : kCases) {
    const Tables t = tables(c, gpu);
    EXPECT_EQ(t.cos_gpu.to_vector(), t.cos.to_vector()) << label(c);
    EXPECT_EQ(t.sin_gpu.to_vector(), t.sin.to_vector()) << label(c);
  }
}

// Each output is fma(x1, c, -/+ round(x2 s)) on both devices (kernels/cpu/
// rope.cpp's std::fma, kernels/cuda/rope.cu's fmaf with __fmul_rn, which no
// compiler contracts): the same roundings of the same fp32 inputs, so the
// same bits. A compiler that fused the other product instead would differ by
// an ulp here and there, and that is what this test is there to catch.
TEST(CudaRopeTest, ForwardAndBackwardAreTheCpusBits) {
  COLROW_REQUIRE_GPU();
  const Device gpu = testing::test_gpu();
  for (const RopeCase& c : kCases) {
    SCOPED_TRACE(label(c));
    const Tables t = tables(c, gpu);
    const Shape shape = {c.batch * c.seq, c.heads * c.head_dim};
    const Tensor x = random_exact(shape, 1);
    Tensor y = Tensor::empty(shape), dx = Tensor::empty(shape);
    kernels::cpu::rope_forward(x, t.cos, t.sin, y);
    kernels::cpu::rope_backward(x, t.cos, t.sin, dx);
    const Tensor x_gpu = testing::copy_to(x, gpu);
    Tensor y_gpu = Tensor::empty(shape, gpu), dx_gpu = Tensor::empty(shape, gpu);
    gpu::rope_forward(x_gpu, t.cos_gpu, t.sin_gpu, y_gpu);
    gpu::rope_backward(x_gpu, t.cos_gpu, t.sin_gpu, dx_gpu);
    testing::expect_same_bits("forward", y_gpu, y);
    testing::expect_same_bits("backward", dx_gpu, dx);

    // In place: each thread reads its pair before writing it, so y may be x.
    Tensor inplace = testing::copy_to(x, gpu);
    gpu::rope_forward(inplace, t.cos_gpu, t.sin_gpu, inplace);
    EXPECT_EQ(inplace.to_vector(), y_gpu.to_vector()) << "in-place forward";
    inplace = testing::copy_to(x, gpu);
    gpu::rope_backward(inplace, t.cos_gpu, t.sin_gpu, inplace);
    EXPECT_EQ(inplace.to_vector(), dx_gpu.to_vector()) << "in-place backward";
  }
}

// x and y as column blocks of wider tensors (attention's fused qkv output),
// forward out of place and backward in place: the CPU's bits on contiguous
// rows, and the columns outside the block untouched.
TEST(CudaRopeTest, StridedRowsAreTheCpusBits) {
  COLROW_REQUIRE_GPU();
  const Device gpu = testing::test_gpu();
  for (const RopeCase& c : kCases) {
    SCOPED_TRACE(label(c));
    const Tables t = tables(c, gpu);
    const int64_t tokens = c.batch * c.seq, width = c.heads * c.head_dim;
    const Tensor wide = random_exact({tokens, 3 * width}, 3);
    const Tensor x = wide.slice(1, width, width).clone();  // k's block, on the host
    Tensor y = Tensor::empty(x.shape()), dx = Tensor::empty(x.shape());
    kernels::cpu::rope_forward(x, t.cos, t.sin, y);
    kernels::cpu::rope_backward(x, t.cos, t.sin, dx);

    Tensor wide_gpu = testing::copy_to(wide, gpu);
    Tensor block_gpu = wide_gpu.slice(1, width, width);
    Tensor y_wide_gpu = Tensor::zeros({tokens, 2 * width}, gpu);
    Tensor y_gpu = y_wide_gpu.slice(1, width, width);
    gpu::rope_forward(block_gpu, t.cos_gpu, t.sin_gpu, y_gpu);
    testing::expect_same_bits("strided forward", y_gpu.clone(), y);
    for (float v : y_wide_gpu.slice(1, 0, width).clone().to_vector()) ASSERT_EQ(v, 0.0f);
    gpu::rope_backward(block_gpu, t.cos_gpu, t.sin_gpu, block_gpu);
    testing::expect_same_bits("strided backward in place", block_gpu.clone(), dx);
    const Tensor after = wide_gpu.to(Device::cpu());
    EXPECT_EQ(after.slice(1, 0, width).clone().to_vector(),
              wide.slice(1, 0, width).clone().to_vector())
        << "q's columns";
    EXPECT_EQ(after.slice(1, 2 * width, width).clone().to_vector(),
              wide.slice(1, 2 * width, width).clone().to_vector())
        << "v's columns";
  }
}

// cos 0 = 1 and sin 0 = 0 exactly: the first token of every sequence is unchanged.
TEST(CudaRopeTest, PositionZeroIsTheIdentity) {
  COLROW_REQUIRE_GPU();
  const Device gpu = testing::test_gpu();
  const RopeCase c{3, 7, 3, 6, 10000.0};
  const Tables t = tables(c, gpu);
  const int64_t width = c.heads * c.head_dim;
  const Tensor x = random_exact({c.batch * c.seq, width}, 2);
  Tensor y_gpu = Tensor::empty(x.shape(), gpu);
  gpu::rope_forward(testing::copy_to(x, gpu), t.cos_gpu, t.sin_gpu, y_gpu);
  const Tensor y = y_gpu.to(Device::cpu());
  for (int64_t b = 0; b < c.batch; ++b) {
    for (int64_t j = 0; j < width; ++j) {
      ASSERT_EQ(y(b * c.seq, j), x(b * c.seq, j)) << "sequence " << b << ", column " << j;
    }
  }
}

TEST(CudaRopeTest, BadShapesAndArgumentsThrow) {
  COLROW_REQUIRE_GPU();
  const Device gpu = testing::test_gpu();
  const RopeCase c{2, 4, 2, 8, 10000.0};
  const Tables t = tables(c, gpu);
  const Tensor x = Tensor::zeros({8, 16}, gpu);
  Tensor y = Tensor::empty({8, 16}, gpu);
  EXPECT_NO_THROW(gpu::rope_forward(x, t.cos_gpu, t.sin_gpu, y));
  Tensor y_wrong = Tensor::empty({8, 8}, gpu);
  EXPECT_THROW(gpu::rope_forward(x, t.cos_gpu, t.sin_gpu, y_wrong), InternalError);
  // seq = 4 does not divide 6 tokens; 12 columns are not whole heads of 8.
  const Tensor x_tokens = Tensor::zeros({6, 16}, gpu), x_width = Tensor::zeros({8, 12}, gpu);
  Tensor y_tokens = Tensor::empty({6, 16}, gpu), y_width = Tensor::empty({8, 12}, gpu);
  EXPECT_THROW(gpu::rope_forward(x_tokens, t.cos_gpu, t.sin_gpu, y_tokens), InternalError);
  EXPECT_THROW(gpu::rope_backward(x_width, t.cos_gpu, t.sin_gpu, y_width), InternalError);
  // sin of another shape than cos.
  const Tensor sin_short = Tensor::zeros({4, 3}, gpu);
  EXPECT_THROW(gpu::rope_forward(x, t.cos_gpu, sin_short, y), InternalError);
  // A column block of a wider tensor is taken (StridedRowsAreTheCpusBits
  // checks its values); x and y of another rank than 2 are refused.
  const Tensor wide = Tensor::zeros({8, 32}, gpu);
  EXPECT_NO_THROW(gpu::rope_forward(wide.slice(1, 0, 16), t.cos_gpu, t.sin_gpu, y));
  Tensor y3 = y.view({2, 4, 16});
  EXPECT_THROW(gpu::rope_forward(x.view({2, 4, 16}), t.cos_gpu, t.sin_gpu, y3), InternalError);
  // Host tables are refused rather than read as device memory.
  if (!testing::kGpuIsHost) {
    EXPECT_THROW(gpu::rope_forward(x, t.cos, t.sin, y), InternalError);
  }
  // The table's arguments: seq >= 1, finite positive frequencies, GPU outputs.
  Tensor cos = Tensor::empty({4, 4}, gpu), sin = Tensor::empty({4, 4}, gpu);
  EXPECT_THROW(gpu::rope_table(0, inverse_frequencies({1, 4, 1, 8, 10000.0}), cos, sin),
               InternalError);
  EXPECT_THROW(gpu::rope_table(4, {}, cos, sin), InternalError);
  EXPECT_THROW(gpu::rope_table(4, inverse_frequencies({1, 4, 1, 8, 0.0}), cos, sin), InternalError);
  if (!testing::kGpuIsHost) {
    Tensor host_cos = Tensor::empty({4, 4}), host_sin = Tensor::empty({4, 4});
    EXPECT_THROW(gpu::rope_table(4, inverse_frequencies({1, 4, 1, 8, 10000.0}), host_cos, host_sin),
                 InternalError);
  }
}

}  // namespace
}  // namespace colrow
