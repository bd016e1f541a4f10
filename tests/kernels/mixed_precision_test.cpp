// kernels/mixed_precision.h and the bf16 operands of kernels/ops.h on the
// CPU: fp32 tensors pass through untouched; a bf16 output holds its fp32
// result rounded once, so an accumulation of terms each below half a bf16 ulp
// still moves it (rounding every term would not); every native bf16 kernel
// (kernels/native_bf16_cases.h) and the cross-entropy pieces equal the fp32
// kernels on the widened values, rounded once; mixed dtypes are refused; a
// bf16 column block is written in place, its neighbours untouched.
#include "kernels/mixed_precision.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "colrow/core/bfloat16.h"
#include "colrow/core/cache_rows.h"
#include "colrow/core/error.h"
#include "kernels/native_bf16_cases.h"
#include "kernels/ops.h"

namespace colrow {
namespace {

Tensor random_tensor(const Shape& shape, uint32_t seed) {
  std::mt19937 gen(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> v(static_cast<size_t>(shape_numel(shape)));
  for (float& x : v) x = normal(gen);
  return Tensor::from_vector(shape, v);
}

// The values of t rounded to bf16 and widened back.
std::vector<float> rounded(const Tensor& t) {
  std::vector<float> v = t.to_vector();
  for (float& x : v) x = bf16_to_float(float_to_bf16(x));
  return v;
}

TEST(MixedPrecisionTest, Fp32OperandsPassThrough) {
  kernels::Fp32Operands f;
  Tensor x = Tensor::zeros({3, 4});
  EXPECT_EQ(&f.in(x), &x);
  EXPECT_EQ(&f.out(x), &x);
  EXPECT_EQ(&f.inout(x), &x);
  f.store();
}

TEST(MixedPrecisionTest, AccumulationRoundsTheSumOnce) {
  // acc = 1 (bf16), four additions of 2^-9, a quarter of bf16's ulp at 1:
  // the exact sum 1 + 2^-7 is a bf16 value. Rounding after each term would
  // leave 1.
  Tensor acc = Tensor::full({1}, 1.0f, Device::cpu(), DType::kBF16);
  kernels::Fp32Operands f;
  Tensor& wide = f.inout(acc);
  for (int i = 0; i < 4; ++i) wide.data()[0] += 0x1p-9f;
  f.store();
  EXPECT_EQ(acc.to_vector()[0], 1.0f + 0x1p-7f);
  // A native kernel's fp32 gradient sums bf16 terms in fp32: 1 + 2^-9 is no
  // bf16 value, so a bf16 accumulator at any point, in any order, would end
  // at 1 or 1 + 2^-7.
  Tensor db = Tensor::zeros({1});
  ops::accumulate_bias_grad(Tensor::from_vector({2, 1}, {1.0f, 0x1p-9f}).to(DType::kBF16), db);
  EXPECT_EQ(db.to_vector()[0], 1.0f + 0x1p-9f);
}

TEST(MixedPrecisionTest, NativeBf16KernelsAreTheFp32KernelsRoundedOnce) {
  testing::expect_native_bf16_is_fp32_rounded_once(Device::cpu());
}

TEST(MixedPrecisionTest, MixedDtypesAreRefused) {
  testing::expect_mixed_dtypes_refused(Device::cpu());
}

TEST(MixedPrecisionTest, GeluIntoABf16ColumnBlock) {
  const Tensor x = random_tensor({5, 8}, 7).to(DType::kBF16);
  Tensor wide = Tensor::full({5, 24}, 3.0f, Device::cpu(), DType::kBF16);
  Tensor block = wide.slice(1, 8, 8);
  Tensor block_copy = Tensor::empty({5, 8}, Device::cpu(), DType::kBF16);
  ops::gelu_forward(ops::GeluForm::kTanh, x, block_copy);
  // gelu_forward wants contiguous operands; the block is written through a copy.
  block.copy_from(block_copy);
  Tensor y32 = Tensor::empty({5, 8});
  ops::gelu_forward(ops::GeluForm::kTanh, x.to(DType::kF32), y32);
  EXPECT_EQ(block_copy.to_vector(), rounded(y32));
  const std::vector<float> all = wide.to_vector();
  for (int64_t i = 0; i < 5; ++i) {
    for (int64_t j = 0; j < 24; ++j) {
      if (j < 8 || j >= 16) {
        ASSERT_EQ(all[i * 24 + j], 3.0f);
      }
    }
  }
  // store_rounded writes a strided view directly.
  kernels::store_rounded(y32, block);
  EXPECT_EQ(block.clone().to_vector(), rounded(y32));
}

// The cross-entropy pieces read bf16 logits natively; they must give the
// fp32 kernels' numbers on the widened logits, the gradient rounded once: at
// a small vocabulary, and at one of two 8192-column chunks and enough rows to
// run in parallel; with and without label smoothing; and written over the
// logits themselves (the model's in-place gradient).
TEST(MixedPrecisionTest, CrossEntropyOfBf16LogitsIsTheFp32KernelsRoundedOnce) {
  struct Shape2 {
    int64_t tokens, vocab, real;
  };
  for (const Shape2 shape : {Shape2{6, 11, 11}, Shape2{5, 12000, 11500}}) {
    for (float smoothing : {0.0f, 0.1f}) {
      SCOPED_TRACE("vocab " + std::to_string(shape.vocab) + ", smoothing " +
                   std::to_string(smoothing));
      const int64_t tokens = shape.tokens, vocab = shape.vocab;
      Tensor logits = random_tensor({tokens, vocab}, 8).to(DType::kBF16);
      std::vector<int32_t> targets = {0, 3, 10, -100, 5, 7};
      targets.resize(static_cast<size_t>(tokens));
      ops::CrossEntropyRows rows;
      rows.targets = &targets;
      rows.real = shape.real;
      rows.vocab_size = shape.real;
      rows.label_smoothing = smoothing;
      rows.vocab_size_local = vocab;
      const Tensor wide = logits.to(DType::kF32);
      const Shape packed{tokens, kernels::kCrossEntropyPartials};
      Tensor partials = Tensor::empty(packed), max = Tensor::empty({tokens});
      Tensor sum_exp = Tensor::empty({tokens}), losses = Tensor::empty({tokens});
      ops::cross_entropy_partials(logits, rows, partials);
      ops::cross_entropy_combine(partials, rows, max, sum_exp, losses);

      Tensor partials32 = Tensor::empty(packed), max32 = Tensor::empty({tokens});
      Tensor sum32 = Tensor::empty({tokens}), losses32 = Tensor::empty({tokens});
      ops::cross_entropy_partials(wide, rows, partials32);
      ops::cross_entropy_combine(partials32, rows, max32, sum32, losses32);
      EXPECT_EQ(partials.to_vector(), partials32.to_vector());
      EXPECT_EQ(losses.to_vector(), losses32.to_vector());
      EXPECT_EQ(max.to_vector(), max32.to_vector());
      EXPECT_EQ(sum_exp.to_vector(), sum32.to_vector());

      const Tensor dloss = Tensor::full({tokens}, 0.5f);
      Tensor dlogits32 = Tensor::empty({tokens, vocab});
      ops::cross_entropy_backward(wide, rows, max32, sum32, &dloss, 1.0f, dlogits32);
      Tensor dlogits = Tensor::empty({tokens, vocab}, Device::cpu(), DType::kBF16);
      ops::cross_entropy_backward(logits, rows, max, sum_exp, &dloss, 1.0f, dlogits);
      EXPECT_EQ(dlogits.to_vector(), rounded(dlogits32));
      ops::cross_entropy_backward(logits, rows, max, sum_exp, &dloss, 1.0f, logits);  // in place
      EXPECT_EQ(logits.to_vector(), rounded(dlogits32));
    }
  }
}

// A bf16 KV cache is appended to and read natively: its rows are the bf16
// keys and values bit for bit, and the attention over it is the fp32
// kernel's on the widened operands up to the order of the scores' fp32 sums
// (a decode step's q K^T reads the bf16 keys in place, kernels/cpu/gemm.cpp),
// out rounded once. A prefill of 5 tokens of two sequences (GQA: 4 query
// heads on 2 KV heads), then a decode step.
TEST(MixedPrecisionTest, Bf16KvCacheIsReadNatively) {
  const int64_t heads = 4, kv_heads = 2, hs = 8, capacity = 9, batch = 2, prefill = 5;
  const CacheRows prefill_rows{{1, 0}, {0, 0}, prefill}, step_rows{{1, 0}, {5, 5}, 1};
  struct Caches {
    Tensor k, v;
  };
  auto run = [&](DType dtype, std::vector<float>& scores_out) {
    Caches c{Tensor::zeros({2, kv_heads, capacity, hs}, Device::cpu(), dtype),
             Tensor::zeros({2, kv_heads, capacity, hs}, Device::cpu(), dtype)};
    std::vector<float> outs;
    for (const CacheRows& rows : {prefill_rows, step_rows}) {
      const int64_t tokens = batch * rows.n_new;
      const uint32_t seed = static_cast<uint32_t>(rows.n_new);
      // The same bf16 values either way: fp32 runs on their widenings.
      const Tensor q = random_tensor({tokens, heads * hs}, seed).to(DType::kBF16).to(dtype);
      const Tensor k = random_tensor({tokens, kv_heads * hs}, seed + 1).to(DType::kBF16).to(dtype);
      const Tensor v = random_tensor({tokens, kv_heads * hs}, seed + 2).to(DType::kBF16).to(dtype);
      ops::kv_cache_append(k, rows, c.k);
      ops::kv_cache_append(v, rows, c.v);
      Tensor scores = Tensor::zeros({tokens, heads, capacity});  // past the keys: untouched
      Tensor out = Tensor::empty({tokens, heads * hs}, Device::cpu(), dtype);
      ops::cached_attention(q, c.k, c.v, rows, /*window=*/0, scores, out);
      const std::vector<float> o = out.to_vector(), s = scores.to_vector();
      outs.insert(outs.end(), o.begin(), o.end());
      scores_out.insert(scores_out.end(), s.begin(), s.end());
    }
    return std::make_pair(c, outs);
  };
  std::vector<float> scores32, scores16;
  const auto [caches32, out32] = run(DType::kF32, scores32);
  const auto [caches16, out16] = run(DType::kBF16, scores16);
  EXPECT_EQ(caches16.k.dtype(), DType::kBF16);
  EXPECT_EQ(caches16.k.to_vector(), caches32.k.to_vector());
  EXPECT_EQ(caches16.v.to_vector(), caches32.v.to_vector());
  // Probabilities in [0, 1] from 8-term dots of values below ~4 in
  // magnitude: another fp32 summation order moves them by ~1e-6 at most.
  ASSERT_EQ(scores16.size(), scores32.size());
  for (size_t i = 0; i < scores32.size(); ++i) EXPECT_NEAR(scores16[i], scores32[i], 1e-5) << i;
  // out: the rounding of an fp32 result whose sums ran in another order
  // (~1e-6 apart at these magnitudes): within bf16's unit roundoff 2^-8 of
  // out32 plus that, whichever neighbour it lands on. A wrong-way or a
  // second rounding can be 2^-7 off.
  for (size_t i = 0; i < out32.size(); ++i) {
    EXPECT_NEAR(out16[i], out32[i], std::fabs(out32[i]) * 0x1p-8 + 1e-6) << i;
  }
  // Mixed dtypes are a bug, not a silent widening of the whole cache.
  Tensor k32 = Tensor::zeros({batch, kv_heads * hs});
  Tensor cache16 = Tensor::zeros({2, kv_heads, capacity, hs}, Device::cpu(), DType::kBF16);
  EXPECT_THROW(ops::kv_cache_append(k32, step_rows, cache16), InternalError);
  const Tensor q16 = Tensor::zeros({batch, heads * hs}, Device::cpu(), DType::kBF16);
  Tensor scores = Tensor::zeros({batch, heads, capacity}),
         out_fp32 = Tensor::zeros({batch, heads * hs});
  EXPECT_THROW(ops::cached_attention(q16, cache16, cache16, step_rows, 0, scores, out_fp32),
               InternalError);
}

TEST(MixedPrecisionTest, CrossEntropyGradientTakesTheLogitsDtype) {
  const std::vector<int32_t> targets = {1, 2};
  ops::CrossEntropyRows rows;
  rows.targets = &targets;
  rows.real = 4;
  rows.vocab_size = 4;
  const Tensor logits = Tensor::zeros({2, 4}, Device::cpu(), DType::kBF16);
  const Tensor max = Tensor::zeros({2}), sum_exp = Tensor::full({2}, 1.0f);
  Tensor dlogits32 = Tensor::empty({2, 4});
  EXPECT_THROW(ops::cross_entropy_backward(logits, rows, max, sum_exp, nullptr, 1.0f, dlogits32),
               InternalError);
  // The per-row values stay fp32 whatever the logits' dtype.
  Tensor dlogits16 = Tensor::empty({2, 4}, Device::cpu(), DType::kBF16);
  const Tensor dloss16 = Tensor::full({2}, 1.0f, Device::cpu(), DType::kBF16);
  EXPECT_THROW(ops::cross_entropy_backward(logits, rows, max, sum_exp, &dloss16, 0.0f, dlogits16),
               InternalError);
  Tensor partials16 =
      Tensor::zeros({2, kernels::kCrossEntropyPartials}, Device::cpu(), DType::kBF16);
  EXPECT_THROW(ops::cross_entropy_partials(logits, rows, partials16), InternalError);
  ops::cross_entropy_backward(logits, rows, max, sum_exp, nullptr, 1.0f, dlogits16);  // accepted
}

}  // namespace
}  // namespace colrow
