// kernels::cuda LayerNorm and RMSNorm against kernels::cpu on the same inputs:
// y, mean, rstd, dx and the accumulated parameter gradients within twice the
// fp32 error bounds of tests/kernels/cpu/norm_test.cpp, over odd token counts
// (1 .. 1000, around the 128-token gradient chunks) and widths (1 .. 1000),
// centered rows, a constant row and a large mean offset (the two-pass
// variance); the same gradient bits on a repeated run (no atomics); strided
// rows with untouched neighbours; zero tokens; InternalError on bad shapes;
// the fused residual add against the separate add and norm, bit for bit.
// Built twice: on a GPU (label gpu), and with COLROW_WARP_EMULATION, where
// the same kernels run on the CPU through the warp emulation
// (emulated/norm.h and residual.h), so CI checks them without a GPU.
#ifdef COLROW_WARP_EMULATION
#include "kernels/cuda/emulated/norm.h"
#include "kernels/cuda/emulated/residual.h"
#else
#include "kernels/cuda/norm.h"
#include "kernels/cuda/residual.h"
#endif

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "colrow/core/error.h"
#include "kernels/cpu/norm.h"
#include "kernels/cuda/cuda_test_helpers.h"
#include "support/gpu.h"
#include "support/norm_reference.h"

namespace colrow {
namespace {

#ifdef COLROW_WARP_EMULATION
namespace gpu = testing::emulated;
#else
namespace gpu = kernels::cuda;
#endif

using testing::kU;
using testing::random_exact;
using testing::to_matrix;

using reference::Matrix;

// Error factors c of the CPU test: each implementation is within c u M of the
// exact value (M from norm_reference.h), counting the fp32 roundings on the
// longest path with row sums in double. The CUDA kernels evaluate the same
// expressions (FMA contraction only removes roundings; double sums in another
// order differ by ~2^-53 relative, far below u), so both sides meet the bound
// and differ by at most 2 c u M.
constexpr double kLnY = 6, kLnDx = 15, kLnDgamma = 6, kLnDbeta = 2;
constexpr double kRmsY = 4, kRmsDx = 11, kRmsDw = 5;
constexpr double kStats = 2;  // mean, rstd: one rounding of a double-accurate value, plus a spare

Matrix absolute(Matrix m) {
  for (double& v : m) v = std::fabs(v);
  return m;
}

// |cuda - cpu| <= 2 factor u mag + extra, element-wise (fails on NaN).
void expect_agree(const std::string& what, const Tensor& cuda_out, const Tensor& cpu_out,
                  const Matrix& mag, double factor, const Matrix& extra = {}) {
  const std::vector<float> got = cuda_out.to_vector(), want = cpu_out.to_vector();
  ASSERT_EQ(got.size(), want.size()) << what;
  ASSERT_EQ(got.size(), mag.size()) << what;
  int failures = 0;
  for (size_t i = 0; i < got.size() && failures < 5; ++i) {
    const double bound = 2 * factor * kU * mag[i] + (extra.empty() ? 0.0 : extra[i]);
    if (!(std::fabs(static_cast<double>(got[i]) - want[i]) <= bound)) {
      ADD_FAILURE() << what << " at " << i << ": cuda " << got[i] << ", cpu " << want[i]
                    << ", bound " << bound;
      ++failures;
    }
  }
}

// Gradients accumulated onto g0: each side returns fl(g0 + s) with s within
// c u M of the exact sum S, so it is within c u M + u (|g0| + M) of g0 + S
// (|S| <= M); the two sides differ by at most twice that.
void expect_accumulated(const std::string& what, const Tensor& cuda_grad, const Tensor& cpu_grad,
                        const Tensor& g0, const Matrix& mag, double factor) {
  const Matrix g0_abs = absolute(to_matrix(g0));
  Matrix extra(mag.size());
  for (size_t i = 0; i < mag.size(); ++i) extra[i] = 2 * kU * (g0_abs[i] + mag[i]);
  expect_agree(what, cuda_grad, cpu_grad, mag, factor, extra);
}

struct Dims {
  int64_t tokens, d;
};
const Dims kDims[] = {{1, 3}, {2, 1}, {7, 65}, {37, 257}, {129, 1000}, {300, 65}, {1000, 33}};

struct Case {
  float offset;
  bool constant_row;
  const char* name;
};
const Case kCases[] = {
    {0.0f, false, "centered"}, {0.0f, true, "constant row"}, {100.0f, false, "offset 100"}};

Tensor make_input(const Dims& dims, uint32_t seed, const Case& c) {
  Tensor x = random_exact({dims.tokens, dims.d}, seed, c.offset);
  for (int64_t j = 0; c.constant_row && j < dims.d; ++j) x(0, j) = c.offset + 0.25f;
  return x;
}

std::string label(const Case& c, const Dims& dims) {
  return std::string(c.name) + " [" + std::to_string(dims.tokens) + ", " + std::to_string(dims.d) +
         "]";
}

TEST(CudaNormTest, LayerNormMatchesCpu) {
  COLROW_REQUIRE_GPU();
  const Device gpu = testing::test_gpu();
  const float eps = 1e-5f;
  for (const Case& c : kCases) {
    for (const Dims& dims : kDims) {
      SCOPED_TRACE(label(c, dims));
      const Shape rows = {dims.tokens, dims.d};
      const Tensor x = make_input(dims, 1, c);
      const Tensor gamma = random_exact({dims.d}, 2), beta = random_exact({dims.d}, 3);
      const Tensor dy = random_exact(rows, 4);
      const Tensor dgamma0 = random_exact({dims.d}, 5), dbeta0 = random_exact({dims.d}, 6);
      Tensor y = Tensor::empty(rows), dx = Tensor::empty(rows);
      Tensor mean = Tensor::empty({dims.tokens}), rstd = Tensor::empty({dims.tokens});
      Tensor dgamma = dgamma0.clone(), dbeta = dbeta0.clone();
      kernels::cpu::layer_norm_forward(x, gamma, beta, eps, y, mean, rstd);
      kernels::cpu::layer_norm_backward(x, gamma, mean, rstd, dy, dx, dgamma, dbeta);

      const Tensor x_g = testing::copy_to(x, gpu), gamma_g = testing::copy_to(gamma, gpu),
                   beta_g = testing::copy_to(beta, gpu);
      const Tensor dy_g = testing::copy_to(dy, gpu);
      Tensor y_g = Tensor::empty(rows, gpu), dx_g = Tensor::empty(rows, gpu);
      Tensor mean_g = Tensor::empty({dims.tokens}, gpu), rstd_g = Tensor::empty({dims.tokens}, gpu);
      Tensor dgamma_g = testing::copy_to(dgamma0, gpu), dbeta_g = testing::copy_to(dbeta0, gpu);
      gpu::layer_norm_forward(x_g, gamma_g, beta_g, eps, y_g, mean_g, rstd_g);
      gpu::layer_norm_backward(x_g, gamma_g, mean_g, rstd_g, dy_g, dx_g, dgamma_g, dbeta_g);

      const auto ref = reference::layer_norm(to_matrix(x), to_matrix(gamma), to_matrix(beta),
                                             to_matrix(dy), dims.tokens, dims.d, eps);
      expect_agree("mean", mean_g, mean, absolute(ref.mean), kStats);
      expect_agree("rstd", rstd_g, rstd, ref.rstd, kStats);
      expect_agree("y", y_g, y, ref.y_mag, kLnY);
      expect_agree("dx", dx_g, dx, ref.dx_mag, kLnDx);
      expect_accumulated("dgamma", dgamma_g, dgamma, dgamma0, ref.dgamma_mag, kLnDgamma);
      expect_accumulated("dbeta", dbeta_g, dbeta, dbeta0, ref.dbeta_mag, kLnDbeta);

      // The same inputs give the same gradient bits: no atomics, fixed order.
      Tensor dgamma_again = testing::copy_to(dgamma0, gpu),
             dbeta_again = testing::copy_to(dbeta0, gpu);
      gpu::layer_norm_backward(x_g, gamma_g, mean_g, rstd_g, dy_g, dx_g, dgamma_again, dbeta_again);
      EXPECT_EQ(dgamma_again.to_vector(), dgamma_g.to_vector());
      EXPECT_EQ(dbeta_again.to_vector(), dbeta_g.to_vector());
    }
  }
}

TEST(CudaNormTest, RmsNormMatchesCpu) {
  COLROW_REQUIRE_GPU();
  const Device gpu = testing::test_gpu();
  const float eps = 1e-6f;
  for (const Case& c : kCases) {
    for (const Dims& dims : kDims) {
      SCOPED_TRACE(label(c, dims));
      const Shape rows = {dims.tokens, dims.d};
      const Tensor x = make_input(dims, 7, c);
      const Tensor weight = random_exact({dims.d}, 8), dy = random_exact(rows, 9);
      const Tensor dweight0 = random_exact({dims.d}, 10);
      Tensor y = Tensor::empty(rows), dx = Tensor::empty(rows);
      Tensor rstd = Tensor::empty({dims.tokens}), dweight = dweight0.clone();
      kernels::cpu::rms_norm_forward(x, weight, eps, y, rstd);
      kernels::cpu::rms_norm_backward(x, weight, rstd, dy, dx, dweight);

      const Tensor x_g = testing::copy_to(x, gpu), weight_g = testing::copy_to(weight, gpu),
                   dy_g = testing::copy_to(dy, gpu);
      Tensor y_g = Tensor::empty(rows, gpu), dx_g = Tensor::empty(rows, gpu);
      Tensor rstd_g = Tensor::empty({dims.tokens}, gpu),
             dweight_g = testing::copy_to(dweight0, gpu);
      gpu::rms_norm_forward(x_g, weight_g, eps, y_g, rstd_g);
      gpu::rms_norm_backward(x_g, weight_g, rstd_g, dy_g, dx_g, dweight_g);

      const auto ref = reference::rms_norm(to_matrix(x), to_matrix(weight), to_matrix(dy),
                                           dims.tokens, dims.d, eps);
      expect_agree("rstd", rstd_g, rstd, ref.rstd, kStats);
      expect_agree("y", y_g, y, ref.y_mag, kRmsY);
      expect_agree("dx", dx_g, dx, ref.dx_mag, kRmsDx);
      expect_accumulated("dweight", dweight_g, dweight, dweight0, ref.dgamma_mag, kRmsDw);

      Tensor dweight_again = testing::copy_to(dweight0, gpu);
      gpu::rms_norm_backward(x_g, weight_g, rstd_g, dy_g, dx_g, dweight_again);
      EXPECT_EQ(dweight_again.to_vector(), dweight_g.to_vector());
    }
  }
}

// A one-pass fp32 variance at offset 1000 and spread 2^-10 loses every digit;
// the two-pass double statistics keep rstd to fp32 rounding on both sides.
TEST(CudaNormTest, VarianceSurvivesALargeOffset) {
  COLROW_REQUIRE_GPU();
  const Device gpu = testing::test_gpu();
  constexpr int64_t kTokens = 3, kD = 96;
  Tensor x = random_exact({kTokens, kD}, 11);
  for (int64_t i = 0; i < x.numel(); ++i) x.data()[i] = 1000.0f + x.data()[i] * 0x1p-10f;
  const Tensor gamma = Tensor::full({kD}, 1.0f), beta = Tensor::zeros({kD});
  Tensor y = Tensor::empty({kTokens, kD}), mean = Tensor::empty({kTokens});
  Tensor rstd = Tensor::empty({kTokens});
  kernels::cpu::layer_norm_forward(x, gamma, beta, 0.0f, y, mean, rstd);
  Tensor y_g = Tensor::empty({kTokens, kD}, gpu), mean_g = Tensor::empty({kTokens}, gpu);
  Tensor rstd_g = Tensor::empty({kTokens}, gpu);
  gpu::layer_norm_forward(testing::copy_to(x, gpu), testing::copy_to(gamma, gpu),
                          testing::copy_to(beta, gpu), 0.0f, y_g, mean_g, rstd_g);
  const auto ref = reference::layer_norm(to_matrix(x), to_matrix(gamma), to_matrix(beta),
                                         to_matrix(y), kTokens, kD, 0.0);
  expect_agree("rstd", rstd_g, rstd, ref.rstd, kStats);
}

// x, dy, y and dx as column blocks of wider GPU matrices (row stride > d).
TEST(CudaNormTest, StridedRows) {
  COLROW_REQUIRE_GPU();
  const Device gpu = testing::test_gpu();
  constexpr int64_t kTokens = 37, kD = 65, kWide = 100;
  const Tensor wide_x = random_exact({kTokens, kWide}, 12);
  const Tensor wide_dy = random_exact({kTokens, kWide}, 13);
  const Tensor gamma = random_exact({kD}, 14), beta = random_exact({kD}, 15);
  const Tensor x = wide_x.slice(1, 20, kD).clone(), dy = wide_dy.slice(1, 5, kD).clone();
  const Tensor x_g = testing::copy_to(wide_x, gpu).slice(1, 20, kD),
               dy_g = testing::copy_to(wide_dy, gpu).slice(1, 5, kD);
  Tensor wide_y_g = Tensor::zeros({kTokens, kWide}, gpu),
         wide_dx_g = Tensor::zeros({kTokens, kWide}, gpu);
  Tensor y_g = wide_y_g.slice(1, 25, kD), dx_g = wide_dx_g.slice(1, 10, kD);
  ASSERT_GT(x_g.row_stride(), kD);

  Tensor y = Tensor::empty({kTokens, kD}), dx = Tensor::empty({kTokens, kD});
  Tensor mean = Tensor::empty({kTokens}), rstd = Tensor::empty({kTokens});
  Tensor dgamma = Tensor::zeros({kD}), dbeta = Tensor::zeros({kD});
  kernels::cpu::layer_norm_forward(x, gamma, beta, 1e-5f, y, mean, rstd);
  kernels::cpu::layer_norm_backward(x, gamma, mean, rstd, dy, dx, dgamma, dbeta);
  Tensor mean_g = Tensor::empty({kTokens}, gpu), rstd_g = Tensor::empty({kTokens}, gpu);
  Tensor dgamma_g = Tensor::zeros({kD}, gpu), dbeta_g = Tensor::zeros({kD}, gpu);
  const Tensor gamma_g = testing::copy_to(gamma, gpu);
  gpu::layer_norm_forward(x_g, gamma_g, testing::copy_to(beta, gpu), 1e-5f, y_g, mean_g, rstd_g);
  gpu::layer_norm_backward(x_g, gamma_g, mean_g, rstd_g, dy_g, dx_g, dgamma_g, dbeta_g);
  const auto ref = reference::layer_norm(to_matrix(x), to_matrix(gamma), to_matrix(beta),
                                         to_matrix(dy), kTokens, kD, 1e-5f);
  expect_agree("y", y_g, y, ref.y_mag, kLnY);
  expect_agree("dx", dx_g, dx, ref.dx_mag, kLnDx);
  expect_agree("dgamma", dgamma_g, dgamma, ref.dgamma_mag, kLnDgamma);
  expect_agree("dbeta", dbeta_g, dbeta, ref.dbeta_mag, kLnDbeta);
  // Nothing outside the views was written.
  const Tensor wide_y = wide_y_g.to(Device::cpu()), wide_dx = wide_dx_g.to(Device::cpu());
  for (int64_t t = 0; t < kTokens; ++t) {
    for (int64_t j = 0; j < kWide; ++j) {
      if (j < 25 || j >= 25 + kD) {
        ASSERT_EQ(wide_y(t, j), 0.0f) << t << "," << j;
      }
      if (j < 10 || j >= 10 + kD) {
        ASSERT_EQ(wide_dx(t, j), 0.0f) << t << "," << j;
      }
    }
  }

  Tensor rms_y_g = wide_y_g.slice(1, 0, kD), rms_dx_g = wide_dx_g.slice(1, 0, kD);
  Tensor dweight = Tensor::zeros({kD}), dweight_g = Tensor::zeros({kD}, gpu);
  kernels::cpu::rms_norm_forward(x, gamma, 1e-6f, y, rstd);
  kernels::cpu::rms_norm_backward(x, gamma, rstd, dy, dx, dweight);
  gpu::rms_norm_forward(x_g, gamma_g, 1e-6f, rms_y_g, rstd_g);
  gpu::rms_norm_backward(x_g, gamma_g, rstd_g, dy_g, rms_dx_g, dweight_g);
  const auto rms =
      reference::rms_norm(to_matrix(x), to_matrix(gamma), to_matrix(dy), kTokens, kD, 1e-6f);
  expect_agree("rms y", rms_y_g, y, rms.y_mag, kRmsY);
  expect_agree("rms dx", rms_dx_g, dx, rms.dx_mag, kRmsDx);
  expect_agree("rms dweight", dweight_g, dweight, rms.dgamma_mag, kRmsDw);
}

// The parameter gradients read 16 bytes of x and dy at a time where their
// rows allow it, one element otherwise; each feature's sum keeps the same
// order either way (column_sums.cuh), so the two give the same bits, in fp32
// and bf16, for both norms. The scalar side reads x and dy as column blocks
// of wider matrices that start one element in (rows off 16 bytes). Sums in
// double of random values round to the same fp32 in nearly any order, so dy's
// tokens 0 and 1 are +2^60 and -2^60: each swallows what its thread adds to
// it, and the sums then depend on the order of the threads' partials.
TEST(CudaNormTest, ParameterGradientsReadInVectorsGiveTheScalarReadsBits) {
  COLROW_REQUIRE_GPU();
  const Device gpu = testing::test_gpu();
  const Dims dims_in_vectors[] = {{1, 8}, {129, 1000}, {257, 264}, {1000, 40}};
  for (DType dtype : {DType::kF32, DType::kBF16}) {
    for (const Dims& dims : dims_in_vectors) {
      SCOPED_TRACE(std::string(dtype_name(dtype)) + label(kCases[0], dims));
      const int64_t t = dims.tokens, d = dims.d;
      const Shape rows = {t, d};
      const Tensor x = testing::copy_to(random_exact(rows, 41, 2.0f).to(dtype), gpu);
      Tensor dy_host = random_exact(rows, 42);
      for (int64_t j = 0; t >= 2 && j < d; ++j) {
        dy_host(0, j) = 0x1p60f;
        dy_host(1, j) = -0x1p60f;
      }
      const Tensor dy = testing::copy_to(dy_host.to(dtype), gpu);
      const Tensor gamma = testing::copy_to(random_exact({d}, 43).to(dtype), gpu);
      const Tensor beta = testing::copy_to(random_exact({d}, 44).to(dtype), gpu);
      Tensor wide_x = Tensor::zeros({t, d + 1}, gpu, dtype);
      Tensor wide_dy = Tensor::zeros({t, d + 1}, gpu, dtype);
      Tensor x_off = wide_x.slice(1, 1, d), dy_off = wide_dy.slice(1, 1, d);
      x_off.copy_from(x);
      dy_off.copy_from(dy);
      Tensor y = Tensor::empty(rows, gpu, dtype), dx = Tensor::empty(rows, gpu, dtype);
      Tensor mean = Tensor::empty({t}, gpu), rstd = Tensor::empty({t}, gpu);
      for (bool layer : {true, false}) {
        SCOPED_TRACE(layer ? "LayerNorm" : "RMSNorm");
        Tensor dg_vec = Tensor::zeros({d}, gpu), dg_one = Tensor::zeros({d}, gpu);
        Tensor db_vec = Tensor::zeros({d}, gpu), db_one = Tensor::zeros({d}, gpu);
        if (layer) {
          gpu::layer_norm_forward(x, gamma, beta, 1e-5f, y, mean, rstd);
          gpu::layer_norm_backward(x, gamma, mean, rstd, dy, dx, dg_vec, db_vec);
          gpu::layer_norm_backward(x_off, gamma, mean, rstd, dy_off, dx, dg_one, db_one);
        } else {
          gpu::rms_norm_forward(x, gamma, 1e-6f, y, rstd);
          gpu::rms_norm_backward(x, gamma, rstd, dy, dx, dg_vec);
          gpu::rms_norm_backward(x_off, gamma, rstd, dy_off, dx, dg_one);
        }
        EXPECT_EQ(dg_vec.to_vector(), dg_one.to_vector());
        EXPECT_EQ(db_vec.to_vector(), db_one.to_vector());
        EXPECT_NE(dg_vec.to_vector(), std::vector<float>(d, 0.0f));  // it did sum
      }
    }
  }
}

// The residual add fused into the norms' pass against the separate CUDA add
// and norm, on the GPU, bit for bit in fp32 and bf16 (__fadd_rn keeps the
// add out of any multiply-add): the sum, y, the statistics, dx and the
// parameter gradients; the fused side on column blocks of wider matrices.
TEST(CudaNormTest, FusedResidualAddGivesTheSeparateAddsBits) {
  COLROW_REQUIRE_GPU();
  const Device gpu = testing::test_gpu();
  for (DType dtype : {DType::kF32, DType::kBF16}) {
    for (const Dims& dims : kDims) {
      SCOPED_TRACE(std::string(dtype_name(dtype)) + label(kCases[0], dims));
      const int64_t t = dims.tokens, d = dims.d, wide = d + 9;
      const Shape rows = {t, d};
      const Tensor x = testing::copy_to(random_exact(rows, 31).to(dtype), gpu);
      const Tensor residual = testing::copy_to(random_exact(rows, 32, 3.0f).to(dtype), gpu);
      const Tensor dy = testing::copy_to(random_exact(rows, 33).to(dtype), gpu);
      const Tensor dresidual = testing::copy_to(random_exact(rows, 34).to(dtype), gpu);
      const Tensor gamma = testing::copy_to(random_exact({d}, 35).to(dtype), gpu);
      const Tensor beta = testing::copy_to(random_exact({d}, 36).to(dtype), gpu);
      Tensor wide_residual = Tensor::zeros({t, wide}, gpu, dtype);
      Tensor wide_sum = Tensor::zeros({t, wide}, gpu, dtype);
      Tensor wide_dresidual = Tensor::zeros({t, wide}, gpu, dtype);
      Tensor residual_view = wide_residual.slice(1, 4, d), sum = wide_sum.slice(1, 7, d);
      Tensor dresidual_view = wide_dresidual.slice(1, 2, d);
      residual_view.copy_from(residual);
      dresidual_view.copy_from(dresidual);
      Tensor separate_sum = Tensor::empty(rows, gpu, dtype);
      gpu::add(x, residual, separate_sum);
      for (bool layer : {true, false}) {
        SCOPED_TRACE(layer ? "LayerNorm" : "RMSNorm");
        Tensor y1 = Tensor::empty(rows, gpu, dtype), y2 = Tensor::empty(rows, gpu, dtype);
        Tensor mean1 = Tensor::empty({t}, gpu), mean2 = Tensor::empty({t}, gpu);
        Tensor rstd1 = Tensor::empty({t}, gpu), rstd2 = Tensor::empty({t}, gpu);
        Tensor norm_dx = Tensor::empty(rows, gpu, dtype);
        Tensor dx1 = Tensor::empty(rows, gpu, dtype), dx2 = Tensor::empty(rows, gpu, dtype);
        Tensor dg1 = Tensor::zeros({d}, gpu), dg2 = Tensor::zeros({d}, gpu);
        Tensor db1 = Tensor::zeros({d}, gpu), db2 = Tensor::zeros({d}, gpu);
        if (layer) {
          gpu::layer_norm_forward(separate_sum, gamma, beta, 1e-5f, y1, mean1, rstd1);
          gpu::layer_norm_forward(x, gamma, beta, 1e-5f, y2, mean2, rstd2, &residual_view, &sum);
          gpu::layer_norm_backward(separate_sum, gamma, mean1, rstd1, dy, norm_dx, dg1, db1);
          gpu::layer_norm_backward(sum, gamma, mean2, rstd2, dy, dx2, dg2, db2, &dresidual_view);
        } else {
          gpu::rms_norm_forward(separate_sum, gamma, 1e-6f, y1, rstd1);
          gpu::rms_norm_forward(x, gamma, 1e-6f, y2, rstd2, &residual_view, &sum);
          gpu::rms_norm_backward(separate_sum, gamma, rstd1, dy, norm_dx, dg1);
          gpu::rms_norm_backward(sum, gamma, rstd2, dy, dx2, dg2, &dresidual_view);
        }
        gpu::add(dresidual, norm_dx, dx1);
        EXPECT_EQ(sum.to_vector(), separate_sum.to_vector());
        EXPECT_EQ(y2.to_vector(), y1.to_vector());
        EXPECT_EQ(rstd2.to_vector(), rstd1.to_vector());
        if (layer) {
          EXPECT_EQ(mean2.to_vector(), mean1.to_vector());
        }
        EXPECT_EQ(dx2.to_vector(), dx1.to_vector());
        EXPECT_EQ(dg2.to_vector(), dg1.to_vector());
        EXPECT_EQ(db2.to_vector(), db1.to_vector());
      }
      EXPECT_EQ(wide_sum.slice(1, 0, 7).to_vector(), std::vector<float>(t * 7, 0.0f));
      EXPECT_EQ(wide_sum.slice(1, 7 + d, 2).to_vector(), std::vector<float>(t * 2, 0.0f));
    }
  }
}

TEST(CudaNormTest, ZeroTokensIsANoOp) {
  COLROW_REQUIRE_GPU();
  const Device gpu = testing::test_gpu();
  const Tensor x = Tensor::empty({0, 8}, gpu), gamma = Tensor::full({8}, 1.0f, gpu);
  const Tensor beta = Tensor::zeros({8}, gpu);
  Tensor y = Tensor::empty({0, 8}, gpu), dx = Tensor::empty({0, 8}, gpu);
  Tensor mean = Tensor::empty({0}, gpu), rstd = Tensor::empty({0}, gpu);
  Tensor dgamma = Tensor::full({8}, 3.0f, gpu), dbeta = Tensor::full({8}, 3.0f, gpu);
  gpu::layer_norm_forward(x, gamma, beta, 1e-5f, y, mean, rstd);
  gpu::layer_norm_backward(x, gamma, mean, rstd, x, dx, dgamma, dbeta);
  gpu::rms_norm_forward(x, gamma, 1e-5f, y, rstd);
  gpu::rms_norm_backward(x, gamma, rstd, x, dx, dgamma);
  EXPECT_EQ(dgamma.to_vector(), std::vector<float>(8, 3.0f));
  EXPECT_EQ(dbeta.to_vector(), std::vector<float>(8, 3.0f));
}

TEST(CudaNormTest, MismatchedShapesAreInternalErrors) {
  COLROW_REQUIRE_GPU();
  const Device gpu = testing::test_gpu();
  const Tensor x = Tensor::zeros({4, 8}, gpu), gamma = Tensor::zeros({8}, gpu);
  const Tensor beta = Tensor::zeros({8}, gpu);
  Tensor y = Tensor::empty({4, 8}, gpu), mean = Tensor::empty({4}, gpu);
  Tensor rstd = Tensor::empty({4}, gpu), dx = Tensor::empty({4, 8}, gpu);
  Tensor bad_y = Tensor::empty({4, 7}, gpu), bad_gamma = Tensor::zeros({7}, gpu);
  Tensor bad_rstd = Tensor::empty({3}, gpu), dgamma = Tensor::zeros({8}, gpu);
  EXPECT_THROW(gpu::layer_norm_forward(x, gamma, beta, 1e-5f, bad_y, mean, rstd), InternalError);
  EXPECT_THROW(gpu::layer_norm_forward(x, bad_gamma, beta, 1e-5f, y, mean, rstd), InternalError);
  EXPECT_THROW(gpu::layer_norm_forward(x, gamma, beta, 1e-5f, y, mean, bad_rstd), InternalError);
  EXPECT_THROW(gpu::layer_norm_backward(x, gamma, mean, rstd, x, bad_y, dgamma, dgamma),
               InternalError);
  EXPECT_THROW(gpu::rms_norm_forward(x, bad_gamma, 1e-5f, y, rstd), InternalError);
  EXPECT_THROW(gpu::rms_norm_forward(Tensor::zeros({32}, gpu), gamma, 1e-5f, y, rstd),
               InternalError);
  EXPECT_THROW(gpu::rms_norm_backward(x, gamma, rstd, x, dx, bad_gamma), InternalError);
  try {
    gpu::rms_norm_forward(x, gamma, 1e-5f, bad_y, rstd);
    ADD_FAILURE() << "no InternalError";
  } catch (const InternalError& e) {
    EXPECT_EQ(std::string(e.what()),
              "[norm] rms_norm_forward: y [4, 7] must be [4, 8] with contiguous rows");
  }
  // A host parameter is refused rather than read as device memory.
  if (!testing::kGpuIsHost) {
    const Tensor host_gamma = Tensor::zeros({8});
    EXPECT_THROW(gpu::rms_norm_forward(x, host_gamma, 1e-5f, y, rstd), InternalError);
  }
}

}  // namespace
}  // namespace colrow
