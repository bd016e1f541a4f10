// The fused CUDA attention (kernels/cuda/flash_attention.h) against the double
// reference (support/attention_reference) and the plain CUDA kernels, its
// reference: T = 1, 17, 64 (one whole tile), 65, 100, 1024 and 2048; MHA, GQA
// and MQA; head_dim 8, 20, 32, 64, 96 and 128 (whole and partial column
// groups); sliding windows shorter and longer than a tile; strided q/k/v views
// of a fused qkv buffer, and their gradients written into column blocks of one
// fused dqkv buffer; the row log-sum-exp against double; repeated runs give
// the same bits (no atomics); backend dispatch and shape errors. In bf16 on
// tensor cores (head dims 32, 64, 96 and 128): against the double reference
// within bounds derived from bf16's unit roundoff, against the plain fp32
// kernels at T = 1, 17, 64, 1024 and 2048 with and without GQA, the same bits
// run after run and from aligned or unaligned rows (operands and gradients),
// with dQ in a kernel of its own or added in key-tile order (both backwards:
// the same dK and dV bits, and each dQ within its bound).
// Built twice: on a GPU (label gpu), and with COLROW_WARP_EMULATION, where
// the same kernels run on the CPU through the warp emulation
// (emulated/flash_attention.h), so CI checks them without a GPU: there the
// cases of up to 333 tokens run (the repeated-bits ones smaller), and not
// the comparisons with the plain kernels (cuBLAS) or the backend's
// dispatch.
#ifdef COLROW_WARP_EMULATION
#include "kernels/cuda/emulated/flash_attention.h"
#else
#include "kernels/cuda/attention.h"
#include "kernels/cuda/flash_attention.h"
#endif

#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <string>
#include <tuple>
#include <vector>

#include "colrow/core/error.h"
#include "kernels/attention_case.h"
#include "kernels/backend.h"
#include "kernels/cuda/attention_bounds.h"
#include "kernels/cuda/cuda_test_helpers.h"
#include "support/attention_reference.h"
#include "support/gpu.h"

namespace colrow {
namespace {

using testing::kU;

#ifdef COLROW_WARP_EMULATION
namespace gpu = testing::emulated;
#else
namespace gpu = kernels::cuda;
#endif
using reference::BMatrix;
using testing::attention_inputs;
using testing::bf16_relative_error;
using testing::bf16_values;
using testing::expect_close_to_reference;
using testing::fused_relative_error;

using Case = testing::AttentionCase;

const Case kCases[] = {
    {2, 1, 2, 2, 64},          // one query, one key
    {2, 17, 6, 2, 64},         // GQA, a partial tile
    {1, 64, 4, 1, 128},        // MQA, exactly one tile, the widest head
    {2, 65, 3, 3, 20},         // two tiles, the second of one row; 20 columns of 32
    {1, 100, 6, 2, 8, 40},     // a window shorter than a tile
    {1, 130, 2, 2, 96, 70},    // a window longer than a tile; 96 columns of 128
    {1, 1024, 2, 1, 32},       // 16 tiles
    {1, 1100, 2, 2, 32, 300},  // a window spanning several tiles
    {1, 2048, 1, 1, 64},       // 32 tiles
};

using Inputs = testing::AttentionInputs;

// Whether case c runs in this build: every case on a GPU; under the warp
// emulation, where a tile pair costs milliseconds, those of up to 333 tokens.
bool runs_here(const Case& c) {
  return !testing::kGpuIsHost || c.seq <= 333;
}

// The repeated-bits tests' case: under the emulation three tiles with a
// window across them (a run of the GPU's case there takes seconds).
const Case kRepeatCase =
    testing::kGpuIsHost ? Case{1, 150, 4, 2, 64, 100} : Case{2, 333, 6, 2, 64, 100};

struct Outputs {
  Tensor lse, out, dq, dk, dv;
};

// Where backward writes dq, dk and dv: tensors of their own, or (as the
// model's dqkv) column blocks of one [tokens, shift + q + 2 kv + 8] buffer
// from column `shift` on, whose other columns must keep their 7s.
struct GradientPlace {
  bool fused = false;
  int64_t shift = 0;
};

using kernels::AttentionBackward;
constexpr AttentionBackward kBackwards[] = {AttentionBackward::kRecompute,
                                            AttentionBackward::kOrdered};
std::string name_of(AttentionBackward how) {
  return how == AttentionBackward::kOrdered ? "dQ in key-tile order" : "dQ recomputed";
}
constexpr int64_t kFusedTail = 8;

// q, k, v, dout already on `dev` (possibly strided views), all of one dtype:
// out and the gradients get it too. Outputs and scratch start as 7s, so an
// element left unwritten shows.
Outputs run_flash(const Case& c, const Tensor& q, const Tensor& k, const Tensor& v,
                  const Tensor& dout, Device dev, GradientPlace place = {},
                  AttentionBackward how = AttentionBackward::kRecompute) {
  const DType dtype = q.dtype();
  Outputs o{Tensor::full({c.batch, c.n_head, c.seq}, 7.0f, dev),
            Tensor::full({c.tokens(), c.q_width()}, 7.0f, dev, dtype),
            Tensor::full({c.tokens(), c.q_width()}, 7.0f, dev, dtype),
            Tensor::full({c.tokens(), c.kv_width()}, 7.0f, dev, dtype),
            Tensor::full({c.tokens(), c.kv_width()}, 7.0f, dev, dtype)};
  const int64_t fused_width = c.q_width() + 2 * c.kv_width();
  Tensor dqkv;
  if (place.fused) {
    dqkv = Tensor::full({c.tokens(), place.shift + fused_width + kFusedTail}, 7.0f, dev, dtype);
    o.dq = dqkv.slice(1, place.shift, c.q_width());
    o.dk = dqkv.slice(1, place.shift + c.q_width(), c.kv_width());
    o.dv = dqkv.slice(1, place.shift + c.q_width() + c.kv_width(), c.kv_width());
  }
  Tensor scratch = Tensor::full(gpu::flash_attention_backward_scratch_shape(
                                    {c.batch, c.n_head, c.seq, c.head_dim, dtype}, dev.index, how),
                                7.0f, dev);
  gpu::flash_attention_forward(q, k, v, c.window, o.lse, o.out);
  gpu::flash_attention_backward(q, k, v, o.out, o.lse, dout, c.window, o.dq, o.dk, o.dv, scratch,
                                how);
  if (place.fused) {
    // Backward writes its blocks' columns and no other.
    const std::vector<float> all = dqkv.to_vector();
    const int64_t width = dqkv.size(1);
    int64_t touched = 0;
    for (int64_t r = 0; r < c.tokens(); ++r) {
      for (int64_t j = 0; j < width; ++j) {
        const bool outside = j < place.shift || j >= place.shift + fused_width;
        if (outside && all[r * width + j] != 7.0f) ++touched;
      }
    }
    EXPECT_EQ(touched, 0) << "elements of dqkv outside dq, dk and dv were written";
  }
  return o;
}

Outputs run_flash(const Case& c, const Inputs& in, Device dev) {
  return run_flash(c, testing::copy_to(in.q, dev), testing::copy_to(in.k, dev),
                   testing::copy_to(in.v, dev), testing::copy_to(in.dout, dev), dev);
}

// Every output of two runs, bit for bit.
void expect_same_outputs(const std::string& what, const Outputs& got, const Outputs& want) {
  testing::expect_same_bits(what + " lse", got.lse, want.lse);
  testing::expect_same_bits(what + " out", got.out, want.out);
  testing::expect_same_bits(what + " dq", got.dq, want.dq);
  testing::expect_same_bits(what + " dk", got.dk, want.dk);
  testing::expect_same_bits(what + " dv", got.dv, want.dv);
}

reference::CoreResult reference_of(const Case& c, const Inputs& in) {
  return testing::attention_reference(c, in.q, in.k, in.v, in.dout);
}

// lse of every (sequence, head, query) in double, and its bound: the scores
// carry gamma_{head_dim} scale sum |q k| + u |s| (a dot product, then the
// scale), the sum of exponentials a few u relative, and m + log l two
// roundings of u |lse|.
void expect_lse(const Case& c, const Inputs& in, const Tensor& lse) {
  const std::vector<float> q = in.q.to_vector(), k = in.k.to_vector(), got = lse.to_vector();
  const double scale = 1.0 / std::sqrt(static_cast<double>(c.head_dim));
  const int64_t group = c.n_head / c.n_kv_head;
  int64_t violations = 0;
  for (int64_t b = 0; b < c.batch; ++b) {
    for (int64_t h = 0; h < c.n_head; ++h) {
      for (int64_t i = 0; i < c.seq; ++i) {
        const int64_t first = c.window > 0 && i >= c.window ? i - c.window + 1 : 0;
        std::vector<double> s;
        double s_error = 0.0;
        for (int64_t j = first; j <= i; ++j) {
          double dot = 0.0, magnitude = 0.0;
          for (int64_t e = 0; e < c.head_dim; ++e) {
            const double x = q[(b * c.seq + i) * c.q_width() + h * c.head_dim + e];
            const double y = k[(b * c.seq + j) * c.kv_width() + (h / group) * c.head_dim + e];
            dot += x * y;
            magnitude += std::fabs(x * y);
          }
          s.push_back(scale * dot);
          s_error = std::max(s_error, testing::higham_gamma(c.head_dim + 2) * scale * magnitude +
                                          kU * std::fabs(scale * dot));
        }
        const double max = *std::max_element(s.begin(), s.end());
        double sum = 0.0;
        for (double x : s) sum += std::exp(x - max);
        const double exact = max + std::log(sum);
        const double bound = s_error + 16 * kU * (std::fabs(exact) + 1.0);
        const float value = got[(b * c.n_head + h) * c.seq + i];
        if (!(std::fabs(value - exact) <= bound)) ++violations;
      }
    }
  }
  EXPECT_EQ(violations, 0) << "lse: " << violations << " rows past their bound";
}

void expect_matches_reference(const Case& c, const Inputs& in, const Outputs& o) {
  const reference::CoreResult ref = reference_of(c, in);
  const double relative = fused_relative_error(c);
  expect_close_to_reference("out", o.out, ref.out, relative);
  expect_close_to_reference("dq", o.dq, ref.dq, relative);
  expect_close_to_reference("dk", o.dk, ref.dk, relative);
  expect_close_to_reference("dv", o.dv, ref.dv, relative);
  expect_lse(c, in, o.lse);
}

TEST(CudaFlashAttentionTest, MatchesReference) {
  COLROW_REQUIRE_GPU();
  const Device dev = testing::test_gpu();
  uint32_t seed = 100;
  for (const Case& c : kCases) {
    if (!runs_here(c)) continue;
    if (!gpu::flash_attention_supports(c.head_dim, dev.index)) {
      ADD_FAILURE() << "head_dim " << c.head_dim << " should fit every GPU colrow builds for";
      continue;
    }
    SCOPED_TRACE(c.name());
    const Inputs in = attention_inputs(c, seed += 10);
    expect_matches_reference(c, in, run_flash(c, in, dev));
  }
}

#ifndef COLROW_WARP_EMULATION  // the plain kernels are cuBLAS's
// The plain kernels (the part-1 reference, which stores P) on `in` (fp32, to
// `dev`): out and the gradients (lse stays empty).
Outputs run_plain(const Case& c, const Inputs& in, Device dev) {
  const Tensor q = testing::copy_to(in.q, dev), k = testing::copy_to(in.k, dev),
               v = testing::copy_to(in.v, dev), dout = testing::copy_to(in.dout, dev);
  Outputs o{Tensor(), Tensor::empty(q.shape(), dev), Tensor::empty(q.shape(), dev),
            Tensor::empty(k.shape(), dev), Tensor::empty(k.shape(), dev)};
  Tensor probs = Tensor::empty({c.batch, c.n_head, c.seq, c.seq}, dev);
  Tensor scratch =
      Tensor::empty(gpu::attention_backward_scratch_shape(c.batch, c.n_head, c.seq), dev);
  gpu::attention_forward(q, k, v, c.window, probs, o.out);
  gpu::attention_backward(q, k, v, probs, dout, o.dq, o.dk, o.dv, scratch);
  return o;
}

// Two kernels each within its bound of the exact values are within the sum
// of the two of each other: 2 e each, and `relative` (out, dq, dk, dv) of m.
void expect_within_each_others_bounds(const Outputs& fused, const Outputs& plain,
                                      const reference::CoreResult& ref,
                                      const std::array<double, 4>& relative) {
  const std::array<std::tuple<const char*, const Tensor*, const Tensor*, const BMatrix*>, 4>
      outputs{std::tuple{"out", &fused.out, &plain.out, &ref.out},
              std::tuple{"dq", &fused.dq, &plain.dq, &ref.dq},
              std::tuple{"dk", &fused.dk, &plain.dk, &ref.dk},
              std::tuple{"dv", &fused.dv, &plain.dv, &ref.dv}};
  for (size_t o = 0; o < outputs.size(); ++o) {
    const auto& [what, x, y, exact] = outputs[o];
    const std::vector<float> a = x->to_vector(), b = y->to_vector();
    int64_t violations = 0;
    for (size_t i = 0; i < a.size(); ++i) {
      const double bound = 4.0 * (*exact)[i].e + (relative[o] + 2e-12) * (*exact)[i].m;
      if (!(std::fabs(static_cast<double>(a[i]) - b[i]) <= bound)) ++violations;
    }
    EXPECT_EQ(violations, 0) << what << ": fused and plain differ past their bounds";
  }
}

// The plain kernels on the same inputs: both within their bounds of the
// exact values, so within the sum of the two of each other; checked here on
// the long cases as a second witness.
TEST(CudaFlashAttentionTest, AgreesWithThePlainKernels) {
  COLROW_REQUIRE_GPU();
  const Device dev = testing::test_gpu();
  for (const Case& c : {Case{2, 1024, 4, 2, 64}, Case{1, 300, 3, 1, 128, 100}}) {
    SCOPED_TRACE(c.name());
    const Inputs in = attention_inputs(c, 500);
    const double relative = fused_relative_error(c);
    expect_within_each_others_bounds(run_flash(c, in, dev), run_plain(c, in, dev),
                                     reference_of(c, in), {relative, relative, relative, relative});
  }
}
#endif  // COLROW_WARP_EMULATION

// q, k and v as column blocks of one fused [tokens, q + 2 kv] buffer.
TEST(CudaFlashAttentionTest, StridedViewsOfAFusedBuffer) {
  COLROW_REQUIRE_GPU();
  const Device dev = testing::test_gpu();
  const Case c{2, 70, 6, 2, 32};
  const Inputs in = attention_inputs(c, 150);
  Tensor fused = Tensor::empty({c.tokens(), c.q_width() + 2 * c.kv_width()}, dev);
  Tensor q = fused.slice(1, 0, c.q_width());
  Tensor k = fused.slice(1, c.q_width(), c.kv_width());
  Tensor v = fused.slice(1, c.q_width() + c.kv_width(), c.kv_width());
  q.copy_from(in.q);
  k.copy_from(in.k);
  v.copy_from(in.v);
  expect_matches_reference(c, in, run_flash(c, q, k, v, testing::copy_to(in.dout, dev), dev));
  // Their gradients as column blocks of one fused dqkv, as the model has them.
  expect_matches_reference(
      c, in, run_flash(c, q, k, v, testing::copy_to(in.dout, dev), dev, GradientPlace{true, 0}));
}

// No atomics: dK and dV summed in registers in a fixed order, dQ's shares
// summed in key-tile order. Backward overwrites its outputs and reads its
// scratch only where it wrote it (both start as 7s in run_flash).
TEST(CudaFlashAttentionTest, RepeatedRunsGiveTheSameBits) {
  COLROW_REQUIRE_GPU();
  const Device dev = testing::test_gpu();
  const Case c = kRepeatCase;
  const Inputs in = attention_inputs(c, 300);
  const Outputs a = run_flash(c, in, dev);
  expect_same_outputs("repeated", run_flash(c, in, dev), a);
  for (const Tensor* t : {&a.lse, &a.out, &a.dq, &a.dk, &a.dv}) {
    for (float x : t->to_vector()) ASSERT_TRUE(std::isfinite(x));
  }
}

#ifndef COLROW_WARP_EMULATION  // the backend is the GPU's
// What the model asks the backend for under --attention auto: the fused
// kernels' row log-sum-exp where they take the head_dim, the probabilities
// past it; and under plain and fused.
TEST(CudaFlashAttentionTest, BackendSavesWhatItsKernelNeeds) {
  COLROW_REQUIRE_GPU();
  const Device dev = testing::test_gpu();
  kernels::Backend& backend = kernels::backend_for(dev);
  // Back to auto after the test, even when an assertion returns early.
  struct AutoAfter {
    kernels::Backend& backend;
    ~AutoAfter() { backend.set_attention_kernel(kernels::AttentionKernel::kAuto); }
  } auto_after{backend};
  EXPECT_EQ(backend.attention_saved_shape(dev, {2, 3, 5, 64}), (Shape{2, 3, 5}));
  EXPECT_EQ(backend.attention_saved_shape(dev, {2, 3, 5, 256}), (Shape{2, 3, 5, 5}));
  EXPECT_FALSE(gpu::flash_attention_supports(129, dev.index));
  EXPECT_TRUE(gpu::flash_attention_supports(1, dev.index));
  // --attention plain keeps the probabilities everywhere; fused refuses a
  // head_dim it does not take, before anything is allocated.
  backend.set_attention_kernel(kernels::AttentionKernel::kPlain);
  EXPECT_EQ(backend.attention_saved_shape(dev, {2, 3, 5, 64}), (Shape{2, 3, 5, 5}));
  backend.set_attention_kernel(kernels::AttentionKernel::kFused);
  EXPECT_EQ(backend.attention_saved_shape(dev, {2, 3, 5, 64}), (Shape{2, 3, 5}));
  EXPECT_THROW(backend.attention_saved_shape(dev, {2, 3, 5, 256}), ConfigError);
}
#endif  // COLROW_WARP_EMULATION

TEST(CudaFlashAttentionTest, ShapeErrorsAreInternalErrors) {
  COLROW_REQUIRE_GPU();
  const Device dev = testing::test_gpu();
  const Case c{2, 7, 6, 2, 8};
  const Inputs host = attention_inputs(c, 600);
  const Tensor q = testing::copy_to(host.q, dev), k = testing::copy_to(host.k, dev),
               v = testing::copy_to(host.v, dev), dout = testing::copy_to(host.dout, dev);
  Tensor lse = Tensor::empty({c.batch, c.n_head, c.seq}, dev);
  Tensor out = Tensor::empty({c.tokens(), c.q_width()}, dev);
  Tensor bad_lse = Tensor::empty({c.batch, c.n_head + 1, c.seq}, dev);
  EXPECT_THROW(gpu::flash_attention_forward(q, k, v, 0, bad_lse, out), InternalError);
  Tensor probs = Tensor::empty({c.batch, c.n_head, c.seq, c.seq}, dev);
  EXPECT_THROW(gpu::flash_attention_forward(q, k, v, 0, probs, out), InternalError)
      << "probabilities where the row log-sum-exp goes";
  if (!testing::kGpuIsHost) {
    EXPECT_THROW(gpu::flash_attention_forward(host.q, k, v, 0, lse, out), InternalError)
        << "q on the host";
  }
  EXPECT_THROW(gpu::flash_attention_forward(q, k, v, -1, lse, out), InternalError);
  const Tensor wide = Tensor::empty({c.tokens(), 2 * 160}, dev);
  Tensor wide_lse = Tensor::empty({c.batch, 2, c.seq}, dev);
  Tensor wide_out = Tensor::empty(wide.shape(), dev);
  EXPECT_THROW(gpu::flash_attention_forward(wide, wide, wide, 0, wide_lse, wide_out), InternalError)
      << "head_dim 160";
  gpu::flash_attention_forward(q, k, v, 0, lse, out);
  Tensor dq = Tensor::empty(q.shape(), dev), dk = Tensor::empty(k.shape(), dev),
         dv = Tensor::empty(v.shape(), dev);
  Tensor small = Tensor::empty({c.batch * c.n_head * c.seq - 1}, dev);
  EXPECT_THROW(gpu::flash_attention_backward(q, k, v, out, lse, dout, 0, dq, dk, dv, small,
                                             AttentionBackward::kRecompute),
               InternalError)
      << "scratch too small";
  const kernels::AttentionSize size{c.batch, c.n_head, c.seq, c.head_dim, DType::kF32};
  Tensor scratch = Tensor::empty(
      gpu::flash_attention_backward_scratch_shape(size, dev.index, AttentionBackward::kRecompute),
      dev);
  Tensor bad_dk = Tensor::empty(q.shape(), dev);
  EXPECT_THROW(gpu::flash_attention_backward(q, k, v, out, lse, dout, 0, dq, bad_dk, dv, scratch,
                                             AttentionBackward::kRecompute),
               InternalError);
}

// ---- bf16 on tensor cores (kernels/cuda/tensor_core_attention.h) ----

// Head dims that are multiples of 32 up to 128.
const Case kTensorCoreCases[] = {
    {2, 1, 2, 2, 64},           // one query, one key
    {2, 17, 6, 2, 64},          // GQA, a partial tile
    {1, 64, 4, 1, 128},         // MQA, exactly one tile, the widest head
    {2, 65, 3, 3, 32},          // two tiles, the second of one row
    {1, 100, 6, 2, 96, 40},     // a window shorter than a tile
    {1, 300, 4, 4, 64, 100},    // a window spanning several tiles
    {1, 1024, 4, 2, 64},        // 16 tiles, GQA
    {1, 1100, 2, 2, 128, 300},  // a window over several tiles, the widest head
};

Outputs run_flash_bf16(const Case& c, const Inputs& in, Device dev,
                       AttentionBackward how = AttentionBackward::kRecompute) {
  auto on = [&](const Tensor& t) { return testing::copy_to(t.to(DType::kBF16), dev); };
  return run_flash(c, on(in.q), on(in.k), on(in.v), on(in.dout), dev, {}, how);
}

void expect_bf16_matches_reference(const Case& c, const Inputs& exact_inputs, const Outputs& o,
                                   double q_max = 1.0) {
  testing::expect_bf16_close_to_reference(c, reference_of(c, exact_inputs), o.out, o.dq, o.dk, o.dv,
                                          q_max);
  expect_lse(c, exact_inputs, o.lse);  // fp32 scores and sums: fp32's bound
}

TEST(CudaFlashAttentionTest, Bf16RunsOnTensorCoresWhereTheyTakeTheHeadDim) {
  COLROW_REQUIRE_GPU();
  const Device dev = testing::test_gpu();
  for (int64_t hd : {32, 64, 96, 128}) {
    EXPECT_TRUE(gpu::flash_attention_uses_tensor_cores(DType::kBF16, hd, dev.index))
        << "head_dim " << hd << ": colrow builds for sm_90, which has bf16 tensor cores";
  }
  for (int64_t hd : {8, 48, 72, 160}) {
    EXPECT_FALSE(gpu::flash_attention_uses_tensor_cores(DType::kBF16, hd, dev.index)) << hd;
  }
  EXPECT_FALSE(gpu::flash_attention_uses_tensor_cores(DType::kF32, 64, dev.index));
}

TEST(CudaFlashAttentionTest, Bf16OnTensorCoresMatchesReference) {
  COLROW_REQUIRE_GPU();
  const Device dev = testing::test_gpu();
  uint32_t seed = 700;
  for (const Case& c : kTensorCoreCases) {
    if (!runs_here(c)) continue;
    const Inputs in = bf16_values(attention_inputs(c, seed += 10));
    for (AttentionBackward how : kBackwards) {
      SCOPED_TRACE(c.name() + ", " + name_of(how));
      expect_bf16_matches_reference(c, in, run_flash_bf16(c, in, dev, how));
    }
  }
  // Peaked rows (testing::with_peaked_rows).
  for (const Case& c :
       {Case{1, 130, 4, 2, 64}, Case{1, 150, 2, 2, 128, 70}, Case{1, 700, 2, 1, 128, 150}}) {
    if (!runs_here(c)) continue;
    const Inputs in = testing::with_peaked_rows(bf16_values(attention_inputs(c, seed += 10)));
    for (AttentionBackward how : kBackwards) {
      SCOPED_TRACE(c.name() + ", q x 8, " + name_of(how));
      expect_bf16_matches_reference(c, in, run_flash_bf16(c, in, dev, how), testing::kPeakedQMax);
    }
  }
}

// The two backwards share the dK, dV kernel's products and order: the same
// lse, out, dK and dV bits. dQ is the same sum grouped otherwise (each key
// tile's 64 keys summed first, then the tiles in order), each within its
// bound of the exact values (above).
TEST(CudaFlashAttentionTest, Bf16BackwardsDifferOnlyInDq) {
  COLROW_REQUIRE_GPU();
  const Device dev = testing::test_gpu();
  for (const Case& c : {Case{2, 200, 6, 2, 64}, Case{1, 150, 2, 2, 128, 70}}) {
    SCOPED_TRACE(c.name());
    const Inputs in = bf16_values(attention_inputs(c, 950));
    const Outputs recomputed = run_flash_bf16(c, in, dev, AttentionBackward::kRecompute);
    const Outputs ordered = run_flash_bf16(c, in, dev, AttentionBackward::kOrdered);
    testing::expect_same_bits("lse", ordered.lse, recomputed.lse);
    testing::expect_same_bits("out", ordered.out, recomputed.out);
    testing::expect_same_bits("dk", ordered.dk, recomputed.dk);
    testing::expect_same_bits("dv", ordered.dv, recomputed.dv);
  }
}

// The ordered backward's scratch holds dQ's sums and turns beyond the row
// dots: the recompute backward's scratch is refused for it, its own is not.
TEST(CudaFlashAttentionTest, OrderedBackwardAsksForItsScratch) {
  COLROW_REQUIRE_GPU();
  const Device dev = testing::test_gpu();
  const Case c{1, 69, 2, 2, 64};
  const kernels::AttentionSize size{c.batch, c.n_head, c.seq, c.head_dim, DType::kBF16};
  const Shape recompute =
      gpu::flash_attention_backward_scratch_shape(size, dev.index, AttentionBackward::kRecompute);
  const Shape ordered =
      gpu::flash_attention_backward_scratch_shape(size, dev.index, AttentionBackward::kOrdered);
  EXPECT_EQ(recompute, (Shape{c.batch * c.n_head * c.seq}));
  // The row dots (138, rounded up to 140 floats: the sums start on 16 bytes),
  // the sums (138 rows of 64), a turn per head and query tile (2 x 2).
  EXPECT_EQ(ordered, (Shape{140 + 138 * 64 + 2 * 2}));
  const Inputs in = bf16_values(attention_inputs(c, 990));
  auto on = [&](const Tensor& t) { return testing::copy_to(t.to(DType::kBF16), dev); };
  const Tensor q = on(in.q), k = on(in.k), v = on(in.v), dout = on(in.dout);
  Tensor lse = Tensor::empty({c.batch, c.n_head, c.seq}, dev);
  Tensor out = Tensor::empty(q.shape(), dev, DType::kBF16);
  gpu::flash_attention_forward(q, k, v, 0, lse, out);
  Tensor dq = Tensor::empty(q.shape(), dev, DType::kBF16),
         dk = Tensor::empty(k.shape(), dev, DType::kBF16),
         dv = Tensor::empty(v.shape(), dev, DType::kBF16);
  Tensor small = Tensor::empty(recompute, dev);
  EXPECT_THROW(gpu::flash_attention_backward(q, k, v, out, lse, dout, 0, dq, dk, dv, small,
                                             AttentionBackward::kOrdered),
               InternalError);
  Tensor scratch = Tensor::empty(ordered, dev);
  gpu::flash_attention_backward(q, k, v, out, lse, dout, 0, dq, dk, dv, scratch,
                                AttentionBackward::kOrdered);
}

// bf16 at a head_dim the tensor cores do not take runs the fp32 fused
// kernels on widened operands (one rounding per output; D reads the rounded
// output): within the tensor-core bounds, which count more roundings.
TEST(CudaFlashAttentionTest, Bf16ThroughTheFp32KernelsMatchesReference) {
  COLROW_REQUIRE_GPU();
  const Device dev = testing::test_gpu();
  uint32_t seed = 750;
  for (const Case& c : {Case{1, 100, 4, 2, 48, 40}, Case{2, 17, 3, 3, 72}, Case{1, 65, 2, 1, 8}}) {
    SCOPED_TRACE(c.name());
    ASSERT_FALSE(gpu::flash_attention_uses_tensor_cores(DType::kBF16, c.head_dim, dev.index));
    const Inputs in = bf16_values(attention_inputs(c, seed += 10));
    expect_bf16_matches_reference(c, in, run_flash_bf16(c, in, dev));
  }
}

#ifndef COLROW_WARP_EMULATION  // the plain kernels are cuBLAS's
// T = 1, 17, 64, 1024 and 2048, with and without GQA: the tensor-core
// kernels against the plain fp32 kernels (part 1's reference, which stores
// P) on the same bf16 values, within the sum of their two bounds.
TEST(CudaFlashAttentionTest, Bf16OnTensorCoresAgreesWithThePlainKernels) {
  COLROW_REQUIRE_GPU();
  const Device dev = testing::test_gpu();
  for (int64_t seq : {1, 17, 64, 1024, 2048}) {
    for (int64_t n_kv_head : {2, 1}) {
      const Case c{1, seq, 2, n_kv_head, 64};
      SCOPED_TRACE(c.name());
      const Inputs in =
          bf16_values(attention_inputs(c, 800 + static_cast<uint32_t>(seq + n_kv_head)));
      const Outputs plain = run_plain(c, in, dev);
      for (AttentionBackward how : kBackwards) {
        SCOPED_TRACE(name_of(how));
        expect_within_each_others_bounds(run_flash_bf16(c, in, dev, how), plain,
                                         reference_of(c, in),
                                         {bf16_relative_error(c, 2), bf16_relative_error(c, 4),
                                          bf16_relative_error(c, 4), bf16_relative_error(c, 2)});
      }
    }
  }
}
#endif  // COLROW_WARP_EMULATION

// No atomics (and dQ's sums in a fixed order), so repeated runs give the
// same bits; and the rows are read alike whether they start on 16 bytes (q,
// k, v as column blocks of one fused qkv buffer: vector loads) or not (the
// blocks shifted by one element: element loads), so those runs give the
// contiguous run's bits too.
void expect_repeated_bits_from_any_rows(const Case& c, const Inputs& in, Device dev,
                                        AttentionBackward how) {
  const Outputs a = run_flash_bf16(c, in, dev, how);
  expect_bf16_matches_reference(c, in, a);  // the bits every run repeats are right ones
  expect_same_outputs("repeated", run_flash_bf16(c, in, dev, how), a);
  for (int64_t shift : {0, 1}) {
    SCOPED_TRACE("columns shifted by " + std::to_string(shift));
    Tensor fused =
        Tensor::empty({c.tokens(), shift + c.q_width() + 2 * c.kv_width()}, dev, DType::kBF16);
    Tensor q = fused.slice(1, shift, c.q_width());
    Tensor k = fused.slice(1, shift + c.q_width(), c.kv_width());
    Tensor v = fused.slice(1, shift + c.q_width() + c.kv_width(), c.kv_width());
    q.copy_from(testing::copy_to(in.q.to(DType::kBF16), dev));
    k.copy_from(testing::copy_to(in.k.to(DType::kBF16), dev));
    v.copy_from(testing::copy_to(in.v.to(DType::kBF16), dev));
    const Tensor dout = testing::copy_to(in.dout.to(DType::kBF16), dev);
    expect_same_outputs("strided", run_flash(c, q, k, v, dout, dev, {}, how), a);
    // dq, dk and dv written into column blocks of one fused buffer, as the
    // model's dqkv: aligned (shift 0) or not (shift 1).
    expect_same_outputs("strided, fused gradients",
                        run_flash(c, q, k, v, dout, dev, GradientPlace{true, shift}, how), a);
  }
}

TEST(CudaFlashAttentionTest, Bf16OnTensorCoresRepeatsItsBitsFromAnyRows) {
  COLROW_REQUIRE_GPU();
  const Device dev = testing::test_gpu();
  const Case c = kRepeatCase;
  const Inputs in = bf16_values(attention_inputs(c, 900));
  for (AttentionBackward how : kBackwards) {
    SCOPED_TRACE(name_of(how));
    expect_repeated_bits_from_any_rows(c, in, dev, how);
  }
}

}  // namespace
}  // namespace colrow
