// kernels::cuda GELU (tanh form), SiLU and SwiGLU, forward and backward,
// against kernels::cpu on the same inputs: [-8, 8] evenly plus saturating
// values out to +-1000, inputs past expf's overflow (x < -88.72, where the
// stable sigmoid must give 0, not NaN), shapes of 1 .. 129000 elements, and
// shape and contiguity errors.
// Built twice: on a GPU (label gpu), and with COLROW_WARP_EMULATION, where
// the same kernels run on the CPU through the warp emulation
// (emulated/activation.h), so CI checks them without a GPU.
#ifdef COLROW_WARP_EMULATION
#include "kernels/cuda/emulated/activation.h"
#else
#include "kernels/cuda/activation.h"
#endif

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "colrow/core/error.h"
#include "kernels/cpu/activation.h"
#include "kernels/cuda/cuda_test_helpers.h"
#include "support/activation_error_model.h"
#include "support/gpu.h"

namespace colrow {
namespace {

#ifdef COLROW_WARP_EMULATION
namespace gpu = testing::emulated;
#else
namespace gpu = kernels::cuda;
#endif

using testing::random_exact;

// Error model, the one tests/kernels/cpu/activation_test.cpp derives in full.
// With tanhf/expf accurate to 4 ulp (glibc's libmvec on the CPU; CUDA's are
// documented to 2 ulp, so the model covers both) and one u per fp32
// operation, each side is within kMargin * B(x) of the exact value, B below;
// so the two sides differ by at most 2 kMargin B(x). FMA contraction on the
// GPU only removes roundings. A wrong formula misses by far more.
using namespace activation_error_model;

// [-8, 8] evenly; tensors of 1000+ elements also get `extremes` at every 37th entry.
Tensor spread_inputs(const Shape& shape, const std::vector<float>& extremes) {
  Tensor t = Tensor::empty(shape);
  const int64_t n = t.numel();
  float* p = t.data();
  for (int64_t i = 0; i < n; ++i) {
    p[i] = n == 1 ? -3.3f : static_cast<float>(-8.0 + 16.0 * i / (n - 1));
  }
  for (int64_t i = 0; n >= 1000 && i < static_cast<int64_t>(extremes.size()); ++i) {
    p[i * 37] = extremes[i];
  }
  return t;
}
const std::vector<float> kExtremes = {0.0f,  1e-20f, -1e-20f, 12.0f,  -12.0f, 20.0f,  -20.0f,
                                      50.0f, -50.0f, 88.0f,   -88.0f, 100.0f, 1000.0f};
// Past expf's overflow: exp(-x) = inf on the unstable form.
const std::vector<float> kBeyond = {-88.8f, -89.0f, -100.0f, -1000.0f, -1e4f};

Tensor nans(const Shape& shape, Device device) {
  return Tensor::full(shape, std::numeric_limits<float>::quiet_NaN(), device);
}

// |cuda[i] - cpu[i]| <= 2 kMargin bound(i) for every i (fails on NaN too).
void expect_agree(const Tensor& cuda_out, const Tensor& cpu_out,
                  const std::function<double(int64_t)>& bound, const Tensor& x,
                  const std::string& what) {
  const std::vector<float> got = cuda_out.to_vector(), want = cpu_out.to_vector();
  ASSERT_EQ(got.size(), want.size()) << what;
  int failures = 0;
  for (size_t i = 0; i < got.size() && failures < 5; ++i) {
    const double limit = 2 * kMargin * bound(static_cast<int64_t>(i));
    if (!(std::fabs(static_cast<double>(got[i]) - want[i]) <= limit)) {
      ADD_FAILURE() << what << " at " << i << " (x = " << x.data()[i] << "): cuda " << got[i]
                    << ", cpu " << want[i] << ", bound " << limit;
      ++failures;
    }
  }
}

// 1, 7 x 3, 37 x 65 and 129 x 1000 elements: odd sizes, partial last blocks.
const Shape kShapes[] = {{1}, {7, 3}, {37, 65}, {129, 1000}};

// Runs every kernel on CPU and GPU with inputs x (gate), dy (up, dh) and compares.
void check_all(const Tensor& x, const Tensor& dy, const std::string& where) {
  const Device gpu = testing::test_gpu();
  const Shape& shape = x.shape();
  const Tensor x_gpu = testing::copy_to(x, gpu), dy_gpu = testing::copy_to(dy, gpu);
  const float* in = x.data();
  const float* g = dy.data();
  Tensor out_cpu = Tensor::empty(shape), out2_cpu = Tensor::empty(shape);
  Tensor out_gpu = nans(shape, gpu), out2_gpu = nans(shape, gpu);

  kernels::cpu::gelu_forward(kernels::GeluForm::kTanh, x, out_cpu);
  gpu::gelu_forward(kernels::GeluForm::kTanh, x_gpu, out_gpu);
  expect_agree(
      out_gpu, out_cpu, [&](int64_t i) { return gelu_bound(in[i]); }, x, "gelu " + where);

  // dx = dy f'(x): the local bound scaled by |dy|, and one more rounding.
  kernels::cpu::gelu_backward(kernels::GeluForm::kTanh, x, dy, out_cpu);
  gpu::gelu_backward(kernels::GeluForm::kTanh, x_gpu, dy_gpu, out_gpu);
  expect_agree(
      out_gpu, out_cpu,
      [&](int64_t i) {
        return std::fabs(g[i]) * (gelu_grad_bound(in[i]) + kU * std::fabs(gelu_grad(in[i])));
      },
      x, "gelu' " + where);

  kernels::cpu::gelu_forward(kernels::GeluForm::kErf, x, out_cpu);
  gpu::gelu_forward(kernels::GeluForm::kErf, x_gpu, out_gpu);
  expect_agree(
      out_gpu, out_cpu, [&](int64_t i) { return gelu_erf_bound(in[i]); }, x, "gelu erf " + where);
  kernels::cpu::gelu_backward(kernels::GeluForm::kErf, x, dy, out_cpu);
  gpu::gelu_backward(kernels::GeluForm::kErf, x_gpu, dy_gpu, out_gpu);
  expect_agree(
      out_gpu, out_cpu,
      [&](int64_t i) {
        return std::fabs(g[i]) *
               (gelu_erf_grad_bound(in[i]) + kU * std::fabs(gelu_erf_grad(in[i])));
      },
      x, "gelu erf' " + where);

  kernels::cpu::silu_forward(x, out_cpu);
  gpu::silu_forward(x_gpu, out_gpu);
  expect_agree(
      out_gpu, out_cpu, [&](int64_t i) { return silu_bound(in[i]); }, x, "silu " + where);

  kernels::cpu::silu_backward(x, dy, out_cpu);
  gpu::silu_backward(x_gpu, dy_gpu, out_gpu);
  expect_agree(
      out_gpu, out_cpu,
      [&](int64_t i) {
        return std::fabs(g[i]) * (silu_grad_bound(in[i]) + kU * std::fabs(silu_grad(in[i])));
      },
      x, "silu' " + where);

  // SwiGLU with gate = x and up = dh = dy: h = silu(gate) up (one more
  // rounding); dgate = dh up silu'(gate) (two more), dup = dh silu(gate) (one more).
  kernels::cpu::swiglu_forward(x, dy, out_cpu);
  gpu::swiglu_forward(x_gpu, dy_gpu, out_gpu);
  expect_agree(
      out_gpu, out_cpu,
      [&](int64_t i) {
        return std::fabs(g[i]) * (silu_bound(in[i]) + kU * std::fabs(silu(in[i])));
      },
      x, "swiglu " + where);

  kernels::cpu::swiglu_backward(x, dy, dy, out_cpu, out2_cpu);
  gpu::swiglu_backward(x_gpu, dy_gpu, dy_gpu, out_gpu, out2_gpu);
  expect_agree(
      out_gpu, out_cpu,
      [&](int64_t i) {
        return g[i] * g[i] * (silu_grad_bound(in[i]) + 2 * kU * std::fabs(silu_grad(in[i])));
      },
      x, "swiglu dgate " + where);
  expect_agree(
      out2_gpu, out2_cpu,
      [&](int64_t i) {
        return std::fabs(g[i]) * (silu_bound(in[i]) + kU * std::fabs(silu(in[i])));
      },
      x, "swiglu dup " + where);
}

TEST(CudaActivationTest, MatchesCpu) {
  COLROW_REQUIRE_GPU();
  for (const Shape& shape : kShapes) {
    check_all(spread_inputs(shape, kExtremes), random_exact(shape, 1), shape_to_string(shape));
  }
}

TEST(CudaActivationTest, SaturatedInputsGiveZeroNotNaN) {
  // Once expf(-x) overflows (x < -88.72) the sigmoid is 0 and silu, its
  // derivative and SwiGLU are (-)0, never NaN; both sides then agree to
  // kTiny. Tiny shapes get the values at their first entries.
  COLROW_REQUIRE_GPU();
  for (const Shape& shape : kShapes) {
    Tensor x = spread_inputs(shape, kBeyond);
    for (int64_t i = 0; x.numel() < 1000 && i < x.numel() && i < 5; ++i) x.data()[i] = kBeyond[i];
    check_all(x, random_exact(shape, 2), "saturated " + shape_to_string(shape));
  }
}

// SwiGLU on column blocks of a fused gate_up tensor (and its gradient): the
// bits of the same kernels on contiguous copies, fp32 and bf16, nothing
// outside the blocks written. Then every operand with a row stride of its
// own (up, dgate and dup each a block of a tensor of another width), so an
// operand read or written through another's stride shows. 70001 rows are
// more than the grid's 65535 in y, so blocks step over rows.
TEST(CudaActivationTest, SwigluTakesColumnBlocksOfFusedTensors) {
  COLROW_REQUIRE_GPU();
  const Device gpu = testing::test_gpu();
  const std::pair<int64_t, int64_t> shapes[] = {{37, 1031}, {70001, 3}};  // rows, f
  for (const auto& [rows, f] : shapes) {
    for (DType dtype : {DType::kF32, DType::kBF16}) {
      for (bool own_strides : {false, true}) {
        SCOPED_TRACE(std::string(dtype_name(dtype)) + ", " + std::to_string(rows) + " rows" +
                     (own_strides ? ", every operand its own stride" : ""));
        const Tensor gate_up = testing::copy_to(random_exact({rows, 2 * f + 3}, 5).to(dtype), gpu);
        const Tensor up_wide = testing::copy_to(random_exact({rows, f + 5}, 8).to(dtype), gpu);
        const Tensor gate = gate_up.slice(1, 0, f);
        const Tensor up = own_strides ? up_wide.slice(1, 4, f) : gate_up.slice(1, f, f);
        const Tensor dh = testing::copy_to(random_exact({rows, f}, 6).to(dtype), gpu);
        const Tensor gate_c = gate.clone(), up_c = up.clone();
        Tensor h_c = Tensor::empty({rows, f}, gpu, dtype), h = Tensor::empty({rows, f}, gpu, dtype);
        Tensor dgate_c = Tensor::empty({rows, f}, gpu, dtype),
               dup_c = Tensor::empty({rows, f}, gpu, dtype);
        gpu::swiglu_forward(gate_c, up_c, h_c);
        gpu::swiglu_backward(gate_c, up_c, dh, dgate_c, dup_c);
        gpu::swiglu_forward(gate, up, h);
        EXPECT_EQ(h.to_vector(), h_c.to_vector()) << "forward";
        // dgate and dup: blocks of one fused gradient, or dup in a tensor of its own width.
        Tensor grads = Tensor::full({rows, 2 * f + 3}, 7.0f, gpu, dtype);
        Tensor dup_wide = Tensor::full({rows, f + 2}, 7.0f, gpu, dtype);
        Tensor dgate = grads.slice(1, 0, f);
        Tensor dup = own_strides ? dup_wide.slice(1, 1, f) : grads.slice(1, f, f);
        gpu::swiglu_backward(gate, up, dh, dgate, dup);
        EXPECT_EQ(dgate.clone().to_vector(), dgate_c.to_vector()) << "dgate";
        EXPECT_EQ(dup.clone().to_vector(), dup_c.to_vector()) << "dup";
        const int64_t untouched = own_strides ? f + 3 : 3;
        for (float v : grads.slice(1, 2 * f + 3 - untouched, untouched).clone().to_vector()) {
          ASSERT_EQ(v, 7.0f);
        }
        if (own_strides) {
          for (float v : dup_wide.slice(1, 0, 1).clone().to_vector()) ASSERT_EQ(v, 7.0f);
          for (float v : dup_wide.slice(1, f + 1, 1).clone().to_vector()) ASSERT_EQ(v, 7.0f);
        }
      }
    }
  }
}

TEST(CudaActivationTest, ShapeAndContiguityErrors) {
  COLROW_REQUIRE_GPU();
  const Device gpu = testing::test_gpu();
  const Tensor x = Tensor::zeros({4, 6}, gpu);
  Tensor wrong = Tensor::zeros({6, 4}, gpu), ok = Tensor::zeros({4, 6}, gpu);
  Tensor ok2 = Tensor::zeros({4, 6}, gpu);
  EXPECT_THROW(gpu::gelu_forward(kernels::GeluForm::kTanh, x, wrong), InternalError);
  EXPECT_THROW(gpu::gelu_backward(kernels::GeluForm::kTanh, x, wrong, ok), InternalError);
  EXPECT_THROW(gpu::gelu_backward(kernels::GeluForm::kTanh, x, ok, wrong), InternalError);
  EXPECT_THROW(gpu::silu_forward(x, wrong), InternalError);
  EXPECT_THROW(gpu::silu_backward(x, ok, wrong), InternalError);
  EXPECT_THROW(gpu::swiglu_forward(x, wrong, ok), InternalError);
  EXPECT_THROW(gpu::swiglu_forward(x, ok, wrong), InternalError);
  EXPECT_THROW(gpu::swiglu_backward(x, ok, ok, ok2, wrong), InternalError);
  EXPECT_THROW(gpu::swiglu_backward(x, ok, wrong, ok2, ok), InternalError);
  // GELU and SiLU walk flat arrays: a column block (strided view) is refused.
  Tensor wide = Tensor::zeros({4, 12}, gpu);
  Tensor block = wide.slice(-1, 0, 6);
  EXPECT_THROW(gpu::gelu_forward(kernels::GeluForm::kTanh, block, ok), InternalError);
  EXPECT_THROW(gpu::silu_forward(x, block), InternalError);
  // Host operands are refused rather than read as device memory.
  if (!testing::kGpuIsHost) {
    const Tensor host_x = Tensor::zeros({4, 6});
    EXPECT_THROW(gpu::gelu_forward(kernels::GeluForm::kTanh, host_x, ok), InternalError);
  }
}

}  // namespace
}  // namespace colrow
