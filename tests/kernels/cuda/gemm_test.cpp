// kernels::cuda::gemm against kernels::cpu::gemm on the same inputs: all four
// transpose combinations and several alpha/beta over odd shapes (1 .. 1000,
// none a multiple of cuBLAS's tiles), column blocks of wider matrices as a, b
// and c (row stride > cols, neighbours untouched), beta = 0 over NaN, k = 0,
// bitwise equality on small integers, and InternalError for shapes that do
// not chain. TF32 is off (the default), so cuBLAS computes in fp32. bf16
// operands (cublasGemmEx): on small integers the fp32 sums are exact, so the
// GPU's bf16 or fp32 c equals the CPU's bit for bit (one rounding of the same
// exact value), also into a column block and with k = 0.
#include "kernels/cuda/gemm.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "colrow/core/error.h"
#include "kernels/cpu/gemm.h"
#include "kernels/cuda/cuda_test_helpers.h"
#include "support/gpu.h"

namespace colrow {
namespace {

using testing::higham_gamma;
using testing::random_exact;
using testing::random_integers;

using kernels::Trans;

const char* name(Trans t) {
  return t == Trans::kNo ? "N" : "T";
}
Shape a_shape(Trans t, int64_t m, int64_t k) {
  return t == Trans::kNo ? Shape{m, k} : Shape{k, m};
}
Shape b_shape(Trans t, int64_t k, int64_t n) {
  return t == Trans::kNo ? Shape{k, n} : Shape{n, k};
}
float op_at(const Tensor& t, Trans trans, int64_t i, int64_t j) {
  return trans == Trans::kNo ? t(i, j) : t(j, i);
}

// sum_p |op(a)_ip op(b)_pj| for every (i, j), from host tensors.
std::vector<double> abs_products(Trans ta, Trans tb, const Tensor& a, const Tensor& b, int64_t m,
                                 int64_t n, int64_t k) {
  std::vector<double> s(static_cast<size_t>(m * n), 0.0);
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t p = 0; p < k; ++p) {
      const double ai = std::fabs(op_at(a, ta, i, p));
      for (int64_t j = 0; j < n; ++j) s[i * n + j] += ai * std::fabs(op_at(b, tb, p, j));
    }
  }
  return s;
}

// OpenBLAS and cuBLAS sum the k products in different orders (cuBLAS may also
// split k), but both are fp32 dot products: each is within
// gamma_{k+2} (|alpha| sum_p |a_ip b_pj| + |beta c0_ij|) of the exact value
// (k products and additions, the alpha scaling and the final add of beta c0),
// so they differ by at most twice that.
void expect_close(const std::vector<float>& got, const std::vector<float>& want,
                  const std::vector<double>& abs_ab, const std::vector<float>& c0, float alpha,
                  float beta, int64_t k, const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  int failures = 0;
  for (size_t i = 0; i < got.size() && failures < 5; ++i) {
    const double bound =
        2.0 * higham_gamma(k + 2) *
        (std::fabs(alpha) * abs_ab[i] + std::fabs(static_cast<double>(beta) * c0[i]));
    if (!(std::fabs(static_cast<double>(got[i]) - want[i]) <= bound)) {
      ADD_FAILURE() << what << " at " << i << ": cuda " << got[i] << ", cpu " << want[i]
                    << ", bound " << bound;
      ++failures;
    }
  }
}

const Trans kBoth[] = {Trans::kNo, Trans::kYes};

struct Scaling {
  float alpha, beta;
};
const Scaling kScalings[] = {{1.0f, 0.0f}, {1.0f, 1.0f}, {0.5f, -0.75f}, {0.0f, 3.0f}};

struct Dims {
  int64_t m, n, k;
};
const Dims kDims[] = {{1, 1, 1}, {7, 3, 5}, {37, 65, 29}, {129, 257, 1000}, {1000, 7, 37}};

TEST(CudaGemmTest, MatchesCpuForAllTransposesAndScalings) {
  COLROW_REQUIRE_GPU();
  const Device gpu = testing::test_gpu();
  uint32_t seed = 1;
  for (const Dims& d : kDims) {
    for (Trans ta : kBoth) {
      for (Trans tb : kBoth) {
        const Tensor a = random_exact(a_shape(ta, d.m, d.k), seed++);
        const Tensor b = random_exact(b_shape(tb, d.k, d.n), seed++);
        const Tensor c0 = random_exact({d.m, d.n}, seed++);
        const std::vector<double> abs_ab = abs_products(ta, tb, a, b, d.m, d.n, d.k);
        const Tensor a_gpu = a.to(gpu), b_gpu = b.to(gpu);
        for (const Scaling& s : kScalings) {
          Tensor c_cpu = c0.clone();
          Tensor c_gpu = c0.to(gpu);
          kernels::cpu::gemm(ta, tb, s.alpha, a, b, s.beta, c_cpu);
          kernels::cuda::gemm(ta, tb, s.alpha, a_gpu, b_gpu, s.beta, c_gpu);
          const std::string what = std::string(name(ta)) + name(tb) + " m=" + std::to_string(d.m) +
                                   " n=" + std::to_string(d.n) + " k=" + std::to_string(d.k) +
                                   " alpha=" + std::to_string(s.alpha) +
                                   " beta=" + std::to_string(s.beta);
          expect_close(c_gpu.to_vector(), c_cpu.to_vector(), abs_ab, c0.to_vector(), s.alpha,
                       s.beta, d.k, what);
        }
      }
    }
  }
}

TEST(CudaGemmTest, SmallIntegersAreBitwiseEqualToCpu) {
  // Entries in [-4, 4], k <= 1000: every product (|.| <= 16) and partial sum
  // (|.| <= 16000) is an integer below 2^24, exact in fp32 in any order (and in
  // TF32, whose 10-bit mantissa holds these inputs exactly); alpha and beta are
  // powers of two. So cuBLAS and OpenBLAS must agree bit for bit.
  COLROW_REQUIRE_GPU();
  const Device gpu = testing::test_gpu();
  for (const Dims& d : kDims) {
    for (Trans ta : kBoth) {
      for (Trans tb : kBoth) {
        const Tensor a = random_integers(a_shape(ta, d.m, d.k), 11, 4);
        const Tensor b = random_integers(b_shape(tb, d.k, d.n), 12, 4);
        const Tensor c0 = random_integers({d.m, d.n}, 13, 4);
        for (const Scaling& s : {Scaling{1.0f, 0.0f}, Scaling{2.0f, 1.0f}, Scaling{-1.0f, -2.0f}}) {
          Tensor c_cpu = c0.clone();
          Tensor c_gpu = c0.to(gpu);
          kernels::cpu::gemm(ta, tb, s.alpha, a, b, s.beta, c_cpu);
          kernels::cuda::gemm(ta, tb, s.alpha, a.to(gpu), b.to(gpu), s.beta, c_gpu);
          ASSERT_EQ(c_gpu.to_vector(), c_cpu.to_vector())
              << name(ta) << name(tb) << " m=" << d.m << " n=" << d.n << " k=" << d.k;
        }
      }
    }
  }
}

TEST(CudaGemmTest, Bf16SmallIntegersAreBitwiseEqualToCpu) {
  COLROW_REQUIRE_GPU();
  const Device gpu = testing::test_gpu();
  for (const Dims& d : kDims) {
    for (Trans ta : kBoth) {
      for (Trans tb : kBoth) {
        const Tensor a = random_integers(a_shape(ta, d.m, d.k), 31, 4).to(DType::kBF16);
        const Tensor b = random_integers(b_shape(tb, d.k, d.n), 32, 4).to(DType::kBF16);
        const Tensor c0 = random_integers({d.m, d.n}, 33, 4);
        for (const Scaling& s : {Scaling{1.0f, 0.0f}, Scaling{2.0f, 1.0f}, Scaling{-1.0f, -2.0f}}) {
          for (DType c_dtype : {DType::kBF16, DType::kF32}) {
            Tensor c_cpu = c_dtype == DType::kBF16 ? c0.to(DType::kBF16) : c0.clone();
            Tensor c_gpu = c_cpu.to(gpu);
            kernels::cpu::gemm(ta, tb, s.alpha, a, b, s.beta, c_cpu);
            kernels::cuda::gemm(ta, tb, s.alpha, a.to(gpu), b.to(gpu), s.beta, c_gpu);
            ASSERT_EQ(c_gpu.to_vector(), c_cpu.to_vector())
                << name(ta) << name(tb) << " m=" << d.m << " n=" << d.n << " k=" << d.k << " c "
                << dtype_name(c_dtype);
          }
        }
      }
    }
  }
  // A bf16 column block of a wider c, and k = 0 (c = beta c, rounded).
  const Tensor a = random_integers({37, 29}, 34, 4).to(DType::kBF16);
  const Tensor b = random_integers({29, 65}, 35, 4).to(DType::kBF16);
  Tensor wide_cpu = random_integers({37, 200}, 36, 4).to(DType::kBF16), wide_gpu = wide_cpu.to(gpu);
  Tensor block_cpu = wide_cpu.slice(1, 70, 65), block_gpu = wide_gpu.slice(1, 70, 65);
  kernels::cpu::gemm(Trans::kNo, Trans::kNo, 1.0f, a, b, 1.0f, block_cpu);
  kernels::cuda::gemm(Trans::kNo, Trans::kNo, 1.0f, a.to(gpu), b.to(gpu), 1.0f, block_gpu);
  ASSERT_EQ(wide_gpu.to_vector(), wide_cpu.to_vector());
  const Tensor a0 = Tensor::zeros({37, 0}).to(DType::kBF16),
               b0 = Tensor::zeros({0, 65}).to(DType::kBF16);
  kernels::cpu::gemm(Trans::kNo, Trans::kNo, 1.0f, a0, b0, 0.75f, block_cpu);
  kernels::cuda::gemm(Trans::kNo, Trans::kNo, 1.0f, a0.to(gpu), b0.to(gpu), 0.75f, block_gpu);
  ASSERT_EQ(wide_gpu.to_vector(), wide_cpu.to_vector());
}

TEST(CudaGemmTest, BetaZeroIgnoresNaNInC) {
  // Layers write into fresh, uninitialized buffers with beta = 0.
  COLROW_REQUIRE_GPU();
  const Device gpu = testing::test_gpu();
  const Tensor a = random_exact({37, 65}, 21), b = random_exact({29, 65}, 22);
  Tensor c_gpu = Tensor::full({37, 29}, std::numeric_limits<float>::quiet_NaN(), gpu);
  Tensor c_cpu = Tensor::zeros({37, 29});
  kernels::cuda::gemm(Trans::kNo, Trans::kYes, 1.0f, a.to(gpu), b.to(gpu), 0.0f, c_gpu);
  kernels::cpu::gemm(Trans::kNo, Trans::kYes, 1.0f, a, b, 0.0f, c_cpu);
  expect_close(c_gpu.to_vector(), c_cpu.to_vector(),
               abs_products(Trans::kNo, Trans::kYes, a, b, 37, 29, 65),
               std::vector<float>(37 * 29, 0.0f), 1.0f, 0.0f, 65, "beta=0 over NaN");
}

TEST(CudaGemmTest, StridedColumnBlocksAsOperands) {
  // a, b and c are each a column block of a wider GPU matrix (row stride >
  // cols), as a rank's shard is; c's neighbours outside the block stay as they were.
  COLROW_REQUIRE_GPU();
  const Device gpu = testing::test_gpu();
  const int64_t m = 37, n = 29, k = 65, pad = 7;
  for (Trans ta : kBoth) {
    for (Trans tb : kBoth) {
      const Shape as = a_shape(ta, m, k), bs = b_shape(tb, k, n);
      const Tensor a_wide = random_exact({as[0], as[1] + pad}, 31);
      const Tensor b_wide = random_exact({bs[0], bs[1] + 2 * pad}, 32);
      const Tensor c_wide = random_exact({m, n + pad}, 33);
      const Tensor a = a_wide.slice(-1, 1, as[1]), b = b_wide.slice(-1, pad, bs[1]);
      Tensor c_cpu = c_wide.clone().slice(-1, 3, n);
      Tensor c_wide_gpu = c_wide.to(gpu);
      Tensor c_gpu = c_wide_gpu.slice(-1, 3, n);
      const Tensor a_gpu = a_wide.to(gpu).slice(-1, 1, as[1]);
      const Tensor b_gpu = b_wide.to(gpu).slice(-1, pad, bs[1]);
      ASSERT_GT(a_gpu.row_stride(), a_gpu.size(1));
      ASSERT_GT(b_gpu.row_stride(), b_gpu.size(1));
      ASSERT_GT(c_gpu.row_stride(), c_gpu.size(1));
      const std::vector<float> c0 = c_cpu.to_vector();
      kernels::cpu::gemm(ta, tb, 1.5f, a, b, 0.5f, c_cpu);
      kernels::cuda::gemm(ta, tb, 1.5f, a_gpu, b_gpu, 0.5f, c_gpu);
      const std::string what = std::string("strided ") + name(ta) + name(tb);
      expect_close(c_gpu.to_vector(), c_cpu.to_vector(),
                   abs_products(ta, tb, a.clone(), b.clone(), m, n, k), c0, 1.5f, 0.5f, k, what);
      const Tensor after = c_wide_gpu.to(Device::cpu());
      for (int64_t i = 0; i < m; ++i) {
        for (int64_t j = 0; j < n + pad; ++j) {
          if (j >= 3 && j < 3 + n) continue;
          ASSERT_EQ(after(i, j), c_wide(i, j)) << what << " wrote outside c at " << i << "," << j;
        }
      }
    }
  }
}

TEST(CudaGemmTest, EmptyInnerDimensionScalesC) {
  // k = 0: op(a) op(b) is an empty sum, so c = beta c (and 0 for beta = 0,
  // even over NaN), exactly the CPU's single multiply per element.
  COLROW_REQUIRE_GPU();
  const Device gpu = testing::test_gpu();
  const Tensor a = Tensor::empty({7, 0}, gpu), b = Tensor::empty({0, 5}, gpu);
  const Tensor c0 = random_exact({7, 5}, 41);
  Tensor c_gpu = c0.to(gpu), c_cpu = c0.clone();
  kernels::cuda::gemm(Trans::kNo, Trans::kNo, 1.0f, a, b, -0.75f, c_gpu);
  kernels::cpu::gemm(Trans::kNo, Trans::kNo, 1.0f, Tensor::empty({7, 0}), Tensor::empty({0, 5}),
                     -0.75f, c_cpu);
  EXPECT_EQ(c_gpu.to_vector(), c_cpu.to_vector());
  Tensor nan_c = Tensor::full({7, 5}, std::numeric_limits<float>::quiet_NaN(), gpu);
  kernels::cuda::gemm(Trans::kNo, Trans::kNo, 1.0f, a, b, 0.0f, nan_c);
  EXPECT_EQ(nan_c.to_vector(), std::vector<float>(35, 0.0f));
}

TEST(CudaGemmTest, EmptyRowsAreANoOp) {
  COLROW_REQUIRE_GPU();
  const Device gpu = testing::test_gpu();
  Tensor a = Tensor::empty({0, 4}, gpu), b = Tensor::empty({4, 3}, gpu),
         c = Tensor::empty({0, 3}, gpu);
  EXPECT_NO_THROW(kernels::cuda::gemm(Trans::kNo, Trans::kNo, 1.0f, a, b, 0.0f, c));
}

TEST(CudaGemmTest, ShapesThatDoNotChainThrow) {
  COLROW_REQUIRE_GPU();
  const Device gpu = testing::test_gpu();
  const Tensor a = Tensor::zeros({4, 3}, gpu), b = Tensor::zeros({3, 5}, gpu);
  Tensor c = Tensor::zeros({4, 5}, gpu);
  EXPECT_NO_THROW(kernels::cuda::gemm(Trans::kNo, Trans::kNo, 1.0f, a, b, 0.0f, c));
  EXPECT_THROW(kernels::cuda::gemm(Trans::kYes, Trans::kNo, 1.0f, a, b, 0.0f, c), InternalError);
  EXPECT_THROW(kernels::cuda::gemm(Trans::kNo, Trans::kYes, 1.0f, a, b, 0.0f, c), InternalError);
  Tensor c_rows = Tensor::zeros({5, 5}, gpu), c_cols = Tensor::zeros({4, 4}, gpu);
  EXPECT_THROW(kernels::cuda::gemm(Trans::kNo, Trans::kNo, 1.0f, a, b, 0.0f, c_rows),
               InternalError);
  EXPECT_THROW(kernels::cuda::gemm(Trans::kNo, Trans::kNo, 1.0f, a, b, 0.0f, c_cols),
               InternalError);
  const Tensor cube = Tensor::zeros({4, 3, 1}, gpu), v = Tensor::zeros({3}, gpu);
  EXPECT_THROW(kernels::cuda::gemm(Trans::kNo, Trans::kNo, 1.0f, cube, b, 0.0f, c), InternalError);
  EXPECT_THROW(kernels::cuda::gemm(Trans::kNo, Trans::kNo, 1.0f, a, v, 0.0f, c), InternalError);
  // A host operand is refused before anything is queued.
  const Tensor host_b = Tensor::zeros({3, 5});
  EXPECT_THROW(kernels::cuda::gemm(Trans::kNo, Trans::kNo, 1.0f, a, host_b, 0.0f, c),
               InternalError);
}

}  // namespace
}  // namespace colrow
