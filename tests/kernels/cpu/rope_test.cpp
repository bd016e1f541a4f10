// RoPE kernels against Hugging Face LLaMA's formula (support/attention_reference:
// inv_freq = theta^(-2i/hd), cos/sin duplicated over both halves, x cos +
// rotate_half(x) sin, positions restarting in every sequence): the table, the
// forward and the backward within rigorous fp32 bounds; position 0 is the
// identity bit for bit; the backward inverts the forward and is its
// transpose; in-place use; strided rows (q and k as column blocks of
// attention's fused qkv output); central differences; shape errors.
#include "kernels/cpu/rope.h"

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "colrow/core/error.h"
#include "nn/layer_test_helpers.h"
#include "support/attention_reference.h"

namespace colrow {
namespace {

namespace cpu = kernels::cpu;
using reference::BMatrix;
using reference::check_within;
using reference::Matrix;
using testing::random_tensor;
using testing::same_bits;
using testing::to_matrix;

constexpr double kU = reference::kUnitRoundoff;

struct RopeCase {
  int64_t batch, seq, heads, head_dim;
  double theta;
};
// LLaMA's 10000 and LLaMA 3's 500000; head_dim 2 (one pair) up to 16.
const RopeCase kCases[] = {
    {2, 5, 3, 8, 10000.0}, {1, 9, 2, 16, 500000.0}, {3, 4, 4, 2, 10000.0}, {2, 6, 1, 4, 100.0}};

// HF's default inverse frequencies, theta^(-2i / head_dim), i < head_dim / 2.
std::vector<double> inverse_frequencies(int64_t head_dim, double theta) {
  std::vector<double> f(static_cast<size_t>(head_dim / 2));
  for (size_t i = 0; i < f.size(); ++i) f[i] = 1.0 / std::pow(theta, (2.0 * i) / head_dim);
  return f;
}

struct Table {
  Tensor cos, sin;
};
Table table(const RopeCase& c) {
  Table t;
  cpu::rope_table(c.seq, inverse_frequencies(c.head_dim, c.theta), t.cos, t.sin);
  return t;
}

// The table is HF's cos/sin of pos * inv_freq[i], inv_freq[i] = 1 / theta^(2i/hd),
// rounded once to fp32: within u |value| (plus 1e-15 for the double angle).
TEST(RopeTest, TableIsHfCosSinRoundedOnce) {
  for (const RopeCase& c : kCases) {
    const Table t = table(c);
    const int64_t half = c.head_dim / 2;
    ASSERT_EQ(t.cos.shape(), (Shape{c.seq, half}));
    ASSERT_EQ(t.sin.shape(), (Shape{c.seq, half}));
    for (int64_t p = 0; p < c.seq; ++p) {
      for (int64_t i = 0; i < half; ++i) {
        const double inv_freq = 1.0 / std::pow(c.theta, (2.0 * i) / c.head_dim);
        const double cos_ref = std::cos(p * inv_freq), sin_ref = std::sin(p * inv_freq);
        EXPECT_NEAR(t.cos(p, i), cos_ref, kU * std::fabs(cos_ref) + 1e-15) << p << ", " << i;
        EXPECT_NEAR(t.sin(p, i), sin_ref, kU * std::fabs(sin_ref) + 1e-15) << p << ", " << i;
      }
    }
  }
}

TEST(RopeTest, ForwardAndBackwardMatchHfFormula) {
  for (const RopeCase& c : kCases) {
    SCOPED_TRACE("seq " + std::to_string(c.seq) + ", head_dim " + std::to_string(c.head_dim));
    const int64_t tokens = c.batch * c.seq, width = c.heads * c.head_dim;
    const Table t = table(c);
    const Tensor x = random_tensor({tokens, width}, 11);
    Tensor y = Tensor::empty({tokens, width}), dx = Tensor::empty({tokens, width});
    cpu::rope_forward(x, t.cos, t.sin, y);
    cpu::rope_backward(x, t.cos, t.sin, dx);
    const BMatrix xb = reference::exact(to_matrix(x));
    EXPECT_EQ(check_within(y.to_vector(), reference::rope(xb, tokens, width, c.seq, c.head_dim,
                                                          c.theta, /*inverse=*/false)),
              "")
        << "forward";
    EXPECT_EQ(check_within(dx.to_vector(), reference::rope(xb, tokens, width, c.seq, c.head_dim,
                                                           c.theta, /*inverse=*/true)),
              "")
        << "backward";
  }
}

// cos 0 = 1 and sin 0 = 0 exactly, so x 1 - x' 0 = x: every token at position
// 0 (the first of each sequence; every token when seq = 1) is unchanged.
TEST(RopeTest, PositionZeroIsTheIdentity) {
  const RopeCase c{3, 4, 2, 8, 10000.0};
  const int64_t width = c.heads * c.head_dim;
  const Table t = table(c);
  const Tensor x = random_tensor({c.batch * c.seq, width}, 12);
  Tensor y = Tensor::empty(x.shape()), dx = Tensor::empty(x.shape());
  cpu::rope_forward(x, t.cos, t.sin, y);
  cpu::rope_backward(x, t.cos, t.sin, dx);
  for (int64_t b = 0; b < c.batch; ++b) {
    EXPECT_TRUE(same_bits(y.slice(0, b * c.seq, 1), x.slice(0, b * c.seq, 1))) << "sequence " << b;
    EXPECT_TRUE(same_bits(dx.slice(0, b * c.seq, 1), x.slice(0, b * c.seq, 1))) << "sequence " << b;
  }
  const Table one = table({1, 1, 2, 8, 10000.0});
  cpu::rope_forward(x, one.cos, one.sin, y);
  EXPECT_TRUE(same_bits(y, x)) << "seq 1: every token at position 0";
}

// Positions restart in every sequence: equal sequences rotate to equal bits.
TEST(RopeTest, PositionsRestartInEverySequence) {
  const RopeCase c{3, 5, 2, 8, 10000.0};
  const int64_t width = c.heads * c.head_dim;
  const Table t = table(c);
  const Tensor one = random_tensor({c.seq, width}, 13);
  Tensor x = Tensor::empty({c.batch * c.seq, width}), y = Tensor::empty(x.shape());
  for (int64_t b = 0; b < c.batch; ++b) x.slice(0, b * c.seq, c.seq).copy_from(one);
  cpu::rope_forward(x, t.cos, t.sin, y);
  for (int64_t b = 1; b < c.batch; ++b) {
    EXPECT_TRUE(same_bits(y.slice(0, b * c.seq, c.seq), y.slice(0, 0, c.seq))) << b;
  }
}

// backward(forward(x)) = x up to rounding (a rotation by angle, then by
// -angle), within the bound of the two rounded rotations; and backward is the
// transpose of forward: <R x, g> = <x, R^T g>, both sides in double from the
// fp32 results, within the sum of their bounds.
TEST(RopeTest, BackwardIsTheInverseAndTheTranspose) {
  for (const RopeCase& c : kCases) {
    const int64_t tokens = c.batch * c.seq, width = c.heads * c.head_dim;
    const Table t = table(c);
    const Tensor x = random_tensor({tokens, width}, 14);
    const Tensor g = random_tensor({tokens, width}, 15);
    Tensor y = Tensor::empty(x.shape()), back = Tensor::empty(x.shape());
    cpu::rope_forward(x, t.cos, t.sin, y);
    cpu::rope_backward(y, t.cos, t.sin, back);
    const BMatrix xb = reference::exact(to_matrix(x));
    BMatrix round_trip =
        reference::rope(reference::rope(xb, tokens, width, c.seq, c.head_dim, c.theta, false),
                        tokens, width, c.seq, c.head_dim, c.theta, true);
    // The composition is the identity in exact arithmetic; the bound stays.
    for (size_t i = 0; i < round_trip.size(); ++i) round_trip[i].v = xb[i].v;
    EXPECT_EQ(check_within(back.to_vector(), round_trip), "") << "inverse";

    Tensor rg = Tensor::empty(x.shape());
    cpu::rope_backward(g, t.cos, t.sin, rg);
    const BMatrix ry = reference::rope(xb, tokens, width, c.seq, c.head_dim, c.theta, false);
    const BMatrix rrg = reference::rope(reference::exact(to_matrix(g)), tokens, width, c.seq,
                                        c.head_dim, c.theta, true);
    double lhs = 0.0, rhs = 0.0, bound = 0.0;
    for (int64_t i = 0; i < x.numel(); ++i) {
      lhs += static_cast<double>(y.data()[i]) * g.data()[i];
      rhs += static_cast<double>(x.data()[i]) * rg.data()[i];
      bound += ry[i].e * std::fabs(g.data()[i]) + rrg[i].e * std::fabs(x.data()[i]);
    }
    EXPECT_NEAR(lhs, rhs, bound + 1e-12) << "transpose";
  }
}

TEST(RopeTest, InPlaceMatchesOutOfPlace) {
  const RopeCase c = kCases[0];
  const Table t = table(c);
  const Tensor x = random_tensor({c.batch * c.seq, c.heads * c.head_dim}, 16);
  Tensor y = Tensor::empty(x.shape()), dx = Tensor::empty(x.shape());
  cpu::rope_forward(x, t.cos, t.sin, y);
  cpu::rope_backward(x, t.cos, t.sin, dx);
  Tensor inplace = x.clone();
  cpu::rope_forward(inplace, t.cos, t.sin, inplace);
  EXPECT_TRUE(same_bits(inplace, y));
  inplace = x.clone();
  cpu::rope_backward(inplace, t.cos, t.sin, inplace);
  EXPECT_TRUE(same_bits(inplace, dx));
}

// x and y as column blocks of wider tensors (attention's fused qkv output:
// q's columns, then k's, then v's): the same bits as contiguous rows, the
// columns outside the block untouched, and in place on such a block too.
TEST(RopeTest, StridedRowsGiveTheContiguousBits) {
  const RopeCase c = kCases[0];
  const Table t = table(c);
  const int64_t tokens = c.batch * c.seq, width = c.heads * c.head_dim;
  const Tensor wide = random_tensor({tokens, 3 * width + 5}, 19);
  const Tensor x = wide.slice(1, width + 2, width);  // a block that starts off a head boundary
  ASSERT_FALSE(x.is_contiguous());
  const Tensor contiguous = x.clone();
  Tensor want = Tensor::empty(x.shape()), want_back = Tensor::empty(x.shape());
  cpu::rope_forward(contiguous, t.cos, t.sin, want);
  cpu::rope_backward(contiguous, t.cos, t.sin, want_back);

  Tensor y_wide = Tensor::full({tokens, 2 * width}, 7.0f);
  Tensor y = y_wide.slice(1, width, width);
  cpu::rope_forward(x, t.cos, t.sin, y);
  EXPECT_TRUE(same_bits(y.clone(), want)) << "strided x into strided y";
  for (float v : y_wide.slice(1, 0, width).clone().to_vector()) ASSERT_EQ(v, 7.0f);

  Tensor inplace_wide = wide.clone();
  Tensor inplace = inplace_wide.slice(1, width + 2, width);
  cpu::rope_backward(inplace, t.cos, t.sin, inplace);
  EXPECT_TRUE(same_bits(inplace.clone(), want_back)) << "in place on a block of columns";
  EXPECT_TRUE(
      same_bits(inplace_wide.slice(1, 0, width + 2).clone(), wide.slice(1, 0, width + 2).clone()))
      << "columns before the block";
  EXPECT_TRUE(same_bits(inplace_wide.slice(1, 2 * width + 2, width + 3).clone(),
                        wide.slice(1, 2 * width + 2, width + 3).clone()))
      << "columns after the block";
}

// Central differences of L = sum(g * rope(x)) against rope_backward(g). L is
// linear in x, so there is no truncation error: the difference quotient is off
// only by the fp32 errors of the two evaluations of L (bounded from the
// reference at each perturbed point) divided by the step, and the analytic
// gradient by its own bound.
TEST(RopeTest, BackwardMatchesFiniteDifferences) {
  const RopeCase c{2, 3, 2, 4, 10000.0};
  const int64_t tokens = c.batch * c.seq, width = c.heads * c.head_dim;
  const Table t = table(c);
  Tensor x = random_tensor({tokens, width}, 17);
  const Tensor g = random_tensor({tokens, width}, 18);
  Tensor y = Tensor::empty(x.shape()), dx = Tensor::empty(x.shape());
  cpu::rope_backward(g, t.cos, t.sin, dx);
  const BMatrix dx_ref = reference::rope(reference::exact(to_matrix(g)), tokens, width, c.seq,
                                         c.head_dim, c.theta, true);
  // Loss and its fp32 error bound: sum |g_i| e(y_i), from the reference at x.
  auto loss = [&](double* error) {
    cpu::rope_forward(x, t.cos, t.sin, y);
    const BMatrix ref = reference::rope(reference::exact(to_matrix(x)), tokens, width, c.seq,
                                        c.head_dim, c.theta, false);
    double sum = 0.0;
    *error = 0.0;
    for (int64_t i = 0; i < y.numel(); ++i) {
      sum += static_cast<double>(y.data()[i]) * g.data()[i];
      *error += std::fabs(g.data()[i]) * ref[i].e;
    }
    return sum;
  };
  constexpr float kStep = 0x1p-4f;
  for (int64_t i = 0; i < x.numel(); ++i) {
    const float original = x.data()[i];
    double e_plus = 0.0, e_minus = 0.0;
    x.data()[i] = original + kStep;
    const double l_plus = loss(&e_plus);
    x.data()[i] = original - kStep;
    const double l_minus = loss(&e_minus);
    x.data()[i] = original;
    const double step = static_cast<double>(original + kStep) - (original - kStep);
    const double fd = (l_plus - l_minus) / step;
    EXPECT_NEAR(dx.data()[i], fd, (e_plus + e_minus) / step + dx_ref[i].e) << "x[" << i << "]";
  }
}

TEST(RopeTest, ShapeErrorsAreInternalErrors) {
  Tensor cos, sin;
  cpu::rope_table(4, inverse_frequencies(8, 10000.0), cos, sin);
  Tensor y = Tensor::empty({8, 16});
  EXPECT_THROW(cpu::rope_forward(Tensor::zeros({8, 12}), cos, sin, y), InternalError)
      << "width not whole heads";
  EXPECT_THROW(cpu::rope_forward(Tensor::zeros({6, 16}), cos, sin, y), InternalError)
      << "tokens not whole sequences / shape mismatch";
  Tensor y6 = Tensor::empty({6, 16});
  EXPECT_THROW(cpu::rope_backward(Tensor::zeros({6, 16}), cos, sin, y6), InternalError)
      << "seq does not divide tokens";
  EXPECT_THROW(cpu::rope_table(4, {}, cos, sin), InternalError) << "no frequencies";
  EXPECT_THROW(cpu::rope_table(0, inverse_frequencies(8, 10000.0), cos, sin), InternalError)
      << "seq 0";
  EXPECT_THROW(cpu::rope_table(4, inverse_frequencies(8, 0.0), cos, sin), InternalError)
      << "theta 0: an infinite frequency";
  EXPECT_THROW(cpu::rope_table(4, {1.0, -0.5}, cos, sin), InternalError) << "a negative frequency";
}

}  // namespace
}  // namespace colrow
