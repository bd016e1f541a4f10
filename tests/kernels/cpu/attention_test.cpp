// Causal attention kernels against the double reference
// (support/attention_reference): probabilities, output, dq, dk, dv within
// rigorous fp32 bounds for MHA, GQA, MQA, several sequences per batch and a
// sequence longer than one block of query rows; scores far past expf's range;
// central differences; repeated backward; results independent of the thread
// count; shape errors.
#include "kernels/cpu/attention.h"

#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "colrow/core/error.h"
#include "colrow/runtime/threads.h"
#include "kernels/attention_case.h"
#include "nn/layer_test_helpers.h"
#include "support/attention_reference.h"

namespace colrow {
namespace {

namespace cpu = kernels::cpu;
using reference::BMatrix;
using reference::check_within;
using testing::random_tensor;
using testing::same_bits;

using Case = testing::AttentionCase;

// MHA, GQA (3 query heads per KV head), MQA, and seq 130 > the 64-row blocks
// the kernel works in (blocks of 64, 64, 2); then sliding windows: of 3 keys,
// of 1 (each query sees itself only), and of 70 across the row blocks.
const Case kCases[] = {{2, 5, 4, 4, 8},    {2, 7, 6, 2, 4},      {3, 4, 4, 1, 6},
                       {1, 130, 2, 1, 4},  {2, 1, 2, 2, 4},      {2, 7, 6, 2, 4, 3},
                       {1, 5, 2, 2, 4, 1}, {1, 130, 2, 1, 4, 70}};

struct Inputs {
  Tensor q, k, v, dout;
};
Inputs inputs(const Case& c, uint64_t seed, float q_scale = 1.0f) {
  Inputs in{random_tensor({c.tokens(), c.q_width()}, seed),
            random_tensor({c.tokens(), c.kv_width()}, seed + 1),
            random_tensor({c.tokens(), c.kv_width()}, seed + 2),
            random_tensor({c.tokens(), c.q_width()}, seed + 3)};
  for (int64_t i = 0; i < in.q.numel(); ++i) in.q.data()[i] *= q_scale;
  return in;
}

struct Outputs {
  Tensor probs, out, dq, dk, dv;
};
Outputs run(const Case& c, const Inputs& in) {
  Outputs o{Tensor::empty({c.batch, c.n_head, c.seq, c.seq}),
            Tensor::empty({c.tokens(), c.q_width()}), Tensor::empty({c.tokens(), c.q_width()}),
            Tensor::empty({c.tokens(), c.kv_width()}), Tensor::empty({c.tokens(), c.kv_width()})};
  Tensor scratch = Tensor::empty(cpu::attention_backward_scratch_shape(c.seq));
  cpu::attention_forward(in.q, in.k, in.v, c.window, o.probs, o.out);
  cpu::attention_backward(in.q, in.k, in.v, o.probs, in.dout, o.dq, o.dk, o.dv, scratch);
  return o;
}

reference::CoreResult reference_of(const Case& c, const Inputs& in) {
  return testing::attention_reference(c, in.q, in.k, in.v, in.dout);
}

void expect_matches_reference(const Case& c, const Inputs& in, const Outputs& o) {
  const reference::CoreResult ref = reference_of(c, in);
  // Masked probabilities have bound 0: they must be exactly zero.
  EXPECT_EQ(check_within(o.probs.to_vector(), ref.probs), "") << "probs";
  EXPECT_EQ(check_within(o.out.to_vector(), ref.out), "") << "out";
  EXPECT_EQ(check_within(o.dq.to_vector(), ref.dq), "") << "dq";
  EXPECT_EQ(check_within(o.dk.to_vector(), ref.dk), "") << "dk";
  EXPECT_EQ(check_within(o.dv.to_vector(), ref.dv), "") << "dv";
}

TEST(AttentionKernelTest, MatchesReference) {
  for (const Case& c : kCases) {
    SCOPED_TRACE(c.name());
    const Inputs in = inputs(c, 100);
    expect_matches_reference(c, in, run(c, in));
  }
}

// Scores up to ~250 in magnitude: exp without the max subtracted would
// overflow (past 88.7); the softmax must stay finite and within its bound.
// (The bound grows with |s| u, the rounding of s - max, as it must.)
TEST(AttentionKernelTest, LargeScoresStayFinite) {
  const Case c{2, 9, 2, 1, 8};
  const Inputs in = inputs(c, 200, /*q_scale=*/80.0f);
  const Outputs o = run(c, in);
  for (const Tensor* t : {&o.probs, &o.out, &o.dq, &o.dk, &o.dv}) {
    for (float v : t->to_vector()) ASSERT_TRUE(std::isfinite(v));
  }
  expect_matches_reference(c, in, o);
}

// backward overwrites dq, dk, dv (it does not accumulate) and leaves probs
// as forward left them, so a second call gives the same bits.
TEST(AttentionKernelTest, RepeatedBackwardGivesTheSameBits) {
  const Case c = kCases[1];
  const Inputs in = inputs(c, 300);
  const Outputs o = run(c, in);
  const Tensor probs = o.probs.clone();
  Tensor dq = Tensor::full(o.dq.shape(), 7.0f), dk = Tensor::full(o.dk.shape(), 7.0f),
         dv = Tensor::full(o.dv.shape(), 7.0f);
  Tensor scratch = Tensor::full(cpu::attention_backward_scratch_shape(c.seq), 7.0f);
  cpu::attention_backward(in.q, in.k, in.v, o.probs, in.dout, dq, dk, dv, scratch);
  EXPECT_TRUE(same_bits(o.probs, probs));
  EXPECT_TRUE(same_bits(dq, o.dq));
  EXPECT_TRUE(same_bits(dk, o.dk));
  EXPECT_TRUE(same_bits(dv, o.dv));
}

// Each (sequence, head) is computed by one thread with single-threaded GEMMs
// in the same order whatever the thread count: 1 and 4 threads agree bit for
// bit (this shape is large enough to take the parallel path).
TEST(AttentionKernelTest, ThreadCountDoesNotChangeResults) {
  const Case c{2, 70, 4, 2, 8};
  const Inputs in = inputs(c, 400);
  const int before = blas_threads();
  set_threads(1);
  const Outputs one = run(c, in);
  set_threads(4);
  const Outputs four = run(c, in);
  set_threads(before);
  EXPECT_TRUE(same_bits(one.probs, four.probs));
  EXPECT_TRUE(same_bits(one.out, four.out));
  EXPECT_TRUE(same_bits(one.dq, four.dq));
  EXPECT_TRUE(same_bits(one.dk, four.dk));
  EXPECT_TRUE(same_bits(one.dv, four.dv));
  expect_matches_reference(c, in, four);
}

// Central differences of L = sum(g * out) for every entry of q, k and v
// against the backward with dout = g. With D the fp32 difference quotient,
// D* the same quotient of the exact function (the double reference at the two
// perturbed inputs) and L' the exact derivative:
//   |grad - D| <= |grad - L'| + |L' - D*| + |D* - D|
// where |grad - L'| is the reference's bound on the gradient, |L' - D*| (the
// truncation error) is computed exactly, and |D* - D| <= (E+ + E-) / (2h)
// with E = sum |g| e(out), the reference's bound on the fp32 loss at each
// perturbed point. Nothing is estimated.
TEST(AttentionKernelTest, BackwardMatchesFiniteDifferences) {
  const Case c{2, 3, 2, 1, 2};
  Inputs in = inputs(c, 500);
  const Outputs o = run(c, in);
  const reference::CoreResult ref = reference_of(c, in);
  const Tensor& g = in.dout;
  auto loss = [&](double* exact, double* error) {
    const Outputs p = run(c, in);
    const reference::CoreResult r = reference_of(c, in);
    double sum = 0.0;
    *exact = *error = 0.0;
    for (int64_t i = 0; i < g.numel(); ++i) {
      sum += static_cast<double>(p.out.data()[i]) * g.data()[i];
      *exact += r.out[i].v * g.data()[i];
      *error += std::fabs(g.data()[i]) * r.out[i].e;
    }
    return sum;
  };
  constexpr float kStep = 0x1p-5f;
  struct Operand {
    const char* name;
    Tensor* input;
    const Tensor* grad;
    const BMatrix* grad_ref;
  };
  for (const Operand& op :
       {Operand{"q", &in.q, &o.dq, &ref.dq}, Operand{"k", &in.k, &o.dk, &ref.dk},
        Operand{"v", &in.v, &o.dv, &ref.dv}}) {
    for (int64_t i = 0; i < op.input->numel(); ++i) {
      float& value = op.input->data()[i];
      const float original = value;
      double exact_plus, exact_minus, e_plus, e_minus;
      value = original + kStep;
      const double l_plus = loss(&exact_plus, &e_plus);
      value = original - kStep;
      const double l_minus = loss(&exact_minus, &e_minus);
      value = original;
      const double step = static_cast<double>(original + kStep) - (original - kStep);
      const double fd = (l_plus - l_minus) / step;
      const double truncation = std::fabs((exact_plus - exact_minus) / step - (*op.grad_ref)[i].v);
      EXPECT_NEAR(op.grad->data()[i], fd,
                  (*op.grad_ref)[i].e + truncation + (e_plus + e_minus) / step)
          << op.name << "[" << i << "]";
    }
  }
}

TEST(AttentionKernelTest, ShapeErrorsAreInternalErrors) {
  const Case c = kCases[0];
  const Inputs in = inputs(c, 600);
  Tensor probs = Tensor::empty({c.batch, c.n_head, c.seq, c.seq});
  Tensor out = Tensor::empty({c.tokens(), c.q_width()});
  Tensor bad_probs = Tensor::empty({c.batch, c.n_head + 1, c.seq, c.seq});
  EXPECT_THROW(cpu::attention_forward(in.q, in.k, in.v, /*window=*/0, bad_probs, out),
               InternalError)
      << "heads do not divide q";
  Tensor short_out = Tensor::empty({c.tokens() - 1, c.q_width()});
  EXPECT_THROW(cpu::attention_forward(in.q, in.k, in.v, /*window=*/0, probs, short_out),
               InternalError);
  const Tensor k3 = random_tensor({c.tokens(), 3 * c.head_dim}, 1);
  EXPECT_THROW(cpu::attention_forward(in.q, k3, k3, /*window=*/0, probs, out), InternalError)
      << "3 KV heads for 4 query heads";
  EXPECT_THROW(cpu::attention_forward(in.q, in.k, in.v, /*window=*/-1, probs, out), InternalError)
      << "a negative window";
  cpu::attention_forward(in.q, in.k, in.v, /*window=*/0, probs, out);
  Tensor dq = Tensor::empty(in.q.shape()), dk = Tensor::empty(in.k.shape()),
         dv = Tensor::empty(in.v.shape());
  Tensor small = Tensor::empty({1, c.seq - 1, c.seq - 1});
  EXPECT_THROW(cpu::attention_backward(in.q, in.k, in.v, probs, in.dout, dq, dk, dv, small),
               InternalError)
      << "scratch too small";
}

}  // namespace
}  // namespace colrow
