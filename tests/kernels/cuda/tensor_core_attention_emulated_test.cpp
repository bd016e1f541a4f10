// The bf16 tensor-core attention kernels (kernels/cuda/
// tensor_core_attention_kernels.cuh) run on the CPU through the warp
// emulation (support/warp_emulation.h), against the double reference within
// the bounds their GPU test uses (attention_bounds.h): head dims 32, 64, 96
// and 128; MHA, GQA and MQA; partial tiles, one query, windows shorter and
// longer than a tile; peaked rows; operands as column blocks of one fused
// qkv, aligned (cp.async) and not (element loads), and gradients written into
// column blocks of one fused dqkv. This runs where CI runs, without a GPU:
// a change to the kernels' indexing, masks or fragment layouts is checked
// here before a GPU is lent. The emulation itself is checked by the same
// cases: these kernels passed their GPU test on an H200 (2026-11-28).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "support/warp_emulation.h"
// After the emulation, which the kernels' header then uses.
#include "kernels/cuda/tensor_core_attention_kernels.cuh"

#include "colrow/core/bfloat16.h"
#include "colrow/core/error.h"
#include "kernels/attention_case.h"
#include "kernels/cuda/attention_bounds.h"
#include "kernels/cuda/cuda_test_helpers.h"
#include "support/attention_reference.h"

namespace colrow {
namespace {

namespace tc = kernels::cuda::tensor_cores;
namespace emulation = testing::emulation;
using Case = testing::AttentionCase;

// bf16 bits in a [rows, shift + width + 8] host buffer, the values in
// columns [shift, shift + width); the rest 7s.
struct Block {
  std::vector<uint16_t> bits;
  int64_t ld = 0, shift = 0;
  uint16_t* at() { return bits.data() + shift; }
  const uint16_t* at() const { return bits.data() + shift; }
};
Block bf16_block(const Tensor& values, int64_t shift) {
  const int64_t rows = values.size(0), width = values.size(1);
  Block b;
  b.ld = shift + width + 8;
  b.shift = shift;
  b.bits.assign(static_cast<size_t>(rows * b.ld), float_to_bf16(7.0f));
  const std::vector<float> v = values.to_vector();
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t j = 0; j < width; ++j)
      b.bits[r * b.ld + shift + j] = float_to_bf16(v[r * width + j]);
  }
  return b;
}
Tensor values_of(const Block& b, int64_t rows, int64_t width) {
  std::vector<float> v(static_cast<size_t>(rows * width));
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t j = 0; j < width; ++j)
      v[r * width + j] = bf16_to_float(b.bits[r * b.ld + b.shift + j]);
  }
  return Tensor::from_vector({rows, width}, v);
}
// Whether the columns outside [shift, shift + width) still hold their 7s.
bool outside_untouched(const Block& b, int64_t rows, int64_t width) {
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t j = 0; j < b.ld; ++j) {
      const bool outside = j < b.shift || j >= b.shift + width;
      if (outside && b.bits[r * b.ld + j] != float_to_bf16(7.0f)) return false;
    }
  }
  return true;
}

using Inputs = testing::AttentionInputs;  // bf16 values (testing::bf16_values)

struct Outputs {
  Tensor out, dq, dk, dv;
  bool written_only_in_their_blocks = true;
};

// Forward and backward as tensor_core_attention.cu launches them, operands
// and gradients at column `shift` of buffers wider than they are.
template <int HS>
Outputs run(const Case& c, const Inputs& in, int64_t shift) {
  const Block q = bf16_block(in.q, shift), k = bf16_block(in.k, shift), v = bf16_block(in.v, shift),
              dout = bf16_block(in.dout, shift);
  const Tensor zeros_q = Tensor::zeros({c.tokens(), c.q_width()});
  const Tensor zeros_kv = Tensor::zeros({c.tokens(), c.kv_width()});
  Block out = bf16_block(zeros_q, shift), dq = bf16_block(zeros_q, shift);
  Block dk = bf16_block(zeros_kv, shift), dv = bf16_block(zeros_kv, shift);
  const int64_t heads = c.batch * c.n_head;
  std::vector<float> lse(static_cast<size_t>(heads * c.seq), 7.0f), d(lse.size(), 7.0f);
  auto aligned = [](const Block& b) {
    return reinterpret_cast<uintptr_t>(b.at()) % 16 == 0 && b.ld * 2 % 16 == 0;
  };
  tc::Bf16Operands a{q.at(),
                     k.at(),
                     v.at(),
                     q.ld,
                     k.ld,
                     v.ld,
                     c.seq,
                     c.n_head,
                     c.n_head / c.n_kv_head,
                     HS,
                     c.window,
                     static_cast<float>(1.0 / std::sqrt(double{HS})),
                     aligned(q) && aligned(k) && aligned(v)};
  const unsigned tiles = static_cast<unsigned>((c.seq + 63) / 64);
  emulation::launch(dim3(static_cast<unsigned>(heads), tiles), tc::kThreads, tc::forward_bytes(HS),
                    [&] { tc::tc_forward<HS>(a, out.at(), out.ld, lse.data()); });
  // D = dO . O per (sequence, head, query), in fp32 from the bf16 output
  // (kernels/cuda/attention_tiles.cuh's rows_dot; its order is not the
  // bound's concern).
  for (int64_t t = 0; t < c.tokens(); ++t) {
    for (int64_t h = 0; h < c.n_head; ++h) {
      float sum = 0.0f;
      for (int64_t e = 0; e < HS; ++e) {
        const int64_t col = h * HS + e;
        sum = std::fma(bf16_to_float(dout.at()[t * dout.ld + col]),
                       bf16_to_float(out.at()[t * out.ld + col]), sum);
      }
      d[((t / c.seq) * c.n_head + h) * c.seq + t % c.seq] = sum;
    }
  }
  a.aligned = a.aligned && aligned(dout);
  const tc::Gradients gr{dout.at(), dout.ld, lse.data(), d.data(), dq.at(),
                         dk.at(),   dv.at(), dq.ld,      dk.ld,    dv.ld};
  emulation::launch(dim3(static_cast<unsigned>(c.batch * c.n_kv_head), tiles), tc::kThreads,
                    tc::key_bytes(HS), [&] { tc::tc_backward_kv<HS>(a, gr); });
  emulation::launch(dim3(static_cast<unsigned>(heads), tiles), tc::kThreads, tc::query_bytes(HS),
                    [&] { tc::tc_backward_q<HS>(a, gr); });
  Outputs o{values_of(out, c.tokens(), c.q_width()), values_of(dq, c.tokens(), c.q_width()),
            values_of(dk, c.tokens(), c.kv_width()), values_of(dv, c.tokens(), c.kv_width())};
  o.written_only_in_their_blocks = outside_untouched(out, c.tokens(), c.q_width()) &&
                                   outside_untouched(dq, c.tokens(), c.q_width()) &&
                                   outside_untouched(dk, c.tokens(), c.kv_width()) &&
                                   outside_untouched(dv, c.tokens(), c.kv_width());
  return o;
}

Outputs run_any(const Case& c, const Inputs& in, int64_t shift) {
  switch (c.head_dim) {
    case 32:
      return run<32>(c, in, shift);
    case 64:
      return run<64>(c, in, shift);
    case 96:
      return run<96>(c, in, shift);
    case 128:
      return run<128>(c, in, shift);
    default:
      throw InternalError("the tensor-core kernels take head_dim 32, 64, 96 or 128, not " +
                          std::to_string(c.head_dim));
  }
}

void expect_matches_reference(const Case& c, const Inputs& in, const Outputs& o,
                              double q_max = 1.0) {
  testing::expect_bf16_close_to_reference(
      c, testing::attention_reference(c, in.q, in.k, in.v, in.dout), o.out, o.dq, o.dk, o.dv,
      q_max);
  EXPECT_TRUE(o.written_only_in_their_blocks) << "a kernel wrote outside its column block";
}

// Smaller than the GPU test's cases (an emulated warp instruction costs
// microseconds), with the same kinds of edges.
const Case kCases[] = {
    {2, 1, 2, 2, 64},         // one query, one key
    {2, 17, 6, 2, 64},        // GQA, a partial tile
    {1, 64, 4, 1, 128},       // MQA, exactly one tile, the widest head
    {1, 65, 3, 3, 32},        // two tiles, the second of one row
    {1, 100, 6, 2, 96, 40},   // a window shorter than a tile
    {1, 200, 2, 1, 64, 100},  // a window spanning tiles, four tiles, MQA
};

TEST(TensorCoreAttentionEmulated, MatchesReference) {
  uint32_t seed = 1000;
  for (const Case& c : kCases) {
    SCOPED_TRACE(c.name());
    const Inputs in = testing::bf16_values(testing::attention_inputs(c, seed += 10));
    expect_matches_reference(c, in, run_any(c, in, 0));
  }
}

// Peaked rows (testing::with_peaked_rows).
TEST(TensorCoreAttentionEmulated, PeakedRows) {
  for (const Case& c : {Case{1, 130, 2, 1, 64}, Case{1, 150, 2, 2, 128, 70}}) {
    SCOPED_TRACE(c.name());
    const Inputs in =
        testing::with_peaked_rows(testing::bf16_values(testing::attention_inputs(c, 1100)));
    expect_matches_reference(c, in, run_any(c, in, 0), testing::kPeakedQMax);
  }
}

// Operands as column blocks of wider rows (as the model's fused qkv): on 16
// bytes (cp.async, shift 8 elements) or not (element loads, shift 1); the
// gradients land in their column blocks and nowhere else; both give the
// contiguous run's values.
TEST(TensorCoreAttentionEmulated, ColumnBlocksAlignedOrNot) {
  const Case c{1, 70, 4, 2, 64, 0};
  const Inputs in = testing::bf16_values(testing::attention_inputs(c, 1200));
  const Outputs want = run_any(c, in, 0);
  expect_matches_reference(c, in, want);
  for (const int64_t shift : {8, 1}) {
    SCOPED_TRACE("shift " + std::to_string(shift));
    const Outputs got = run_any(c, in, shift);
    EXPECT_TRUE(got.written_only_in_their_blocks);
    EXPECT_EQ(got.out.to_vector(), want.out.to_vector());
    EXPECT_EQ(got.dq.to_vector(), want.dq.to_vector());
    EXPECT_EQ(got.dk.to_vector(), want.dk.to_vector());
    EXPECT_EQ(got.dv.to_vector(), want.dv.to_vector());
  }
}

}  // namespace
}  // namespace colrow
