// CUDA causal attention against the CPU kernel and the double reference
// (support/attention_reference): MHA, GQA (6 query heads on 2 KV heads), MQA,
// seq 1 to 100, head_dim 8 and 64, strided q/k/v views of a fused qkv buffer;
// scores far past expf's range; repeated runs give the same bits (backward
// overwrites dq, dk, dv and leaves probs alone); shape errors.
#include "kernels/cuda/attention.h"

#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "colrow/core/error.h"
#include "kernels/attention_case.h"
#include "kernels/cpu/attention.h"
#include "kernels/cuda/cuda_test_helpers.h"
#include "support/attention_reference.h"
#include "support/gpu.h"

namespace colrow {
namespace {

using testing::random_uniform;
using testing::same_bits;

namespace cpu = kernels::cpu;
namespace gpu = kernels::cuda;
using reference::BMatrix;

using Case = testing::AttentionCase;

// seq 1; GQA with 3 query heads per KV head; MQA at head_dim 64; odd seqs
// (33, 100) that are no multiple of a warp or a GEMM tile; MHA; sliding
// windows of 3 and of 40 (more than a warp's stride).
const Case kCases[] = {{2, 1, 2, 2, 8},       {2, 7, 6, 2, 8},  {2, 33, 4, 1, 64},
                       {1, 100, 6, 2, 64},    {3, 17, 3, 3, 8}, {2, 7, 6, 2, 8, 3},
                       {1, 100, 6, 2, 64, 40}};

struct Inputs {
  Tensor q, k, v, dout;  // on the host
};
Inputs inputs(const Case& c, uint32_t seed, float q_scale = 1.0f) {
  return {random_uniform({c.tokens(), c.q_width()}, seed, -q_scale, q_scale),
          random_uniform({c.tokens(), c.kv_width()}, seed + 1, -1.0f, 1.0f),
          random_uniform({c.tokens(), c.kv_width()}, seed + 2, -1.0f, 1.0f),
          random_uniform({c.tokens(), c.q_width()}, seed + 3, -1.0f, 1.0f)};
}

struct Outputs {
  Tensor probs, out, dq, dk, dv;
};

Outputs run_cpu(const Case& c, const Inputs& in) {
  Outputs o{Tensor::empty({c.batch, c.n_head, c.seq, c.seq}),
            Tensor::empty({c.tokens(), c.q_width()}), Tensor::empty({c.tokens(), c.q_width()}),
            Tensor::empty({c.tokens(), c.kv_width()}), Tensor::empty({c.tokens(), c.kv_width()})};
  Tensor scratch = Tensor::empty(cpu::attention_backward_scratch_shape(c.seq));
  cpu::attention_forward(in.q, in.k, in.v, c.window, o.probs, o.out);
  cpu::attention_backward(in.q, in.k, in.v, o.probs, in.dout, o.dq, o.dk, o.dv, scratch);
  return o;
}

// q, k, v, dout already on `dev` (possibly strided views). Outputs start as
// 7s, so an element backward fails to overwrite shows.
Outputs run_gpu(const Case& c, const Tensor& q, const Tensor& k, const Tensor& v,
                const Tensor& dout, Device dev) {
  Outputs o{Tensor::full({c.batch, c.n_head, c.seq, c.seq}, 7.0f, dev),
            Tensor::full({c.tokens(), c.q_width()}, 7.0f, dev),
            Tensor::full({c.tokens(), c.q_width()}, 7.0f, dev),
            Tensor::full({c.tokens(), c.kv_width()}, 7.0f, dev),
            Tensor::full({c.tokens(), c.kv_width()}, 7.0f, dev)};
  Tensor scratch =
      Tensor::full(gpu::attention_backward_scratch_shape(c.batch, c.n_head, c.seq), 7.0f, dev);
  gpu::attention_forward(q, k, v, c.window, o.probs, o.out);
  gpu::attention_backward(q, k, v, o.probs, dout, o.dq, o.dk, o.dv, scratch);
  return o;
}

Outputs run_gpu(const Case& c, const Inputs& in, Device dev) {
  return run_gpu(c, in.q.to(dev), in.k.to(dev), in.v.to(dev), in.dout.to(dev), dev);
}

reference::CoreResult reference_of(const Case& c, const Inputs& in) {
  return testing::attention_reference(c, in.q, in.k, in.v, in.dout);
}

// The reference bounds |fp32 - exact| <= e for ANY summation order and
// grouping, with or without FMA, with expf within 4 ulp (CUDA's expf is within
// 2): so it holds for cuBLAS and the GPU softmax as for OpenBLAS and the CPU
// one. Hence each GPU value is within e of the exact one, and within 2 e of
// the CPU's (plus check_within's 1e-12 m allowance for the double evaluation,
// on each side). Masked probabilities have e = 0: exactly zero on both.
void expect_close(const std::string& what, const Tensor& got, const Tensor& cpu_result,
                  const BMatrix& ref) {
  const std::vector<float> g = got.to_vector();
  EXPECT_EQ(reference::check_within(g, ref), "") << what << " (GPU vs exact)";
  const std::vector<float> c = cpu_result.to_vector();
  ASSERT_EQ(g.size(), c.size()) << what;
  int64_t violations = 0, worst = -1;
  for (size_t i = 0; i < g.size(); ++i) {
    const double bound = 2.0 * (ref[i].e + 1e-12 * ref[i].m);
    if (!(std::fabs(static_cast<double>(g[i]) - c[i]) <= bound)) {
      ++violations;
      if (worst < 0) worst = static_cast<int64_t>(i);
    }
  }
  EXPECT_EQ(violations, 0) << what << ": " << violations << " of " << g.size()
                           << " elements differ from the CPU by more than the sum of their "
                              "bounds; first at "
                           << worst << ": GPU " << (worst >= 0 ? g[worst] : 0.0f) << ", CPU "
                           << (worst >= 0 ? c[worst] : 0.0f);
}

void expect_matches(const Case& c, const Inputs& in, const Outputs& g) {
  const Outputs cpu_out = run_cpu(c, in);
  const reference::CoreResult ref = reference_of(c, in);
  expect_close("probs", g.probs, cpu_out.probs, ref.probs);
  expect_close("out", g.out, cpu_out.out, ref.out);
  expect_close("dq", g.dq, cpu_out.dq, ref.dq);
  expect_close("dk", g.dk, cpu_out.dk, ref.dk);
  expect_close("dv", g.dv, cpu_out.dv, ref.dv);
}

TEST(CudaAttentionTest, MatchesCpuAndReference) {
  COLROW_REQUIRE_GPU();
  const Device dev = testing::test_gpu();
  for (const Case& c : kCases) {
    SCOPED_TRACE(c.name());
    const Inputs in = inputs(c, 100);
    expect_matches(c, in, run_gpu(c, in, dev));
  }
}

// q, k and v as column blocks of one fused [tokens, q + 2 kv] buffer (row
// stride wider than each): cuBLAS must read them through their leading dims.
TEST(CudaAttentionTest, StridedViewsOfAFusedBuffer) {
  COLROW_REQUIRE_GPU();
  const Device dev = testing::test_gpu();
  const Case c{2, 9, 6, 2, 8};
  const Inputs in = inputs(c, 150);
  Tensor fused = Tensor::empty({c.tokens(), c.q_width() + 2 * c.kv_width()}, dev);
  Tensor q = fused.slice(1, 0, c.q_width());
  Tensor k = fused.slice(1, c.q_width(), c.kv_width());
  Tensor v = fused.slice(1, c.q_width() + c.kv_width(), c.kv_width());
  q.copy_from(in.q);
  k.copy_from(in.k);
  v.copy_from(in.v);
  expect_matches(c, in, run_gpu(c, q, k, v, in.dout.to(dev), dev));
}

// Scores up to ~250 in magnitude: exp without the max subtracted would
// overflow (past 88.7); everything must stay finite and within its bound.
TEST(CudaAttentionTest, LargeScoresStayFinite) {
  COLROW_REQUIRE_GPU();
  const Device dev = testing::test_gpu();
  const Case c{2, 9, 2, 1, 8};
  const Inputs in = inputs(c, 200, /*q_scale=*/80.0f);
  const Outputs o = run_gpu(c, in, dev);
  for (const Tensor* t : {&o.probs, &o.out, &o.dq, &o.dk, &o.dv}) {
    for (float v : t->to_vector()) ASSERT_TRUE(std::isfinite(v));
  }
  expect_matches(c, in, o);
}

// Fixed GEMM and reduction orders, and dK/dV summed over a group's heads one
// after another: the same bits on every run; backward overwrites its outputs
// (they start as 7s in run_gpu) and leaves probs unchanged.
TEST(CudaAttentionTest, RepeatedRunsGiveTheSameBits) {
  COLROW_REQUIRE_GPU();
  const Device dev = testing::test_gpu();
  const Case c{2, 33, 6, 2, 64};
  const Inputs in = inputs(c, 300);
  const Outputs a = run_gpu(c, in, dev);
  const Outputs b = run_gpu(c, in, dev);
  EXPECT_TRUE(same_bits(a.probs, b.probs));
  EXPECT_TRUE(same_bits(a.out, b.out));
  EXPECT_TRUE(same_bits(a.dq, b.dq));
  EXPECT_TRUE(same_bits(a.dk, b.dk));
  EXPECT_TRUE(same_bits(a.dv, b.dv));
  // A second backward on the same probs, into fresh buffers.
  const Tensor probs = a.probs.clone();
  Tensor dq = Tensor::full(a.dq.shape(), -3.0f, dev), dk = Tensor::full(a.dk.shape(), -3.0f, dev),
         dv = Tensor::full(a.dv.shape(), -3.0f, dev);
  Tensor scratch =
      Tensor::empty(gpu::attention_backward_scratch_shape(c.batch, c.n_head, c.seq), dev);
  gpu::attention_backward(in.q.to(dev), in.k.to(dev), in.v.to(dev), a.probs, in.dout.to(dev), dq,
                          dk, dv, scratch);
  EXPECT_TRUE(same_bits(a.probs, probs));
  EXPECT_TRUE(same_bits(dq, a.dq));
  EXPECT_TRUE(same_bits(dk, a.dk));
  EXPECT_TRUE(same_bits(dv, a.dv));
}

TEST(CudaAttentionTest, ShapeErrorsAreInternalErrors) {
  COLROW_REQUIRE_GPU();
  const Device dev = testing::test_gpu();
  const Case c = kCases[1];
  const Inputs host = inputs(c, 600);
  const Tensor q = host.q.to(dev), k = host.k.to(dev), v = host.v.to(dev), dout = host.dout.to(dev);
  Tensor probs = Tensor::empty({c.batch, c.n_head, c.seq, c.seq}, dev);
  Tensor out = Tensor::empty({c.tokens(), c.q_width()}, dev);
  Tensor bad_probs = Tensor::empty({c.batch, c.n_head + 1, c.seq, c.seq}, dev);
  EXPECT_THROW(gpu::attention_forward(q, k, v, /*window=*/0, bad_probs, out), InternalError)
      << "heads do not divide q";
  Tensor short_out = Tensor::empty({c.tokens() - 1, c.q_width()}, dev);
  EXPECT_THROW(gpu::attention_forward(q, k, v, /*window=*/0, probs, short_out), InternalError);
  const Tensor k4 = Tensor::empty({c.tokens(), 4 * c.head_dim}, dev);
  EXPECT_THROW(gpu::attention_forward(q, k4, k4, /*window=*/0, probs, out), InternalError)
      << "4 KV heads for 6 query heads";
  EXPECT_THROW(gpu::attention_forward(host.q, k, v, /*window=*/0, probs, out), InternalError)
      << "q on the host";
  EXPECT_THROW(gpu::attention_forward(q, k, v, /*window=*/-1, probs, out), InternalError)
      << "a negative window";
  gpu::attention_forward(q, k, v, /*window=*/0, probs, out);
  Tensor dq = Tensor::empty(q.shape(), dev), dk = Tensor::empty(k.shape(), dev),
         dv = Tensor::empty(v.shape(), dev);
  Tensor small = Tensor::empty({c.batch, c.seq - 1, c.seq - 1}, dev);
  EXPECT_THROW(gpu::attention_backward(q, k, v, probs, dout, dq, dk, dv, small), InternalError)
      << "scratch too small";
  Tensor scratch =
      Tensor::empty(gpu::attention_backward_scratch_shape(c.batch, c.n_head, c.seq), dev);
  Tensor bad_dk = Tensor::empty(q.shape(), dev);
  EXPECT_THROW(gpu::attention_backward(q, k, v, probs, dout, dq, bad_dk, dv, scratch),
               InternalError);
}

}  // namespace
}  // namespace colrow
