// add_bias and accumulate_bias_grad: bitwise results on small integers and
// Higham-bounded ones on random floats, accumulation over repeated calls, dy
// and y as column blocks of wider matrices (row stride > features), feature
// counts around the kernel's 256-wide blocks, sizes past 2^15 elements (the
// OpenMP path), zero tokens, and InternalError on mismatched shapes.
#include "kernels/cpu/bias.h"

#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "colrow/core/error.h"
#include "colrow/core/philox.h"

namespace colrow {
namespace {

namespace cpu = kernels::cpu;

constexpr double kUnitRoundoff = 1.0 / (1 << 24);  // fp32: u = 2^-24

// Higham's gamma_n = n u / (1 - n u): any order of summing n + 1 terms in fp32
// errs by at most gamma_n times the sum of their magnitudes.
double higham_gamma(int64_t n) {
  return n * kUnitRoundoff / (1.0 - n * kUnitRoundoff);
}

// Uniform in [-1, 1), deterministic per (name, element), over any 2-d view.
void fill_uniform(Tensor& t, const std::string& name) {
  const uint64_t stream = name_stream(name);
  const int64_t cols = t.ndim() == 2 ? t.size(1) : t.numel();
  const int64_t rows = t.ndim() == 2 ? t.size(0) : 1;
  for (int64_t i = 0; i < rows; ++i) {
    for (int64_t j = 0; j < cols; ++j) {
      const float v = 2.0f * uniform01(5, stream, static_cast<uint64_t>(i * cols + j)) - 1.0f;
      if (t.ndim() == 2) {
        t(i, j) = v;
      } else {
        t.data()[j] = v;
      }
    }
  }
}

// Integers in [-8, 8].
void fill_small_integers(Tensor& t, const std::string& name) {
  fill_uniform(t, name);
  float* p = t.data();
  const int64_t cols = t.ndim() == 2 ? t.size(1) : t.numel();
  const int64_t rows = t.ndim() == 2 ? t.size(0) : 1;
  const int64_t ld = t.ndim() == 2 ? t.row_stride() : 0;
  for (int64_t i = 0; i < rows; ++i) {
    for (int64_t j = 0; j < cols; ++j) p[i * ld + j] = std::round(8.0f * p[i * ld + j]);
  }
}

// Shapes: tiny, one short of / one past a 256-feature block, several blocks
// with a ragged tail, and two past 2^15 elements (parallel path).
struct Dims {
  int64_t tokens, features;
};
const Dims kDims[] = {{1, 1},   {3, 5},     {4, 255},   {4, 256},  {5, 257},
                      {2, 513}, {200, 300}, {64, 1000}, {33, 1031}};

TEST(BiasTest, AddBiasIsOneExactAddPerElement) {
  // Each output is one fp32 addition y + b, the same rounding the test does.
  for (const Dims& d : kDims) {
    Tensor y = Tensor::empty({d.tokens, d.features});
    Tensor b = Tensor::empty({d.features});
    fill_uniform(y, "y");
    fill_uniform(b, "b");
    const Tensor y0 = y.clone();
    cpu::add_bias(y, b);
    for (int64_t t = 0; t < d.tokens; ++t) {
      for (int64_t j = 0; j < d.features; ++j) {
        ASSERT_EQ(y(t, j), y0(t, j) + b.data()[j])
            << "[" << d.tokens << ", " << d.features << "] at " << t << "," << j;
      }
    }
  }
}

TEST(BiasTest, AddBiasOnColumnBlock) {
  // y is a rank's column block of a wider activation: only the block changes.
  const int64_t tokens = 150, width = 700, start = 130, features = 300;  // 45000 elements
  Tensor wide = Tensor::empty({tokens, width});
  fill_uniform(wide, "wide");
  const Tensor before = wide.clone();
  Tensor y = wide.slice(-1, start, features);
  Tensor b = Tensor::empty({features});
  fill_uniform(b, "b");
  cpu::add_bias(y, b);
  for (int64_t t = 0; t < tokens; ++t) {
    for (int64_t j = 0; j < width; ++j) {
      const bool inside = j >= start && j < start + features;
      const float want = inside ? before(t, j) + b.data()[j - start] : before(t, j);
      ASSERT_EQ(wide(t, j), want) << t << "," << j;
    }
  }
}

TEST(BiasTest, BiasGradOfSmallIntegersIsExactAndAccumulates) {
  // Integers |.| <= 8 summed over <= 200 tokens stay far below 2^24, so every
  // partial sum is exact in any order: two calls must give db0 + 2 colsum exactly.
  for (const Dims& d : kDims) {
    Tensor dy = Tensor::empty({d.tokens, d.features});
    Tensor db = Tensor::empty({d.features});
    fill_small_integers(dy, "dy");
    fill_small_integers(db, "db0");
    const std::vector<float> db0 = db.to_vector();
    cpu::accumulate_bias_grad(dy, db);
    std::vector<double> colsum(static_cast<size_t>(d.features), 0.0);
    for (int64_t t = 0; t < d.tokens; ++t) {
      for (int64_t j = 0; j < d.features; ++j) colsum[j] += dy(t, j);
    }
    for (int64_t j = 0; j < d.features; ++j) {
      ASSERT_EQ(db.data()[j], db0[j] + colsum[j])
          << "first call [" << d.tokens << ", " << d.features << "] at " << j;
    }
    cpu::accumulate_bias_grad(dy, db);
    for (int64_t j = 0; j < d.features; ++j) {
      ASSERT_EQ(db.data()[j], db0[j] + 2 * colsum[j])
          << "second call [" << d.tokens << ", " << d.features << "] at " << j;
    }
  }
}

TEST(BiasTest, BiasGradOfFloatsWithinHighamBound) {
  // After two calls db[j] is a sum of 2T + 1 fp32 terms (db0 and each dy[t, j]
  // twice), so |err| <= gamma_{2T} (|db0| + 2 sum_t |dy[t, j]|).
  for (const Dims& d : kDims) {
    Tensor dy = Tensor::empty({d.tokens, d.features});
    Tensor db = Tensor::empty({d.features});
    fill_uniform(dy, "dy");
    fill_uniform(db, "db0");
    const std::vector<float> db0 = db.to_vector();
    cpu::accumulate_bias_grad(dy, db);
    cpu::accumulate_bias_grad(dy, db);
    for (int64_t j = 0; j < d.features; ++j) {
      double sum = 0, abs_sum = 0;
      for (int64_t t = 0; t < d.tokens; ++t) {
        sum += dy(t, j);
        abs_sum += std::fabs(dy(t, j));
      }
      const double want = db0[j] + 2 * sum;
      const double bound = higham_gamma(2 * d.tokens) * (std::fabs(db0[j]) + 2 * abs_sum);
      ASSERT_NEAR(db.data()[j], want, bound)
          << "[" << d.tokens << ", " << d.features << "] at " << j;
    }
  }
}

TEST(BiasTest, BiasGradOfColumnBlock) {
  // dy is a column block of a wider gradient (row stride > features): the sums
  // must follow the row stride, never read the neighbouring columns.
  for (const Dims& d : {Dims{3, 5}, Dims{7, 257}, Dims{120, 300}}) {
    const int64_t width = d.features + 11, start = 6;
    Tensor wide = Tensor::empty({d.tokens, width});
    fill_small_integers(wide, "wide");
    const Tensor dy = wide.slice(-1, start, d.features);
    ASSERT_GT(dy.row_stride(), dy.size(1));
    Tensor db = Tensor::zeros({d.features});
    cpu::accumulate_bias_grad(dy, db);
    for (int64_t j = 0; j < d.features; ++j) {
      double want = 0;
      for (int64_t t = 0; t < d.tokens; ++t) want += wide(t, start + j);
      ASSERT_EQ(db.data()[j], want) << "[" << d.tokens << ", " << d.features << "] at " << j;
    }
  }
}

TEST(BiasTest, ZeroTokens) {
  Tensor y = Tensor::empty({0, 6});
  Tensor b = Tensor::full({6}, 1.0f);
  EXPECT_NO_THROW(cpu::add_bias(y, b));
  Tensor db = Tensor::full({6}, 2.5f);
  cpu::accumulate_bias_grad(y, db);
  EXPECT_EQ(db.to_vector(), std::vector<float>(6, 2.5f));
}

TEST(BiasTest, ShapeMismatchThrows) {
  Tensor y = Tensor::zeros({4, 6});
  Tensor short_bias = Tensor::zeros({5});
  Tensor matrix_bias = Tensor::zeros({1, 6});
  Tensor flat = Tensor::zeros({24});
  Tensor cube = Tensor::zeros({2, 2, 6});
  Tensor b = Tensor::zeros({6});
  EXPECT_THROW(cpu::add_bias(y, short_bias), InternalError);
  EXPECT_THROW(cpu::add_bias(y, matrix_bias), InternalError);
  EXPECT_THROW(cpu::add_bias(flat, b), InternalError);
  EXPECT_THROW(cpu::add_bias(cube, b), InternalError);
  EXPECT_THROW(cpu::accumulate_bias_grad(y, short_bias), InternalError);
  EXPECT_THROW(cpu::accumulate_bias_grad(y, matrix_bias), InternalError);
  EXPECT_THROW(cpu::accumulate_bias_grad(cube, b), InternalError);
  // A failed call leaves its outputs alone.
  EXPECT_EQ(y.to_vector(), std::vector<float>(24, 0.0f));
}

}  // namespace
}  // namespace colrow
