// kernels::cuda KV cache against kernels::cpu on the same inputs: append
// bit for bit, cached attention (a prefill and a batched step over cache
// slots in another order; its outputs and probabilities) within fp32
// rounding, for MHA, GQA and MQA and odd sizes; q, k and v as column blocks
// of a fused qkv give the contiguous bits; bad shapes are InternalErrors.
// Built twice: on a GPU (label gpu), and with COLROW_WARP_EMULATION, where
// the same kernels run on the CPU through the warp emulation
// (emulated/kv_cache.h), so CI checks them without a GPU.
#ifdef COLROW_WARP_EMULATION
#include "kernels/cuda/emulated/kv_cache.h"
#else
#include "kernels/cuda/kv_cache.h"
#endif

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "colrow/core/error.h"
#include "kernels/cpu/kv_cache.h"
#include "kernels/cuda/cuda_test_helpers.h"
#include "support/gpu.h"

namespace colrow {
namespace {

#ifdef COLROW_WARP_EMULATION
namespace gpu = testing::emulated;
#else
namespace gpu = kernels::cuda;
#endif

using testing::random_exact;

struct Case {
  int64_t n_head, n_kv_head, head_dim, capacity;
};
const Case kCases[] = {{1, 1, 2, 3}, {4, 4, 8, 33}, {6, 2, 5, 70}, {12, 1, 64, 129}};

TEST(KvCacheCuda, MatchesTheCpu) {
  COLROW_REQUIRE_GPU();
  const Device gpu = testing::test_gpu();
  for (const int64_t window : {0, 3, 40}) {  // causal, then sliding windows (Mistral)
    for (const Case& c : kCases) {
      SCOPED_TRACE("heads " + std::to_string(c.n_head) + "/" + std::to_string(c.n_kv_head) +
                   ", head_dim " + std::to_string(c.head_dim) + ", window " +
                   std::to_string(window));
      const Shape cache_shape = {3, c.n_kv_head, c.capacity, c.head_dim};
      Tensor k_cpu = Tensor::zeros(cache_shape), v_cpu = Tensor::zeros(cache_shape);
      Tensor k_gpu = Tensor::zeros(cache_shape, gpu), v_gpu = Tensor::zeros(cache_shape, gpu);
      const int64_t prefill = c.capacity - 1;
      // A prefill of slot 1, then one token for slots 1 and 2 (slot 2 starts empty).
      const CacheRows steps[] = {{{1}, {0}, prefill}, {{2, 1}, {0, prefill}, 1}};
      uint32_t seed = 1;
      for (const CacheRows& rows : steps) {
        const int64_t tokens = static_cast<int64_t>(rows.slots.size()) * rows.n_new;
        const Tensor k = random_exact({tokens, c.n_kv_head * c.head_dim}, seed++);
        const Tensor v = random_exact({tokens, c.n_kv_head * c.head_dim}, seed++);
        const Tensor q = random_exact({tokens, c.n_head * c.head_dim}, seed++);
        kernels::cpu::kv_cache_append(k, rows, k_cpu);
        kernels::cpu::kv_cache_append(v, rows, v_cpu);
        gpu::kv_cache_append(testing::copy_to(k, gpu), rows, k_gpu);
        gpu::kv_cache_append(testing::copy_to(v, gpu), rows, v_gpu);
        EXPECT_EQ(k_gpu.to(Device::cpu()).to_vector(), k_cpu.to_vector());
        EXPECT_EQ(v_gpu.to(Device::cpu()).to_vector(), v_cpu.to_vector());
        Tensor scores_cpu = Tensor::empty({tokens, c.n_head, c.capacity});
        Tensor out_cpu = Tensor::empty({tokens, c.n_head * c.head_dim});
        Tensor scores_gpu = Tensor::empty({tokens, c.n_head, c.capacity}, gpu);
        Tensor out_gpu = Tensor::empty({tokens, c.n_head * c.head_dim}, gpu);
        kernels::cpu::cached_attention(q, k_cpu, v_cpu, rows, window, scores_cpu, out_cpu);
        gpu::cached_attention(testing::copy_to(q, gpu), k_gpu, v_gpu, rows, window, scores_gpu,
                              out_gpu);
        // Convex combinations of |v| <= 1 whose weights differ by a few ulp
        // (exp implementations, summation order over <= 129 keys): 1e-5 is
        // far above that and far below a wrong key, mask or head.
        const std::vector<float> got = out_gpu.to(Device::cpu()).to_vector(),
                                 want = out_cpu.to_vector();
        double err = 0.0;
        for (size_t i = 0; i < want.size(); ++i) {
          err = std::max(err, std::fabs(double{got[i]} - want[i]));
        }
        EXPECT_LE(err, 1e-5);
        // The probabilities, over the positions each token's step has
        // written (its sequence's start + n_new; zeros past the window and
        // after the token), within the same margin: they are the weights.
        const std::vector<float> p_got = scores_gpu.to(Device::cpu()).to_vector(),
                                 p_want = scores_cpu.to_vector();
        double p_err = 0.0;
        for (int64_t t = 0; t < tokens; ++t) {
          const int64_t step_end = rows.starts[t / rows.n_new] + rows.n_new;
          for (int64_t h = 0; h < c.n_head; ++h) {
            for (int64_t j = 0; j < step_end; ++j) {
              const size_t i = static_cast<size_t>((t * c.n_head + h) * c.capacity + j);
              p_err = std::max(p_err, std::fabs(double{p_got[i]} - p_want[i]));
            }
          }
        }
        EXPECT_LE(p_err, 1e-5);
      }
    }
  }
}

// A bf16 cache on the GPU: the same kernels read it natively, so its rows
// are the bf16 values and out is the fp32 kernel's result on the widened
// operands, rounded once, bit for bit.
TEST(KvCacheCuda, Bf16CacheIsTheFp32KernelsRoundedOnce) {
  COLROW_REQUIRE_GPU();
  const Device gpu = testing::test_gpu();
  const Case c{6, 2, 64, 70};
  const Shape cache_shape = {3, c.n_kv_head, c.capacity, c.head_dim};
  Tensor k32 = Tensor::zeros(cache_shape, gpu), v32 = Tensor::zeros(cache_shape, gpu);
  Tensor k16 = Tensor::zeros(cache_shape, gpu, DType::kBF16);
  Tensor v16 = Tensor::zeros(cache_shape, gpu, DType::kBF16);
  const CacheRows steps[] = {{{1}, {0}, c.capacity - 1}, {{2, 1}, {0, c.capacity - 1}, 1}};
  uint32_t seed = 50;
  for (const CacheRows& rows : steps) {
    const int64_t tokens = static_cast<int64_t>(rows.slots.size()) * rows.n_new;
    auto bf16_values = [&](int64_t width) {
      return testing::copy_to(random_exact({tokens, width}, seed++).to(DType::kBF16), gpu);
    };
    const Tensor k = bf16_values(c.n_kv_head * c.head_dim),
                 v = bf16_values(c.n_kv_head * c.head_dim);
    const Tensor q = bf16_values(c.n_head * c.head_dim);
    gpu::kv_cache_append(k, rows, k16);
    gpu::kv_cache_append(v, rows, v16);
    gpu::kv_cache_append(k.to(DType::kF32), rows, k32);
    gpu::kv_cache_append(v.to(DType::kF32), rows, v32);
    EXPECT_EQ(k16.to_vector(), k32.to_vector());
    EXPECT_EQ(v16.to_vector(), v32.to_vector());
    Tensor scores16 = Tensor::zeros({tokens, c.n_head, c.capacity}, gpu);
    Tensor scores32 = Tensor::zeros({tokens, c.n_head, c.capacity}, gpu);
    Tensor out16 = Tensor::empty({tokens, c.n_head * c.head_dim}, gpu, DType::kBF16);
    Tensor out32 = Tensor::empty({tokens, c.n_head * c.head_dim}, gpu);
    gpu::cached_attention(q, k16, v16, rows, 0, scores16, out16);
    gpu::cached_attention(q.to(DType::kF32), k32, v32, rows, 0, scores32, out32);
    EXPECT_EQ(scores16.to_vector(), scores32.to_vector());
    EXPECT_EQ(out16.to_vector(), out32.to(DType::kBF16).to_vector());
  }
}

// Decoding hands the kernels q, k and v as column blocks of attention's one
// fused qkv output (rows strided by its width; shift 1 starts every row off
// 16 bytes): the same cache rows and outputs, bit for bit, as contiguous
// operands give.
TEST(KvCacheCuda, ColumnBlocksOfAFusedQkvGiveTheContiguousBits) {
  COLROW_REQUIRE_GPU();
  const Device gpu = testing::test_gpu();
  const Case c{6, 2, 8, 33};
  const int64_t qw = c.n_head * c.head_dim, kvw = c.n_kv_head * c.head_dim;
  const Shape cache_shape = {3, c.n_kv_head, c.capacity, c.head_dim};
  for (const DType dtype : {DType::kF32, DType::kBF16}) {
    for (const int64_t shift : {0, 1}) {
      SCOPED_TRACE(std::string(dtype == DType::kBF16 ? "bf16" : "fp32") + ", shift " +
                   std::to_string(shift));
      Tensor k_want = Tensor::zeros(cache_shape, gpu, dtype);
      Tensor v_want = Tensor::zeros(cache_shape, gpu, dtype);
      Tensor k_got = Tensor::zeros(cache_shape, gpu, dtype);
      Tensor v_got = Tensor::zeros(cache_shape, gpu, dtype);
      const CacheRows steps[] = {{{1}, {0}, c.capacity - 1}, {{2, 1}, {0, c.capacity - 1}, 1}};
      uint32_t seed = 90;
      for (const CacheRows& rows : steps) {
        const int64_t tokens = static_cast<int64_t>(rows.slots.size()) * rows.n_new;
        auto values = [&](int64_t width) {
          return testing::copy_to(random_exact({tokens, width}, seed++).to(dtype), gpu);
        };
        const Tensor q = values(qw), k = values(kvw), v = values(kvw);
        Tensor fused = Tensor::zeros({tokens, shift + qw + 2 * kvw}, gpu, dtype);
        Tensor q_block = fused.slice(1, shift, qw);
        Tensor k_block = fused.slice(1, shift + qw, kvw);
        Tensor v_block = fused.slice(1, shift + qw + kvw, kvw);
        q_block.copy_from(q);
        k_block.copy_from(k);
        v_block.copy_from(v);
        gpu::kv_cache_append(k, rows, k_want);
        gpu::kv_cache_append(v, rows, v_want);
        gpu::kv_cache_append(k_block, rows, k_got);
        gpu::kv_cache_append(v_block, rows, v_got);
        EXPECT_EQ(k_got.to_vector(), k_want.to_vector());
        EXPECT_EQ(v_got.to_vector(), v_want.to_vector());
        Tensor scores_want = Tensor::zeros({tokens, c.n_head, c.capacity}, gpu);
        Tensor scores_got = Tensor::zeros({tokens, c.n_head, c.capacity}, gpu);
        Tensor out_want = Tensor::zeros({tokens, qw}, gpu, dtype);
        Tensor out_got = Tensor::zeros({tokens, qw}, gpu, dtype);
        gpu::cached_attention(q, k_want, v_want, rows, 0, scores_want, out_want);
        gpu::cached_attention(q_block, k_got, v_got, rows, 0, scores_got, out_got);
        EXPECT_EQ(scores_got.to_vector(), scores_want.to_vector());
        EXPECT_EQ(out_got.to_vector(), out_want.to_vector());
      }
    }
  }
}

TEST(KvCacheCuda, BadShapesAreInternalErrors) {
  COLROW_REQUIRE_GPU();
  const Device gpu = testing::test_gpu();
  Tensor cache = Tensor::zeros({2, 1, 4, 2}, gpu);
  EXPECT_THROW(gpu::kv_cache_append(Tensor::zeros({1, 2}, gpu), CacheRows{{0}, {4}, 1}, cache),
               InternalError);
  Tensor scores = Tensor::zeros({1, 3, 4}, gpu), out = Tensor::zeros({1, 4}, gpu);
  EXPECT_THROW(gpu::cached_attention(Tensor::zeros({1, 4}, gpu), cache, cache,
                                     CacheRows{{0}, {0}, 1}, /*window=*/0, scores, out),
               InternalError);
  Tensor scores_ok = Tensor::zeros({1, 2, 4}, gpu);  // 2 heads
  EXPECT_THROW(gpu::cached_attention(Tensor::zeros({1, 4}, gpu), cache, cache,
                                     CacheRows{{0}, {0}, 1}, /*window=*/-1, scores_ok, out),
               InternalError)
      << "a negative window";
}

}  // namespace
}  // namespace colrow
