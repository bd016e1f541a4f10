// kernels::cuda::linear_forward and linear_weight_grads (cuBLASLt with the
// bias in its epilogue) against kernels::cpu's GEMM-then-bias on the same
// inputs: token, input and output counts that are no multiples of a tile (1,
// 37, 300; 1, 65, 257; 3, 129, 1000), operands that are column blocks of wider
// buffers, one of them starting 4 bytes past an aligned address (cuBLASLt must
// not assume 16-byte operands), accumulation into non-zero gradients, the
// same bits on a repeated run, and InternalError on mismatched shapes. bf16
// (mixed precision) on small integers: the sums are exact, so forward's one
// rounding of x w^T + b and the fp32 gradients equal the CPU's bit for bit.
#include "kernels/cuda/linear.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "colrow/core/error.h"
#include "kernels/cpu/gemm.h"
#include "kernels/cpu/linear.h"
#include "kernels/cuda/cuda_test_helpers.h"
#include "support/activation_error_model.h"
#include "support/gpu.h"

namespace colrow {
namespace {

using kernels::Trans;
using testing::higham_gamma;
using testing::random_exact;
using testing::same_bits;

// Epilogues on or off for a scope, back on after it, even when an ASSERT returns early.
struct FusedEpilogues {
  explicit FusedEpilogues(bool fused) { kernels::cuda::set_fused_epilogues(fused); }
  ~FusedEpilogues() { kernels::cuda::set_fused_epilogues(true); }
  FusedEpilogues(const FusedEpilogues&) = delete;
  FusedEpilogues& operator=(const FusedEpilogues&) = delete;
};

struct Dims {
  int64_t tokens, in, out;
  std::string name() const {
    return "tokens " + std::to_string(tokens) + ", in " + std::to_string(in) + ", out " +
           std::to_string(out);
  }
};
const Dims kDims[] = {{1, 1, 3}, {37, 65, 129}, {300, 257, 1000}, {129, 64, 3}, {2, 300, 65}};

// Both sides sum in fp32 in some order, with or without FMA: each is within
// gamma_{n+1} (sum |terms|) of the exact value (Higham eq. 3.5, the bias or
// the previous gradient one more term), so within twice that of each other.
void expect_within_sum_bound(const std::string& what, const Tensor& gpu, const Tensor& cpu,
                             const std::vector<double>& magnitude, int64_t terms) {
  const std::vector<float> g = gpu.to_vector(), c = cpu.to_vector();
  ASSERT_EQ(g.size(), c.size()) << what;
  ASSERT_EQ(g.size(), magnitude.size()) << what;
  int64_t violations = 0;
  for (size_t i = 0; i < g.size(); ++i) {
    const double bound = 2.0 * higham_gamma(terms + 1) * magnitude[i];
    if (!(std::fabs(static_cast<double>(g[i]) - c[i]) <= bound)) ++violations;
  }
  EXPECT_EQ(violations, 0) << what << ": " << violations << " of " << g.size()
                           << " elements past their bound";
}

// sum over k of |a[i, k] b[j, k]| (+ |extra[i, j]|), for [rows_a, K] and [rows_b, K] matrices.
std::vector<double> magnitudes(const std::vector<float>& a, const std::vector<float>& b,
                               int64_t rows_a, int64_t rows_b, int64_t inner,
                               const std::vector<float>& extra, bool extra_per_column) {
  std::vector<double> m(static_cast<size_t>(rows_a * rows_b), 0.0);
  for (int64_t i = 0; i < rows_a; ++i) {
    for (int64_t j = 0; j < rows_b; ++j) {
      double s = 0.0;
      for (int64_t k = 0; k < inner; ++k)
        s += std::fabs(double{a[i * inner + k]} * b[j * inner + k]);
      s += std::fabs(double{extra[extra_per_column ? j : i * rows_b + j]});
      m[i * rows_b + j] = s;
    }
  }
  return m;
}

std::vector<float> transpose(const std::vector<float>& a, int64_t rows, int64_t cols) {
  std::vector<float> t(a.size());
  for (int64_t i = 0; i < rows; ++i) {
    for (int64_t j = 0; j < cols; ++j) t[j * rows + i] = a[i * cols + j];
  }
  return t;
}

TEST(CudaLinearTest, ForwardMatchesCpu) {
  COLROW_REQUIRE_GPU();
  const Device gpu = testing::test_gpu();
  for (const Dims& d : kDims) {
    SCOPED_TRACE(d.name());
    const Tensor x = random_exact({d.tokens, d.in}, 1), w = random_exact({d.out, d.in}, 2);
    const Tensor b = random_exact({d.out}, 3);
    Tensor y_cpu = Tensor::empty({d.tokens, d.out});
    Tensor y_gpu = Tensor::full({d.tokens, d.out}, 7.0f, gpu);
    kernels::cpu::linear_forward(x, w, b, y_cpu);
    kernels::cuda::linear_forward(x.to(gpu), w.to(gpu), b.to(gpu), y_gpu);
    expect_within_sum_bound(
        "y", y_gpu, y_cpu,
        magnitudes(x.to_vector(), w.to_vector(), d.tokens, d.out, d.in, b.to_vector(), true),
        d.in + 1);
  }
}

TEST(CudaLinearTest, WeightGradsAccumulateAndMatchCpu) {
  COLROW_REQUIRE_GPU();
  const Device gpu = testing::test_gpu();
  for (const Dims& d : kDims) {
    SCOPED_TRACE(d.name());
    const Tensor dy = random_exact({d.tokens, d.out}, 4), x = random_exact({d.tokens, d.in}, 5);
    const Tensor dw0 = random_exact({d.out, d.in}, 6), db0 = random_exact({d.out}, 7);
    Tensor dw_cpu = dw0.clone(), db_cpu = db0.clone(), dw_gpu = dw0.to(gpu), db_gpu = db0.to(gpu);
    kernels::cpu::linear_weight_grads(dy, x, dw_cpu, db_cpu);
    kernels::cuda::linear_weight_grads(dy.to(gpu), x.to(gpu), dw_gpu, db_gpu);
    const std::vector<float> dy_t = transpose(dy.to_vector(), d.tokens, d.out);
    const std::vector<float> x_t = transpose(x.to_vector(), d.tokens, d.in);
    expect_within_sum_bound("dw", dw_gpu, dw_cpu,
                            magnitudes(dy_t, x_t, d.out, d.in, d.tokens, dw0.to_vector(), false),
                            d.tokens + 1);
    const std::vector<float> ones(static_cast<size_t>(d.tokens), 1.0f);
    expect_within_sum_bound("db", db_gpu, db_cpu,
                            magnitudes(dy_t, ones, d.out, 1, d.tokens, db0.to_vector(), false),
                            d.tokens + 1);
  }
}

// x and dy as column blocks of wider buffers, x starting one float past an
// aligned address; the neighbouring columns of y stay as they were.
TEST(CudaLinearTest, ColumnBlocksOfWiderBuffers) {
  COLROW_REQUIRE_GPU();
  const Device gpu = testing::test_gpu();
  const Dims d{37, 65, 129};
  const Tensor wide_x = random_exact({d.tokens, d.in + 3}, 8);
  const Tensor w = random_exact({d.out, d.in}, 9), b = random_exact({d.out}, 10);
  const Tensor wide_y = random_exact({d.tokens, d.out + 5}, 11);
  const Tensor x = wide_x.slice(1, 1, d.in);
  Tensor y_cpu_all = wide_y.clone(), y_gpu_all = wide_y.to(gpu);
  Tensor y_cpu = y_cpu_all.slice(1, 2, d.out), y_gpu = y_gpu_all.slice(1, 2, d.out);
  kernels::cpu::linear_forward(x, w, b, y_cpu);
  kernels::cuda::linear_forward(wide_x.to(gpu).slice(1, 1, d.in), w.to(gpu), b.to(gpu), y_gpu);
  expect_within_sum_bound(
      "y", y_gpu, y_cpu,
      magnitudes(x.clone().to_vector(), w.to_vector(), d.tokens, d.out, d.in, b.to_vector(), true),
      d.in + 1);
  const std::vector<float> before = wide_y.to_vector(), after = y_gpu_all.to_vector();
  for (int64_t t = 0; t < d.tokens; ++t) {
    for (int64_t j : {int64_t{0}, int64_t{1}, d.out + 2, d.out + 3, d.out + 4}) {
      ASSERT_EQ(after[t * (d.out + 5) + j], before[t * (d.out + 5) + j]) << "column " << j;
    }
  }
  const Tensor dy = y_gpu_all.slice(1, 2, d.out);  // a strided dy on the GPU
  Tensor dw_cpu = Tensor::zeros({d.out, d.in}), db_cpu = Tensor::zeros({d.out});
  Tensor dw_gpu = Tensor::zeros({d.out, d.in}, gpu), db_gpu = Tensor::zeros({d.out}, gpu);
  kernels::cpu::linear_weight_grads(y_cpu, x, dw_cpu, db_cpu);
  kernels::cuda::linear_weight_grads(dy, wide_x.to(gpu).slice(1, 1, d.in), dw_gpu, db_gpu);
  // dy differs between the devices by the forward's rounding: compare loosely
  // here (the tight bounds are the tests above); a layout error is O(1).
  const std::vector<float> g = dw_gpu.to_vector(), c = dw_cpu.to_vector();
  for (size_t i = 0; i < g.size(); ++i) ASSERT_NEAR(g[i], c[i], 1e-3 * (1.0 + std::fabs(c[i])));
  const std::vector<float> gb = db_gpu.to_vector(), cb = db_cpu.to_vector();
  for (size_t i = 0; i < gb.size(); ++i) ASSERT_NEAR(gb[i], cb[i], 1e-3 * (1.0 + std::fabs(cb[i])));
}

// A kept cuBLASLt plan serves every call of its shape: the second call, on
// other operands, bias and output (of the same alignments), must use those
// and not the first call's addresses.
TEST(CudaLinearTest, AKeptPlanTakesEachCallsOperands) {
  COLROW_REQUIRE_GPU();
  const Device gpu = testing::test_gpu();
  const Dims d{64, 96, 256};
  for (DType dtype : {DType::kF32, DType::kBF16}) {
    SCOPED_TRACE(dtype_name(dtype));
    std::vector<Tensor> y_gpu;
    std::vector<Tensor> y_cpu;
    for (uint32_t seed : {81u, 91u}) {
      const Tensor x = testing::random_integers({d.tokens, d.in}, seed, 3).to(dtype);
      const Tensor w = testing::random_integers({d.out, d.in}, seed + 1, 3).to(dtype);
      const Tensor b = testing::random_integers({d.out}, seed + 2, 3).to(dtype);
      y_cpu.push_back(Tensor::empty({d.tokens, d.out}, Device::cpu(), dtype));
      y_gpu.push_back(Tensor::empty({d.tokens, d.out}, gpu, dtype));
      kernels::cpu::linear_forward(x, w, b, y_cpu.back());
      kernels::cuda::linear_forward(x.to(gpu), w.to(gpu), b.to(gpu), y_gpu.back());
    }
    // Small integers: the fp32 sums are exact and bf16 rounds them once on
    // both devices, so each call equals the CPU's bit for bit.
    EXPECT_TRUE(same_bits(y_gpu[0], y_cpu[0])) << "first call";
    EXPECT_TRUE(same_bits(y_gpu[1], y_cpu[1])) << "second call, kept plan";
  }
}

// The separate kernels give the same results (the GELU pair's within a
// rounding), so the other tests pass even when cuBLASLt refuses every
// epilogue: here each bf16 call on an aligned
// shape (a multiple of 16 everywhere, the one cuBLASLt's bf16 kernels take)
// must run in cuBLASLt (the mixed-precision model's layers: forward's bias,
// the weight gradient's bias sums, the GELU pair), and none with the
// epilogues off. A refusal prints its "[cublaslt] note" line above.
TEST(CudaLinearTest, Bf16EpiloguesRunInCublasLt) {
  COLROW_REQUIRE_GPU();
  const Device gpu = testing::test_gpu();
  const Dims d{64, 96, 256};
  const auto bf16 = [&](const Shape& shape, uint32_t seed) {
    return testing::random_integers(shape, seed, 3).to(DType::kBF16).to(gpu);
  };
  const Tensor x = bf16({d.tokens, d.in}, 1), w = bf16({d.out, d.in}, 2), b = bf16({d.out}, 3);
  const Tensor dy = bf16({d.tokens, d.out}, 4);
  Tensor y = Tensor::empty({d.tokens, d.out}, gpu, DType::kBF16), pre = y.clone();
  Tensor dw = Tensor::zeros({d.out, d.in}, gpu), db = Tensor::zeros({d.out}, gpu);
  Tensor dx = Tensor::empty({d.tokens, d.in}, gpu, DType::kBF16);
  const Tensor pre_in = bf16({d.tokens, d.in}, 5);
  for (bool fused : {true, false}) {
    SCOPED_TRACE(fused ? "fused epilogues" : "separate kernels");
    const FusedEpilogues scope(fused);
    using kernels::cuda::Epilogue;
    using kernels::cuda::fused_epilogue_runs;
    std::map<Epilogue, int64_t> before;
    for (Epilogue e : kernels::cuda::kEpilogues) before[e] = fused_epilogue_runs(e);
    const auto ran = [&](Epilogue e) { return fused_epilogue_runs(e) - before[e]; };
    const int64_t once = fused ? 1 : 0;
    kernels::cuda::linear_forward(x, w, b, y);
    EXPECT_EQ(ran(Epilogue::kBias), once) << "bias";
    kernels::cuda::linear_weight_grads(dy, x, dw, db);
    EXPECT_EQ(ran(Epilogue::kBiasGrad), once) << "bias gradient";
    kernels::cuda::linear_gelu_forward(x, w, &b, pre, y);
    EXPECT_EQ(ran(Epilogue::kGelu), once) << "GELU, bias";
    kernels::cuda::linear_gelu_forward(x, w, nullptr, pre, y);
    EXPECT_EQ(ran(Epilogue::kGelu), 2 * once) << "GELU";
    kernels::cuda::gelu_input_grad(dy, w, pre_in, dx);
    EXPECT_EQ(ran(Epilogue::kGeluGrad), once) << "GELU gradient";
    EXPECT_EQ(ran(Epilogue::kBias), once) << "a GELU call fell back to the bias GEMM";
  }
}

TEST(CudaLinearTest, RepeatedRunsGiveTheSameBits) {
  COLROW_REQUIRE_GPU();
  const Device gpu = testing::test_gpu();
  const Dims d{300, 257, 1000};
  const Tensor x = random_exact({d.tokens, d.in}, 12).to(gpu),
               w = random_exact({d.out, d.in}, 13).to(gpu);
  const Tensor b = random_exact({d.out}, 14).to(gpu),
               dy = random_exact({d.tokens, d.out}, 15).to(gpu);
  Tensor y1 = Tensor::empty({d.tokens, d.out}, gpu), y2 = Tensor::empty({d.tokens, d.out}, gpu);
  kernels::cuda::linear_forward(x, w, b, y1);
  kernels::cuda::linear_forward(x, w, b, y2);
  EXPECT_TRUE(same_bits(y1, y2));
  Tensor dw1 = Tensor::zeros({d.out, d.in}, gpu), db1 = Tensor::zeros({d.out}, gpu);
  Tensor dw2 = Tensor::zeros({d.out, d.in}, gpu), db2 = Tensor::zeros({d.out}, gpu);
  kernels::cuda::linear_weight_grads(dy, x, dw1, db1);
  kernels::cuda::linear_weight_grads(dy, x, dw2, db2);
  EXPECT_TRUE(same_bits(dw1, dw2));
  EXPECT_TRUE(same_bits(db1, db2));
}

TEST(CudaLinearTest, ShapeErrorsAreInternalErrors) {
  COLROW_REQUIRE_GPU();
  const Device gpu = testing::test_gpu();
  const Tensor x = Tensor::zeros({4, 6}, gpu), w = Tensor::zeros({5, 6}, gpu);
  Tensor y = Tensor::empty({4, 5}, gpu), b = Tensor::zeros({5}, gpu);
  Tensor short_b = Tensor::zeros({4}, gpu), wide_y = Tensor::empty({4, 6}, gpu);
  EXPECT_THROW(kernels::cuda::linear_forward(x, w, short_b, y), InternalError);
  EXPECT_THROW(kernels::cuda::linear_forward(x, w, b, wide_y), InternalError);
  EXPECT_THROW(kernels::cuda::linear_forward(x.to(Device::cpu()), w, b, y), InternalError)
      << "x on the host";
  Tensor dw = Tensor::zeros({5, 6}, gpu);
  EXPECT_THROW(kernels::cuda::linear_weight_grads(y, x, dw, short_b), InternalError);
}

// Both ways: the epilogues, and the GEMM and bias kernels (--epilogues separate).
TEST(CudaLinearTest, Bf16SmallIntegersAreBitwiseEqualToCpu) {
  COLROW_REQUIRE_GPU();
  const Device gpu = testing::test_gpu();
  for (bool fused : {true, false})
    for (const Dims& d : kDims) {
      SCOPED_TRACE(fused ? "fused epilogues" : "separate kernels");
      const FusedEpilogues scope(fused);
      const Tensor x = testing::random_integers({d.tokens, d.in}, 41, 4).to(DType::kBF16);
      const Tensor w = testing::random_integers({d.out, d.in}, 42, 4).to(DType::kBF16);
      const Tensor b = testing::random_integers({d.out}, 43, 4).to(DType::kBF16);
      Tensor y_cpu = Tensor::empty({d.tokens, d.out}, Device::cpu(), DType::kBF16);
      Tensor y_gpu = Tensor::empty({d.tokens, d.out}, gpu, DType::kBF16);
      kernels::cpu::linear_forward(x, w, b, y_cpu);
      kernels::cuda::linear_forward(x.to(gpu), w.to(gpu), b.to(gpu), y_gpu);
      ASSERT_TRUE(same_bits(y_gpu, y_cpu)) << d.name();
      const Tensor dy = testing::random_integers({d.tokens, d.out}, 44, 4).to(DType::kBF16);
      Tensor dw_cpu = testing::random_integers({d.out, d.in}, 45, 4);
      Tensor db_cpu = testing::random_integers({d.out}, 46, 4);
      Tensor dw_gpu = dw_cpu.to(gpu), db_gpu = db_cpu.to(gpu);
      kernels::cpu::linear_weight_grads(dy, x, dw_cpu, db_cpu);
      kernels::cuda::linear_weight_grads(dy.to(gpu), x.to(gpu), dw_gpu, db_gpu);
      ASSERT_TRUE(same_bits(dw_gpu, dw_cpu)) << d.name();
      ASSERT_TRUE(same_bits(db_gpu, db_cpu)) << d.name();
    }
}

// ---- the GELU MLP's pair: linear_gelu_forward and gelu_input_grad

// Shapes where cuBLASLt's GELU epilogues apply in bf16 (out, for forward's
// aux, and in, for the input gradient's, multiples of 8) and where they do
// not (the kernels then run: 1 x 1 x 3, 37 x 65 x 129).
const Dims kGeluDims[] = {{1, 1, 3}, {37, 65, 129}, {64, 96, 256}, {300, 256, 1000}};

// Small integers, quarters for w: every product and sum is exact in fp32.
Tensor quarters(const Shape& shape, uint32_t seed) {
  Tensor t = testing::random_integers(shape, seed, 4);
  for (int64_t i = 0; i < t.numel(); ++i) t.data()[i] *= 0.25f;
  return t;
}

// fp32 runs the GEMM and the GELU kernels (no epilogue: kernels/cuda/linear.cpp
// says why). On exact sums the pre-activation and the product are the CPU's
// bits, and the activation and the gradient differ from the CPU's only by
// the GELU's evaluation: activation_error_model's bound on each side, as
// tests/kernels/cuda/activation_test.cpp derives.
TEST(CudaLinearTest, GeluPairMatchesCpuInFp32) {
  COLROW_REQUIRE_GPU();
  using namespace activation_error_model;
  const Device gpu = testing::test_gpu();
  for (bool with_bias : {true, false}) {
    for (const Dims& d : kGeluDims) {
      SCOPED_TRACE(d.name() + (with_bias ? ", bias" : ", no bias"));
      const Tensor x = testing::random_integers({d.tokens, d.in}, 51, 2);
      const Tensor w = quarters({d.out, d.in}, 52), b = quarters({d.out}, 53);
      Tensor pre_cpu = Tensor::empty({d.tokens, d.out}), y_cpu = Tensor::empty({d.tokens, d.out});
      Tensor pre_gpu = Tensor::full({d.tokens, d.out}, 7.0f, gpu), y_gpu = pre_gpu.clone();
      kernels::cpu::linear_gelu_forward(x, w, with_bias ? &b : nullptr, pre_cpu, y_cpu);
      const Tensor b_gpu = b.to(gpu);
      kernels::cuda::linear_gelu_forward(x.to(gpu), w.to(gpu), with_bias ? &b_gpu : nullptr,
                                         pre_gpu, y_gpu);
      ASSERT_TRUE(same_bits(pre_gpu, pre_cpu)) << "exact sums";
      const std::vector<float> pre = pre_cpu.to_vector(), g = y_gpu.to_vector(),
                               c = y_cpu.to_vector();
      for (size_t i = 0; i < g.size(); ++i) {
        ASSERT_LE(std::fabs(double{g[i]} - c[i]), 2 * kMargin * gelu_bound(pre[i])) << i;
      }
    }
    for (const Dims& d : kGeluDims) {
      SCOPED_TRACE(d.name() + ", input gradient");
      const Tensor dy = testing::random_integers({d.tokens, d.out}, 54, 2);
      const Tensor w = quarters({d.out, d.in}, 55);
      Tensor pre = testing::random_integers({d.tokens, d.in}, 56, 3);
      for (int64_t i = 0; i < pre.numel(); ++i) pre.data()[i] *= 0.5f;  // GELU's bend
      Tensor dx_cpu = Tensor::empty({d.tokens, d.in}),
             dx_gpu = Tensor::full({d.tokens, d.in}, 7.0f, gpu);
      Tensor product = Tensor::empty({d.tokens, d.in});
      kernels::cpu::gelu_input_grad(dy, w, pre, dx_cpu);
      kernels::cpu::gemm(Trans::kNo, Trans::kNo, 1.0f, dy, w, 0.0f, product);  // exact
      kernels::cuda::gelu_input_grad(dy.to(gpu), w.to(gpu), pre.to(gpu), dx_gpu);
      const std::vector<float> v = pre.to_vector(), p = product.to_vector(), g = dx_gpu.to_vector(),
                               c = dx_cpu.to_vector();
      for (size_t i = 0; i < g.size(); ++i) {
        const double bound = 2 * kMargin * std::fabs(p[i]) *
                             (gelu_grad_bound(v[i]) + kU * std::fabs(gelu_grad(v[i])));
        ASSERT_LE(std::fabs(double{g[i]} - c[i]), bound) << i;
      }
    }
  }
}

// bf16 through the epilogues where they apply, against the exact values of
// the same bf16 inputs (double), with u = 2^-8, bf16's unit roundoff:
//   the sums: fp32 accumulation, within S = 2 gamma_{k+1} sum |terms| (twice
//     Higham's bound: the tensor cores' order and truncation);
//   a bf16 rounding of a value within e of exact v: within e + u (|v| + e);
//   pre-activation: the sum, rounded once;
//   activation: GELU's slope (at most 1.13) times its input's error (the
//     epilogue reads the fp32 sum, the kernels the rounded pre-activation:
//     the latter bounds both), plus cuBLASLt's GELU, whose accuracy is not
//     documented: 2^-11 |pre| allows tanh.approx.f32 (2^-11 relative); then
//     rounded once;
//   input gradient: gelu'(pre) (at most 1.13) times the product's error (the
//     kernels round the product first), plus 2^-9 |product| for the
//     epilogue's derivative (tanh.approx's error through gelu' for |pre| <=
//     2); then rounded once.
// A transposed operand or a misplaced aux is off by O(1).
constexpr double kBf16U = 0x1p-8;
constexpr double kGeluSlope = 1.13;  // max |gelu_tanh'|: 1.129 near x = 1.5

double rounded_bf16(double error, double exact) {
  return error + kBf16U * (std::fabs(exact) + error);
}

// Both ways: through the epilogues, and the GEMM and GELU kernels (--epilogues separate).
TEST(CudaLinearTest, GeluPairInBf16IsWithinItsRoundings) {
  COLROW_REQUIRE_GPU();
  using activation_error_model::gelu;
  using activation_error_model::gelu_grad;
  const Device gpu = testing::test_gpu();
  for (bool fused : {true, false}) {
    SCOPED_TRACE(fused ? "fused epilogues" : "separate kernels");
    const FusedEpilogues scope(fused);
    for (bool with_bias : {true, false}) {
      for (const Dims& d : kGeluDims) {
        SCOPED_TRACE(d.name() + (with_bias ? ", bias" : ", no bias"));
        const Tensor x = random_exact({d.tokens, d.in}, 61).to(DType::kBF16);
        const Tensor w = random_exact({d.out, d.in}, 62).to(DType::kBF16);
        const Tensor b = random_exact({d.out}, 63).to(DType::kBF16);
        Tensor pre = Tensor::full({d.tokens, d.out}, 7.0f, gpu, DType::kBF16), y = pre.clone();
        const Tensor b_gpu = b.to(gpu);
        kernels::cuda::linear_gelu_forward(x.to(gpu), w.to(gpu), with_bias ? &b_gpu : nullptr, pre,
                                           y);
        const std::vector<float> xv = x.to(DType::kF32).to_vector(),
                                 wv = w.to(DType::kF32).to_vector(),
                                 bv = b.to(DType::kF32).to_vector();
        const std::vector<float> pv = pre.to(DType::kF32).to_vector(),
                                 yv = y.to(DType::kF32).to_vector();
        for (int64_t t = 0; t < d.tokens; ++t) {
          for (int64_t o = 0; o < d.out; ++o) {
            double sum = with_bias ? bv[o] : 0.0, mag = std::fabs(sum);
            for (int64_t i = 0; i < d.in; ++i) {
              sum += double{xv[t * d.in + i]} * wv[o * d.in + i];
              mag += std::fabs(double{xv[t * d.in + i]} * wv[o * d.in + i]);
            }
            const double sums = 2 * higham_gamma(d.in + 1) * mag;
            const size_t k = static_cast<size_t>(t * d.out + o);
            const double pre_bound = rounded_bf16(sums, sum);
            ASSERT_LE(std::fabs(pv[k] - sum), pre_bound) << "pre " << t << ", " << o;
            const double y_bound =
                rounded_bf16(kGeluSlope * pre_bound + 0x1p-11 * std::fabs(sum), gelu(sum));
            ASSERT_LE(std::fabs(yv[k] - gelu(sum)), y_bound) << "y " << t << ", " << o;
          }
        }
      }
    }
    for (const Dims& d : kGeluDims) {
      SCOPED_TRACE(d.name() + ", input gradient");
      const Tensor dy = random_exact({d.tokens, d.out}, 64).to(DType::kBF16);
      const Tensor w = random_exact({d.out, d.in}, 65).to(DType::kBF16);
      Tensor pre32 = random_exact({d.tokens, d.in}, 66);
      for (int64_t i = 0; i < pre32.numel(); ++i) pre32.data()[i] *= 2.0f;  // [-2, 2)
      const Tensor pre = pre32.to(DType::kBF16);
      Tensor dx = Tensor::full({d.tokens, d.in}, 7.0f, gpu, DType::kBF16);
      kernels::cuda::gelu_input_grad(dy.to(gpu), w.to(gpu), pre.to(gpu), dx);
      const std::vector<float> dyv = dy.to(DType::kF32).to_vector(),
                               wv = w.to(DType::kF32).to_vector(),
                               pv = pre.to(DType::kF32).to_vector(),
                               dxv = dx.to(DType::kF32).to_vector();
      for (int64_t t = 0; t < d.tokens; ++t) {
        for (int64_t i = 0; i < d.in; ++i) {
          double sum = 0.0, mag = 0.0;
          for (int64_t o = 0; o < d.out; ++o) {
            sum += double{dyv[t * d.out + o]} * wv[o * d.in + i];
            mag += std::fabs(double{dyv[t * d.out + o]} * wv[o * d.in + i]);
          }
          const size_t k = static_cast<size_t>(t * d.in + i);
          const double want = gelu_grad(pv[k]) * sum;
          const double product = rounded_bf16(2 * higham_gamma(d.out) * mag, sum);
          const double bound = rounded_bf16(kGeluSlope * product + 0x1p-9 * std::fabs(sum), want);
          ASSERT_LE(std::fabs(dxv[k] - want), bound) << "dx " << t << ", " << i;
        }
      }
    }
  }
}

// The epilogues are deterministic too: the same bits on a repeated run.
TEST(CudaLinearTest, GeluPairRepeatsItsBits) {
  COLROW_REQUIRE_GPU();
  const Device gpu = testing::test_gpu();
  const Dims d{300, 256, 1000};
  const Tensor x = random_exact({d.tokens, d.in}, 71).to(DType::kBF16).to(gpu);
  const Tensor w = random_exact({d.out, d.in}, 72).to(DType::kBF16).to(gpu);
  const Tensor b = random_exact({d.out}, 73).to(DType::kBF16).to(gpu);
  Tensor pre1 = Tensor::empty({d.tokens, d.out}, gpu, DType::kBF16), pre2 = pre1.clone();
  Tensor y1 = pre1.clone(), y2 = pre1.clone();
  kernels::cuda::linear_gelu_forward(x, w, &b, pre1, y1);
  kernels::cuda::linear_gelu_forward(x, w, &b, pre2, y2);
  EXPECT_TRUE(same_bits(pre1, pre2));
  EXPECT_TRUE(same_bits(y1, y2));
  const Tensor w_down = random_exact({d.in, d.out}, 74).to(DType::kBF16).to(gpu);
  const Tensor dy = random_exact({d.tokens, d.in}, 75).to(DType::kBF16).to(gpu);
  Tensor dx1 = Tensor::empty({d.tokens, d.out}, gpu, DType::kBF16), dx2 = dx1.clone();
  kernels::cuda::gelu_input_grad(dy, w_down, pre1, dx1);
  kernels::cuda::gelu_input_grad(dy, w_down, pre1, dx2);
  EXPECT_TRUE(same_bits(dx1, dx2));
}

}  // namespace
}  // namespace colrow
