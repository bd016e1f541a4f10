// kernels::cpu::gemm against a plain double-precision loop: all four transpose
// combinations with several alpha/beta, operands that are column blocks of wider
// matrices (row stride > cols) for a, b and c, bitwise-exact results on small
// integers, and InternalError for shapes that do not chain; bf16 operands
// (mixed precision): on small integers every fp32 sum is exact, so a bf16 c
// must hold each exact result rounded once to nearest even, and an fp32 c the
// exact result; bf16 column blocks; the dtype rules.
#include "kernels/cpu/gemm.h"

#include <gtest/gtest.h>
#include <omp.h>

#include <cmath>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "colrow/core/bfloat16.h"
#include "colrow/core/error.h"
#include "colrow/core/philox.h"

namespace colrow {
namespace {

using kernels::cpu::gemm;
using kernels::cpu::kFewRows;
using kernels::cpu::Trans;

constexpr double kUnitRoundoff = 1.0 / (1 << 24);  // fp32: u = 2^-24

// Higham's gamma_n = n u / (1 - n u).
double higham_gamma(int64_t n) {
  return n * kUnitRoundoff / (1.0 - n * kUnitRoundoff);
}

const char* name(Trans t) {
  return t == Trans::kNo ? "N" : "T";
}

// Uniform in [-1, 1), deterministic per (name, element).
void fill_uniform(Tensor& t, const std::string& stream_name) {
  const uint64_t stream = name_stream(stream_name);
  for (int64_t i = 0; i < t.size(0); ++i) {
    for (int64_t j = 0; j < t.size(1); ++j) {
      t(i, j) = 2.0f * uniform01(2024, stream, static_cast<uint64_t>(i * t.size(1) + j)) - 1.0f;
    }
  }
}

// Integers in [-4, 4].
void fill_small_integers(Tensor& t, const std::string& stream_name) {
  const uint64_t stream = name_stream(stream_name);
  for (int64_t i = 0; i < t.size(0); ++i) {
    for (int64_t j = 0; j < t.size(1); ++j) {
      const float u = uniform01(7, stream, static_cast<uint64_t>(i * t.size(1) + j));
      t(i, j) = std::floor(9.0f * u) - 4.0f;
    }
  }
}

float op_at(const Tensor& t, Trans trans, int64_t i, int64_t j) {
  return trans == Trans::kNo ? t(i, j) : t(j, i);
}

// The exact value (in double) of alpha op(a) op(b) + beta c0 at every (i, j), and
// Higham's bound on fp32's error there. Each term alpha a_ik b_kj passes through
// at most K + 2 roundings (alpha, the K-term dot product, the final add) and
// beta c0 through two, so |err| <= gamma_{K+2} (|alpha| sum_k |a_ik b_kj| + |beta c0|).
struct Reference {
  std::vector<double> value;
  std::vector<double> bound;
};

Reference reference_gemm(Trans ta, Trans tb, double alpha, const Tensor& a, const Tensor& b,
                         double beta, const Tensor& c0) {
  const int64_t m = c0.size(0), n = c0.size(1);
  const int64_t k = ta == Trans::kNo ? a.size(1) : a.size(0);
  Reference r;
  r.value.resize(static_cast<size_t>(m * n));
  r.bound.resize(static_cast<size_t>(m * n));
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t j = 0; j < n; ++j) {
      double dot = 0.0, abs_dot = 0.0;
      for (int64_t p = 0; p < k; ++p) {
        const double prod = static_cast<double>(op_at(a, ta, i, p)) * op_at(b, tb, p, j);
        dot += prod;
        abs_dot += std::fabs(prod);
      }
      const double c = c0(i, j);
      r.value[i * n + j] = alpha * dot + beta * c;
      r.bound[i * n + j] = higham_gamma(k + 2) * (std::fabs(alpha) * abs_dot + std::fabs(beta * c));
    }
  }
  return r;
}

void expect_matches(const Tensor& c, const Reference& r, const std::string& what) {
  const int64_t n = c.size(1);
  int failures = 0;
  for (int64_t i = 0; i < c.size(0) && failures < 5; ++i) {
    for (int64_t j = 0; j < n && failures < 5; ++j) {
      const double got = c(i, j);
      const double want = r.value[i * n + j];
      if (!(std::fabs(got - want) <= r.bound[i * n + j])) {
        ADD_FAILURE() << what << " at (" << i << ", " << j << "): got " << got << ", want " << want
                      << " +- " << r.bound[i * n + j];
        ++failures;
      }
    }
  }
}

// Stored shapes of a and b for op(a): [m, k], op(b): [k, n].
Shape a_shape(Trans t, int64_t m, int64_t k) {
  return t == Trans::kNo ? Shape{m, k} : Shape{k, m};
}
Shape b_shape(Trans t, int64_t k, int64_t n) {
  return t == Trans::kNo ? Shape{k, n} : Shape{n, k};
}

const Trans kBoth[] = {Trans::kNo, Trans::kYes};

struct Scaling {
  float alpha, beta;
};
const Scaling kScalings[] = {
    {1.0f, 0.0f}, {1.0f, 1.0f}, {0.5f, -0.75f}, {-2.0f, 0.25f}, {0.0f, 3.0f}};

// Small odd shapes (kernel edges), shapes past OpenBLAS's register blocks, and
// single rows (decoding one token), which take the sgemv path.
struct Dims {
  int64_t m, n, k;
};
const Dims kDims[] = {{1, 1, 1},     {5, 7, 3},   {37, 29, 65},
                      {64, 48, 130}, {1, 29, 65}, {1, 300, 130}};

TEST(GemmTest, AllTransposesAndScalingsMatchReference) {
  for (const Dims& d : kDims) {
    for (Trans ta : kBoth) {
      for (Trans tb : kBoth) {
        Tensor a = Tensor::empty(a_shape(ta, d.m, d.k));
        Tensor b = Tensor::empty(b_shape(tb, d.k, d.n));
        Tensor c0 = Tensor::empty({d.m, d.n});
        fill_uniform(a, "a");
        fill_uniform(b, "b");
        fill_uniform(c0, "c");
        for (const Scaling& s : kScalings) {
          Tensor c = c0.clone();
          gemm(ta, tb, s.alpha, a, b, s.beta, c);
          const std::string what = std::string(name(ta)) + name(tb) + " m=" + std::to_string(d.m) +
                                   " n=" + std::to_string(d.n) + " k=" + std::to_string(d.k) +
                                   " alpha=" + std::to_string(s.alpha) +
                                   " beta=" + std::to_string(s.beta);
          expect_matches(c, reference_gemm(ta, tb, s.alpha, a, b, s.beta, c0), what);
        }
      }
    }
  }
}

TEST(GemmTest, BetaZeroIgnoresOldContents) {
  // Layers write into fresh, uninitialized buffers with beta = 0: whatever was
  // there (here NaN) must not leak into the result (BLAS's documented contract).
  Tensor a = Tensor::empty({6, 9});
  Tensor b = Tensor::empty({5, 9});
  fill_uniform(a, "a");
  fill_uniform(b, "b");
  Tensor c = Tensor::full({6, 5}, std::numeric_limits<float>::quiet_NaN());
  gemm(Trans::kNo, Trans::kYes, 1.0f, a, b, 0.0f, c);
  expect_matches(c, reference_gemm(Trans::kNo, Trans::kYes, 1.0, a, b, 0.0, Tensor::zeros({6, 5})),
                 "beta=0 over NaN");
  // The same for one row (sgemv), with b either way round.
  for (Trans tb : kBoth) {
    const Tensor row = a.slice(0, 2, 1);
    Tensor bt = Tensor::empty(b_shape(tb, 9, 5));
    fill_uniform(bt, "b one row");
    Tensor c1 = Tensor::full({1, 5}, std::numeric_limits<float>::quiet_NaN());
    gemm(Trans::kNo, tb, 1.0f, row, bt, 0.0f, c1);
    expect_matches(c1, reference_gemm(Trans::kNo, tb, 1.0, row, bt, 0.0, Tensor::zeros({1, 5})),
                   std::string("one row, beta=0 over NaN, ") + name(tb));
  }
}

TEST(GemmTest, StridedColumnBlocksAsOperands) {
  // a, b and c are each a column block of a wider matrix (row stride > cols),
  // as a rank's shard is; c's neighbours outside the block must be untouched.
  const int64_t n = 6, k = 5, pad = 4;
  for (const int64_t m : {7, 1}) {  // 1: the single-row (sgemv) path
    for (Trans ta : kBoth) {
      for (Trans tb : kBoth) {
        const Shape as = a_shape(ta, m, k), bs = b_shape(tb, k, n);
        Tensor a_wide = Tensor::empty({as[0], as[1] + pad});
        Tensor b_wide = Tensor::empty({bs[0], bs[1] + 2 * pad});
        Tensor c_wide = Tensor::empty({m, n + pad});
        fill_uniform(a_wide, "a_wide");
        fill_uniform(b_wide, "b_wide");
        fill_uniform(c_wide, "c_wide");
        const Tensor a = a_wide.slice(-1, 1, as[1]);
        const Tensor b = b_wide.slice(-1, pad, bs[1]);
        Tensor c = c_wide.slice(-1, 3, n);
        ASSERT_GT(a.row_stride(), a.size(1));
        ASSERT_GT(b.row_stride(), b.size(1));
        ASSERT_GT(c.row_stride(), c.size(1));
        const Tensor before = c_wide.clone();
        const Tensor c0 = c.clone();
        gemm(ta, tb, 1.5f, a, b, 0.5f, c);
        const std::string what = std::string("strided ") + name(ta) + name(tb);
        expect_matches(c, reference_gemm(ta, tb, 1.5, a.clone(), b.clone(), 0.5, c0), what);
        for (int64_t i = 0; i < m; ++i) {
          for (int64_t j = 0; j < n + pad; ++j) {
            if (j >= 3 && j < 3 + n) continue;
            EXPECT_EQ(c_wide(i, j), before(i, j))
                << what << " wrote outside c at " << i << "," << j;
          }
        }
      }
    }
  }
}

TEST(GemmTest, RowBlockViewsAsOperands) {
  // Row blocks are contiguous views that start inside a larger buffer.
  Tensor a_tall = Tensor::empty({12, 8});
  Tensor b = Tensor::empty({8, 5});
  fill_uniform(a_tall, "a_tall");
  fill_uniform(b, "b");
  const Tensor a = a_tall.slice(0, 4, 6);
  Tensor c = Tensor::zeros({6, 5});
  gemm(Trans::kNo, Trans::kNo, 1.0f, a, b, 0.0f, c);
  expect_matches(c, reference_gemm(Trans::kNo, Trans::kNo, 1.0, a, b, 0.0, Tensor::zeros({6, 5})),
                 "row block");
}

TEST(GemmTest, SmallIntegersAreBitwiseExact) {
  // Entries in [-4, 4] and k <= 130: every product (|.| <= 16), partial sum
  // (|.| <= 2080) and alpha, beta scaling (powers of two) is an integer below
  // 2^24, hence exact in fp32 in any summation order, with or without FMA.
  for (const Dims& d : kDims) {
    for (Trans ta : kBoth) {
      for (Trans tb : kBoth) {
        Tensor a = Tensor::empty(a_shape(ta, d.m, d.k));
        Tensor b = Tensor::empty(b_shape(tb, d.k, d.n));
        Tensor c0 = Tensor::empty({d.m, d.n});
        fill_small_integers(a, "ia");
        fill_small_integers(b, "ib");
        fill_small_integers(c0, "ic");
        for (const Scaling& s : {Scaling{1.0f, 0.0f}, Scaling{2.0f, 1.0f}, Scaling{-1.0f, -2.0f}}) {
          Tensor c = c0.clone();
          gemm(ta, tb, s.alpha, a, b, s.beta, c);
          const Reference r = reference_gemm(ta, tb, s.alpha, a, b, s.beta, c0);
          for (int64_t i = 0; i < d.m; ++i) {
            for (int64_t j = 0; j < d.n; ++j) {
              ASSERT_EQ(static_cast<double>(c(i, j)), r.value[i * d.n + j])
                  << name(ta) << name(tb) << " m=" << d.m << " n=" << d.n << " k=" << d.k << " at "
                  << i << "," << j;
            }
          }
        }
      }
    }
  }
}

TEST(GemmTest, Bf16OperandsSumInFp32AndRoundOnce) {
  // Integers in [-4, 4] are bf16-exact and their sums are exact in fp32 (see
  // above), but not all of them fit bf16's 8 significant bits: the rounding
  // of c happens, once, on the exact value. Rounding each partial sum, or
  // summing in bf16, would differ.
  for (const Dims& d : kDims) {
    for (Trans ta : kBoth) {
      for (Trans tb : kBoth) {
        Tensor a = Tensor::empty(a_shape(ta, d.m, d.k));
        Tensor b = Tensor::empty(b_shape(tb, d.k, d.n));
        Tensor c0 = Tensor::empty({d.m, d.n});
        fill_small_integers(a, "ha");
        fill_small_integers(b, "hb");
        fill_small_integers(c0, "hc");
        for (const Scaling& s : {Scaling{1.0f, 0.0f}, Scaling{2.0f, 1.0f}, Scaling{-1.0f, -2.0f}}) {
          const Reference r = reference_gemm(ta, tb, s.alpha, a, b, s.beta, c0);
          Tensor c_half = c0.to(DType::kBF16), c_full = c0.clone();
          gemm(ta, tb, s.alpha, a.to(DType::kBF16), b.to(DType::kBF16), s.beta, c_half);
          gemm(ta, tb, s.alpha, a.to(DType::kBF16), b.to(DType::kBF16), s.beta, c_full);
          for (int64_t i = 0; i < d.m; ++i) {
            for (int64_t j = 0; j < d.n; ++j) {
              const double exact = r.value[i * d.n + j];
              // Compared as values: the sign of an exact zero (alpha -1 times a
              // zero sum plus -2 times a zero c) is the BLAS kernel's choice
              // (OpenBLAS's Cooperlake kernel gives +0, Haswell's -0).
              ASSERT_EQ(bf16_to_float(c_half.bf16_data()[i * d.n + j]),
                        bf16_to_float(float_to_bf16(static_cast<float>(exact))))
                  << name(ta) << name(tb) << " m=" << d.m << " n=" << d.n << " k=" << d.k;
              ASSERT_EQ(static_cast<double>(c_full(i, j)), exact);
            }
          }
        }
      }
    }
  }
}

TEST(GemmTest, Bf16ColumnBlockOfCAndDtypeRules) {
  const int64_t m = 7, n = 5, k = 9;
  Tensor a = Tensor::empty({m, k}), b = Tensor::empty({k, n});
  fill_small_integers(a, "ba");
  fill_small_integers(b, "bb");
  Tensor wide = Tensor::full({m, 3 * n}, 0.5f, Device::cpu(), DType::kBF16);
  Tensor block = wide.slice(1, n, n);  // strided
  gemm(Trans::kNo, Trans::kNo, 1.0f, a.to(DType::kBF16), b.to(DType::kBF16), 0.0f, block);
  const Reference r = reference_gemm(Trans::kNo, Trans::kNo, 1.0, a, b, 0.0, Tensor::zeros({m, n}));
  const std::vector<float> out = wide.to_vector();
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t j = 0; j < 3 * n; ++j) {
      const float want =
          j >= n && j < 2 * n
              ? bf16_to_float(float_to_bf16(static_cast<float>(r.value[i * n + j - n])))
              : 0.5f;  // outside the block: untouched
      ASSERT_EQ(out[i * 3 * n + j], want) << i << "," << j;
    }
  }
  // a and b share a dtype; c is bf16 only with bf16 operands.
  Tensor c = Tensor::zeros({m, n}), c_half = c.to(DType::kBF16);
  EXPECT_THROW(gemm(Trans::kNo, Trans::kNo, 1.0f, a.to(DType::kBF16), b, 0.0f, c), InternalError);
  EXPECT_THROW(gemm(Trans::kNo, Trans::kNo, 1.0f, a, b, 0.0f, c_half), InternalError);
}

// alpha x w^T + beta c0 computed at 1 and at 2 OpenMP threads.
std::pair<std::vector<float>, std::vector<float>> at_one_and_two_threads(
    float alpha, const Tensor& x, const Tensor& w, float beta, const Tensor& c0) {
  Tensor one = c0.clone(), two = c0.clone();
  const int threads = omp_get_max_threads();
  omp_set_num_threads(1);
  gemm(Trans::kNo, Trans::kYes, alpha, x, w, beta, one);
  omp_set_num_threads(2);
  gemm(Trans::kNo, Trans::kYes, alpha, x, w, beta, two);
  omp_set_num_threads(threads);
  return {one.to_vector(), two.to_vector()};
}

// Up to 8 rows against bf16 weights stored [n, k] (y = x W^T, decoding)
// read the weights natively: on random values from strided views (x a
// column block, W rows padded, c a column block) the fp32 result is within
// Higham's bound of the exact one, a bf16 c is within one bf16 rounding of
// it, and the bits do not depend on the thread count. 9 rows go to sgemm.
TEST(GemmTest, Bf16RowsTimesWeightsReadTheWeightsNatively) {
  const int64_t k = 300, n = 130;  // n k above the parallel threshold
  for (int64_t m : {1, 3, 8, 9}) {
    SCOPED_TRACE("m = " + std::to_string(m));
    Tensor x_wide = Tensor::empty({m, 2 * k}), w_wide = Tensor::empty({n, k + 5});
    Tensor c0 = Tensor::empty({m, n});
    fill_uniform(x_wide, "nx");
    fill_uniform(w_wide, "nw");
    fill_uniform(c0, "nc");
    const Tensor x = x_wide.to(DType::kBF16).slice(1, 0, k),
                 w = w_wide.to(DType::kBF16).slice(1, 0, k);
    const Reference r =
        reference_gemm(Trans::kNo, Trans::kYes, 2.0, x.to(DType::kF32), w.to(DType::kF32), 0.5, c0);
    Tensor c_full_wide = Tensor::zeros({m, 2 * n});
    Tensor c_full = c_full_wide.slice(1, n, n);
    c_full.copy_from(c0);
    gemm(Trans::kNo, Trans::kYes, 2.0f, x, w, 0.5f, c_full);
    expect_matches(c_full, r, "fp32 c");
    Tensor c_half = c0.to(DType::kBF16);
    const Tensor c_half_in = c_half.to(DType::kF32);  // what beta reads
    const Reference rh = reference_gemm(Trans::kNo, Trans::kYes, 2.0, x.to(DType::kF32),
                                        w.to(DType::kF32), 0.5, c_half_in);
    gemm(Trans::kNo, Trans::kYes, 2.0f, x, w, 0.5f, c_half);
    const std::vector<float> half = c_half.to_vector();
    for (int64_t i = 0; i < m * n; ++i) {
      ASSERT_LE(std::fabs(half[i] - rh.value[i]), rh.bound[i] + std::fabs(rh.value[i]) * 0x1p-8)
          << i;
    }
    const auto [one_thread, two_threads] = at_one_and_two_threads(2.0f, x, w, 0.5f, c0);
    if (m <= 8) {
      EXPECT_EQ(one_thread, two_threads);
    }
  }
}

// 2 to 8 fp32 rows, and 1 to 8 bf16 ones, against weights stored [n, k]
// (y = x W^T, decoding) take one dot product per output instead of sgemm
// (kFewRows): odd n, k below, at and past the vector lanes and one where 8
// rows of x exceed L1 (weights then go two rows at a time), rows in one tile
// of up to 8 and in several, from strided
// views (x a column block, W rows padded, c a column block), each scaling:
// within Higham's bound of the exact result; and the bits do not depend on
// the thread count. One fp32 row (sgemv) and 33 rows (sgemm) are checked alike.
TEST(GemmTest, FewRowsTimesWeightsTakeOneDotProductPerOutput) {
  for (DType dtype : {DType::kF32, DType::kBF16}) {
    for (int64_t m : {1, 2, 3, 4, 5, 7, 8, 9, 12, 16, 17, 32, 33}) {
      for (int64_t n : {1, 3, 130}) {
        for (int64_t k : {1, 15, 16, 33, 300, 1100}) {  // 1100: 8 rows exceed L1
          const std::string what = std::string(dtype_name(dtype)) + " m=" + std::to_string(m) +
                                   " n=" + std::to_string(n) + " k=" + std::to_string(k);
          SCOPED_TRACE(what);
          Tensor x_wide = Tensor::empty({m, 2 * k}), w_wide = Tensor::empty({n, k + 5});
          Tensor c0 = Tensor::empty({m, n});
          fill_uniform(x_wide, "fx");
          fill_uniform(w_wide, "fw");
          fill_uniform(c0, "fc");
          const Tensor x = x_wide.to(dtype).slice(1, 0, k), w = w_wide.to(dtype).slice(1, 0, k);
          for (const Scaling& sc : kScalings) {
            Tensor c_wide = Tensor::zeros({m, 2 * n});
            Tensor c = c_wide.slice(1, n, n);
            c.copy_from(c0);
            gemm(Trans::kNo, Trans::kYes, sc.alpha, x, w, sc.beta, c);
            expect_matches(
                c,
                reference_gemm(Trans::kNo, Trans::kYes, sc.alpha, x.to(DType::kF32),
                               w.to(DType::kF32), sc.beta, c0),
                what + " alpha=" + std::to_string(sc.alpha) + " beta=" + std::to_string(sc.beta));
          }
          const auto [one_thread, two_threads] = at_one_and_two_threads(1.0f, x, w, 0.0f, c0);
          if (m <= kFewRows && (m >= 2 || dtype == DType::kBF16)) {
            EXPECT_EQ(one_thread, two_threads);
          }
        }
      }
    }
  }
}

// A row's result in the few-rows product does not depend on the rows beside
// it: each output sums its own products lane by lane in an order fixed when
// compiled, whether the row is one of 2 or of 32, in the first tile of 8
// rows or a later one, and whether the weights go one row at a time or two
// (k 2100: 8 rows of x exceed L1, 2 do not). So a sequence decodes to the
// same bits alone or in a batch. fp32 from 2 rows (one row is sgemv's), bf16
// from 1; odd n leaves a weight row unpaired and n 131 at k 2100 spans
// several weight blocks.
TEST(GemmTest, FewRowsGiveEachRowTheSameBitsAtAnyRowCount) {
  for (DType dtype : {DType::kF32, DType::kBF16}) {
    for (int64_t k : {int64_t{300}, int64_t{2100}}) {
      const int64_t n = 131, rows = kFewRows;
      SCOPED_TRACE(std::string(dtype_name(dtype)) + " k=" + std::to_string(k));
      Tensor x_all = Tensor::empty({rows, k}), w_wide = Tensor::empty({n, k + 3});
      fill_uniform(x_all, "rx");
      fill_uniform(w_wide, "rw");
      const Tensor x = x_all.to(dtype), w = w_wide.to(dtype).slice(1, 0, k);
      Tensor all = Tensor::empty({rows, n});
      gemm(Trans::kNo, Trans::kYes, 1.0f, x, w, 0.0f, all);
      for (int64_t m = dtype == DType::kF32 ? 2 : 1; m < rows; ++m) {
        for (int64_t first : {int64_t{0}, rows - m}) {
          Tensor some = Tensor::empty({m, n});
          gemm(Trans::kNo, Trans::kYes, 1.0f, x.slice(0, first, m), w, 0.0f, some);
          EXPECT_EQ(some.to_vector(), all.slice(0, first, m).to_vector())
              << "m=" << m << " first=" << first;
        }
      }
    }
  }
}

TEST(GemmTest, LinearLayerIdentities) {
  // The three products of a linear layer (see gemm.h) on one set of operands:
  // y = x W^T, dx = dy W, dW += dy^T x.
  const int64_t tokens = 9, in = 6, out = 4;
  Tensor x = Tensor::empty({tokens, in}), w = Tensor::empty({out, in});
  Tensor dy = Tensor::empty({tokens, out}), dw0 = Tensor::empty({out, in});
  fill_uniform(x, "x");
  fill_uniform(w, "w");
  fill_uniform(dy, "dy");
  fill_uniform(dw0, "dw");
  Tensor y = Tensor::empty({tokens, out}), dx = Tensor::empty({tokens, in});
  Tensor dw = dw0.clone();
  gemm(Trans::kNo, Trans::kYes, 1.0f, x, w, 0.0f, y);
  gemm(Trans::kNo, Trans::kNo, 1.0f, dy, w, 0.0f, dx);
  gemm(Trans::kYes, Trans::kNo, 1.0f, dy, x, 1.0f, dw);
  for (int64_t t = 0; t < tokens; ++t) {
    for (int64_t o = 0; o < out; ++o) {
      double ref = 0, abs_ref = 0;
      for (int64_t i = 0; i < in; ++i) {
        ref += static_cast<double>(x(t, i)) * w(o, i);
        abs_ref += std::fabs(static_cast<double>(x(t, i)) * w(o, i));
      }
      EXPECT_NEAR(y(t, o), ref, higham_gamma(in + 2) * abs_ref);
    }
  }
  expect_matches(
      dx, reference_gemm(Trans::kNo, Trans::kNo, 1.0, dy, w, 0.0, Tensor::zeros({tokens, in})),
      "dx");
  expect_matches(dw, reference_gemm(Trans::kYes, Trans::kNo, 1.0, dy, x, 1.0, dw0), "dW");
}

TEST(GemmTest, EmptyRowsAreANoOp) {
  Tensor a = Tensor::empty({0, 4}), b = Tensor::empty({4, 3}), c = Tensor::empty({0, 3});
  EXPECT_NO_THROW(gemm(Trans::kNo, Trans::kNo, 1.0f, a, b, 0.0f, c));
}

TEST(GemmTest, ShapesThatDoNotChainThrow) {
  Tensor a = Tensor::zeros({4, 3}), b = Tensor::zeros({3, 5}), c = Tensor::zeros({4, 5});
  EXPECT_NO_THROW(gemm(Trans::kNo, Trans::kNo, 1.0f, a, b, 0.0f, c));
  // Inner dimensions differ.
  EXPECT_THROW(gemm(Trans::kYes, Trans::kNo, 1.0f, a, b, 0.0f, c), InternalError);
  EXPECT_THROW(gemm(Trans::kNo, Trans::kYes, 1.0f, a, b, 0.0f, c), InternalError);
  // c has the wrong shape.
  Tensor c_rows = Tensor::zeros({5, 5}), c_cols = Tensor::zeros({4, 4}),
         c_t = Tensor::zeros({5, 4});
  EXPECT_THROW(gemm(Trans::kNo, Trans::kNo, 1.0f, a, b, 0.0f, c_rows), InternalError);
  EXPECT_THROW(gemm(Trans::kNo, Trans::kNo, 1.0f, a, b, 0.0f, c_cols), InternalError);
  EXPECT_THROW(gemm(Trans::kNo, Trans::kNo, 1.0f, a, b, 0.0f, c_t), InternalError);
  // Operands that are not 2-d.
  Tensor v = Tensor::zeros({3}), cube = Tensor::zeros({4, 3, 1});
  EXPECT_THROW(gemm(Trans::kNo, Trans::kNo, 1.0f, cube, b, 0.0f, c), InternalError);
  EXPECT_THROW(gemm(Trans::kNo, Trans::kNo, 1.0f, a, v, 0.0f, c), InternalError);
  Tensor c3 = c.view({4, 5, 1});
  EXPECT_THROW(gemm(Trans::kNo, Trans::kNo, 1.0f, a, b, 0.0f, c3), InternalError);
}

}  // namespace
}  // namespace colrow
