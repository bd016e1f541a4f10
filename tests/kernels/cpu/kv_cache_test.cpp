// kernels::cpu KV cache: a sequence appended in pieces (a prefill, then single
// tokens) and attended through the cache gives the causal attention of the
// whole sequence (kernels::cpu::attention_forward), with and without a sliding
// window, for MHA, GQA and MQA and
// odd sizes, several sequences in other cache slots at once; append writes
// exactly its rows; q, k and v as column blocks of a fused qkv give the
// contiguous bits; bad shapes and rows past the capacity are InternalErrors.
#include "kernels/cpu/kv_cache.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "colrow/core/error.h"
#include "kernels/cpu/attention.h"

namespace colrow {
namespace {

struct Case {
  int64_t seq, n_head, n_kv_head, head_dim, prefill;
};
// The last one prefills 130 tokens: three blocks of query rows (kQueryBlock).
const Case kCases[] = {
    {1, 1, 1, 2, 1}, {9, 4, 4, 8, 4}, {13, 6, 2, 5, 7}, {21, 3, 1, 16, 1}, {150, 2, 1, 8, 130}};

Tensor random_matrix(int64_t rows, int64_t cols, uint32_t seed) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  std::vector<float> values(rows * cols);
  for (float& x : values) x = dist(gen);
  return Tensor::from_vector({rows, cols}, values);
}

// Fully causal (window 0) and with a sliding window of 3 keys (Mistral's mask).
TEST(KvCacheCpu, PiecewiseDecodingEqualsWholeSequenceAttention) {
  for (const int64_t window : {0, 3}) {
    for (const Case& c : kCases) {
      SCOPED_TRACE("seq " + std::to_string(c.seq) + ", heads " + std::to_string(c.n_head) + "/" +
                   std::to_string(c.n_kv_head) + ", window " + std::to_string(window));
      const int64_t q_width = c.n_head * c.head_dim, kv_width = c.n_kv_head * c.head_dim;
      // Two sequences, in slots 2 and 0 of a 3-slot cache with room to spare.
      const int64_t batch = 2, capacity = c.seq + 3;
      std::vector<Tensor> q, k, v, want;
      for (int64_t b = 0; b < batch; ++b) {
        q.push_back(random_matrix(c.seq, q_width, 10 + b));
        k.push_back(random_matrix(c.seq, kv_width, 20 + b));
        v.push_back(random_matrix(c.seq, kv_width, 30 + b));
        Tensor probs = Tensor::empty({1, c.n_head, c.seq, c.seq});
        want.push_back(Tensor::empty({c.seq, q_width}));
        kernels::cpu::attention_forward(q[b], k[b], v[b], window, probs, want[b]);
      }
      const std::vector<int64_t> slots = {2, 0};
      Tensor k_cache = Tensor::zeros({3, c.n_kv_head, capacity, c.head_dim});
      Tensor v_cache = Tensor::zeros({3, c.n_kv_head, capacity, c.head_dim});
      std::vector<Tensor> got;  // one storage each: Tensor copies share theirs
      for (int64_t b = 0; b < batch; ++b) got.push_back(Tensor::empty({c.seq, q_width}));
      for (int64_t b = 0; b < batch; ++b) {  // the prefill, one sequence at a time
        const CacheRows rows{{slots[b]}, {0}, c.prefill};
        kernels::cpu::kv_cache_append(k[b].slice(0, 0, c.prefill), rows, k_cache);
        kernels::cpu::kv_cache_append(v[b].slice(0, 0, c.prefill), rows, v_cache);
        Tensor scores = Tensor::empty({c.prefill, c.n_head, capacity});
        Tensor out = got[b].slice(0, 0, c.prefill);
        kernels::cpu::cached_attention(q[b].slice(0, 0, c.prefill), k_cache, v_cache, rows, window,
                                       scores, out);
      }
      for (int64_t p = c.prefill; p < c.seq; ++p) {  // then one token of each per step
        const CacheRows rows{slots, {p, p}, 1};
        Tensor kq = Tensor::empty({batch, kv_width}), vq = Tensor::empty({batch, kv_width});
        Tensor qq = Tensor::empty({batch, q_width}), out = Tensor::empty({batch, q_width});
        for (int64_t b = 0; b < batch; ++b) {
          kq.slice(0, b, 1).copy_from(k[b].slice(0, p, 1));
          vq.slice(0, b, 1).copy_from(v[b].slice(0, p, 1));
          qq.slice(0, b, 1).copy_from(q[b].slice(0, p, 1));
        }
        kernels::cpu::kv_cache_append(kq, rows, k_cache);
        kernels::cpu::kv_cache_append(vq, rows, v_cache);
        Tensor scores = Tensor::empty({batch, c.n_head, capacity});
        kernels::cpu::cached_attention(qq, k_cache, v_cache, rows, window, scores, out);
        for (int64_t b = 0; b < batch; ++b) got[b].slice(0, p, 1).copy_from(out.slice(0, b, 1));
      }
      // The same products and sums over the same keys, blocked differently:
      // each output is a convex combination of |v| <= 1 with O(sqrt(T)) u
      // rounding per step; 1e-5 is far above that and far below any mask or
      // position error.
      for (int64_t b = 0; b < batch; ++b) {
        const std::vector<float> g = got[b].to_vector(), w = want[b].to_vector();
        double err = 0.0;
        for (size_t i = 0; i < w.size(); ++i) err = std::max(err, std::fabs(double{g[i]} - w[i]));
        EXPECT_LE(err, 1e-5) << "sequence " << b;
      }
      // Slot 1 was never written; positions past the sequence stay zero.
      for (float x : k_cache.slice(0, 1, 1).to_vector()) ASSERT_EQ(x, 0.0f);
      for (float x : k_cache.slice(2, c.seq, 3).to_vector()) ASSERT_EQ(x, 0.0f);
    }
  }
}

// Decoding hands the kernels q, k and v as column blocks of attention's one
// fused qkv output (rows strided by its width): the same cache rows and
// outputs, bit for bit, as contiguous operands give, in fp32 and bf16.
TEST(KvCacheCpu, ColumnBlocksOfAFusedQkvGiveTheContiguousBits) {
  const int64_t n_head = 6, n_kv_head = 2, head_dim = 8, capacity = 33;
  const int64_t qw = n_head * head_dim, kvw = n_kv_head * head_dim;
  const Shape cache_shape = {3, n_kv_head, capacity, head_dim};
  for (const DType dtype : {DType::kF32, DType::kBF16}) {
    SCOPED_TRACE(dtype == DType::kBF16 ? "bf16" : "fp32");
    Tensor k_want = Tensor::zeros(cache_shape, Device::cpu(), dtype);
    Tensor v_want = Tensor::zeros(cache_shape, Device::cpu(), dtype);
    Tensor k_got = Tensor::zeros(cache_shape, Device::cpu(), dtype);
    Tensor v_got = Tensor::zeros(cache_shape, Device::cpu(), dtype);
    // A prefill of slot 1, then one token for slots 1 and 2.
    const CacheRows steps[] = {{{1}, {0}, capacity - 1}, {{2, 1}, {0, capacity - 1}, 1}};
    uint32_t seed = 90;
    for (const CacheRows& rows : steps) {
      const int64_t tokens = static_cast<int64_t>(rows.slots.size()) * rows.n_new;
      const Tensor q = random_matrix(tokens, qw, seed++).to(dtype);
      const Tensor k = random_matrix(tokens, kvw, seed++).to(dtype);
      const Tensor v = random_matrix(tokens, kvw, seed++).to(dtype);
      Tensor fused = Tensor::zeros({tokens, qw + 2 * kvw}, Device::cpu(), dtype);
      Tensor q_block = fused.slice(1, 0, qw);
      Tensor k_block = fused.slice(1, qw, kvw);
      Tensor v_block = fused.slice(1, qw + kvw, kvw);
      q_block.copy_from(q);
      k_block.copy_from(k);
      v_block.copy_from(v);
      kernels::cpu::kv_cache_append(k, rows, k_want);
      kernels::cpu::kv_cache_append(v, rows, v_want);
      kernels::cpu::kv_cache_append(k_block, rows, k_got);
      kernels::cpu::kv_cache_append(v_block, rows, v_got);
      EXPECT_EQ(k_got.to_vector(), k_want.to_vector());
      EXPECT_EQ(v_got.to_vector(), v_want.to_vector());
      Tensor scores_want = Tensor::zeros({tokens, n_head, capacity});
      Tensor scores_got = Tensor::zeros({tokens, n_head, capacity});
      Tensor out_want = Tensor::zeros({tokens, qw}, Device::cpu(), dtype);
      Tensor out_got = Tensor::zeros({tokens, qw}, Device::cpu(), dtype);
      kernels::cpu::cached_attention(q, k_want, v_want, rows, 0, scores_want, out_want);
      kernels::cpu::cached_attention(q_block, k_got, v_got, rows, 0, scores_got, out_got);
      EXPECT_EQ(scores_got.to_vector(), scores_want.to_vector());
      EXPECT_EQ(out_got.to_vector(), out_want.to_vector());
    }
  }
}

TEST(KvCacheCpu, BadShapesAndOverflowingRowsAreInternalErrors) {
  Tensor cache = Tensor::zeros({2, 1, 4, 2});
  const Tensor x = Tensor::zeros({1, 2});
  EXPECT_THROW(kernels::cpu::kv_cache_append(x, CacheRows{{0}, {4}, 1}, cache), InternalError);
  EXPECT_THROW(kernels::cpu::kv_cache_append(x, CacheRows{{2}, {0}, 1}, cache), InternalError);
  EXPECT_THROW(kernels::cpu::kv_cache_append(Tensor::zeros({1, 3}), CacheRows{{0}, {0}, 1}, cache),
               InternalError);
  Tensor scores = Tensor::zeros({1, 3, 4}), out = Tensor::zeros({1, 4});  // 2 heads, not 3
  EXPECT_THROW(kernels::cpu::cached_attention(Tensor::zeros({1, 4}), cache, cache,
                                              CacheRows{{0}, {0}, 1}, /*window=*/0, scores, out),
               InternalError);
  Tensor scores_ok = Tensor::zeros({1, 2, 4});  // 2 heads
  EXPECT_THROW(
      kernels::cpu::cached_attention(Tensor::zeros({1, 4}), cache, cache, CacheRows{{0}, {0}, 1},
                                     /*window=*/-1, scores_ok, out),
      InternalError)
      << "a negative window";
}

}  // namespace
}  // namespace colrow
