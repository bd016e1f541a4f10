// kernels::cpu KV cache: a sequence appended in pieces (a prefill, then single
// tokens) and attended through the cache gives the causal attention of the
// whole sequence (kernels::cpu::attention_forward), with and without a sliding
// window, for MHA, GQA and MQA and
// odd sizes, several sequences in other cache slots at once; append writes
// exactly its rows; bad shapes and rows past the capacity are InternalErrors.
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
