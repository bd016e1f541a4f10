// The CPU kernels give the same bits whatever the OpenMP thread count: each
// kernel runs at 1, 2, 3, 4 and 16 threads (16 oversubscribes a small machine,
// which is fine for correctness) and every output must match the 1-thread one
// bit for bit (memcmp), on shapes that cross parallel.h's blocks (kRowBlock
// tokens, kChunkElements, kElementBlock, kQueryBlock, kVocabChunk). The
// reductions are also checked against plain double references within the
// bounds stated where they are used, and where the summation order is part of
// the contract (token order for bias gradients within a row block and for
// embedding scatter-adds) against that order exactly.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "colrow/core/cache_rows.h"
#include "colrow/core/tensor.h"
#include "colrow/runtime/threads.h"
#include "kernels/cpu/activation.h"
#include "kernels/cpu/adamw.h"
#include "kernels/cpu/attention.h"
#include "kernels/cpu/bias.h"
#include "kernels/cpu/cross_entropy.h"
#include "kernels/cpu/embedding.h"
#include "kernels/cpu/gemm.h"
#include "kernels/cpu/init.h"
#include "kernels/cpu/kv_cache.h"
#include "kernels/cpu/norm.h"
#include "kernels/cpu/parallel.h"
#include "kernels/cpu/reduce.h"
#include "kernels/cpu/rope.h"
#include "nn/layer_test_helpers.h"
#include "support/attention_reference.h"
#include "support/norm_reference.h"
#include "support/reference.h"
#include "support/vocab_reference.h"

namespace colrow {
namespace {

namespace cpu = kernels::cpu;
using kernels::Trans;
using reference::Matrix;
using testing::random_tensor;
using testing::to_matrix;

constexpr double kU = reference::kUnitRoundoff;  // fp32: 2^-24
constexpr int kThreadCounts[] = {1, 2, 3, 4, 16};

// Tokens: one, a few, one past a row block, several blocks with a ragged end.
// Features: fewer than a vector, a model width, and one with a ragged block.
const int64_t kTokens[] = {1, 7, cpu::kRowBlock + 1, 4 * cpu::kRowBlock - 24};
const int64_t kFeatures[] = {3, 1024, 1030};
static_assert(4 * cpu::kRowBlock - 24 > 3 * cpu::kRowBlock, "1000 tokens span four row blocks");

// Runs `run` (fresh outputs each call) at every thread count and expects the
// bits of the 1-thread run; returns those outputs. Both OpenMP's and
// OpenBLAS's counts are set, as the app does.
template <typename Run>
std::vector<Tensor> at_every_thread_count(const std::string& what, Run run) {
  const int before = blas_threads();
  std::vector<Tensor> first;
  for (int threads : kThreadCounts) {
    set_threads(threads);
    std::vector<Tensor> outputs = run();
    if (first.empty()) {
      first = outputs;
      continue;
    }
    for (size_t i = 0; i < outputs.size(); ++i) {
      EXPECT_TRUE(testing::same_bits(outputs[i], first[i]))
          << what << ": output " << i << " at " << threads << " threads differs from 1 thread";
    }
  }
  set_threads(before);
  return first;
}

std::string shape_name(int64_t tokens, int64_t features) {
  return "[" + std::to_string(tokens) + ", " + std::to_string(features) + "]";
}

// GEMM in thread-invariant mode (--deterministic): every transpose, one row
// (sgemv), shapes that cross the fixed blocks with ragged ends, strided
// views and beta = 1, the same bits at every thread count; and within
// fp32's bound of the product summed in double.
// Plain mode makes no such promise: OpenBLAS splits c by the thread count.
TEST(ThreadInvarianceTest, GemmInThreadInvariantMode) {
  const int64_t b = cpu::kInvariantBlock;
  const int64_t shapes[][3] = {
      {1, 2 * b + 3, 40}, {7, 5, 3}, {b + 1, b - 1, 64}, {2 * b + 5, 3 * b + 7, 33}};
  cpu::set_thread_invariant_gemm(true);
  for (const auto& [m, n, k] : shapes) {
    for (Trans ta : {Trans::kNo, Trans::kYes}) {
      for (Trans tb : {Trans::kNo, Trans::kYes}) {
        const std::string name = "gemm " + std::to_string(m) + "x" + std::to_string(n) + "x" +
                                 std::to_string(k) + (ta == Trans::kYes ? " aT" : "") +
                                 (tb == Trans::kYes ? " bT" : "");
        // Operands as column views of wider buffers: leading dimensions > widths.
        const Tensor a_store =
            random_tensor(ta == Trans::kNo ? Shape{m, k + 3} : Shape{k, m + 3}, 1);
        const Tensor b_store =
            random_tensor(tb == Trans::kNo ? Shape{k, n + 2} : Shape{n, k + 2}, 2);
        const Tensor a = a_store.slice(1, 1, ta == Trans::kNo ? k : m);
        const Tensor bm = b_store.slice(1, 2, tb == Trans::kNo ? n : k);
        const Tensor c0 = random_tensor({m, n}, 3);
        const std::vector<Tensor> out = at_every_thread_count(name, [&] {
          Tensor c = c0.clone();
          cpu::gemm(ta, tb, 0.5f, a, bm, 1.0f, c);
          return std::vector<Tensor>{c};
        });
        // Against the sum in double: an fp32 dot product of k terms, scaled
        // by alpha and added to beta c, is within (k + 2) u (|alpha| sum |a b|
        // + |beta c|) of it, in any order of the terms (Higham, Accuracy and
        // Stability, 3.1); a wrong block offset or stride misses by ~1.
        const std::vector<float> got = out[0].to_vector();
        for (int64_t i = 0; i < m; ++i) {
          for (int64_t j = 0; j < n; ++j) {
            double exact = 0.0, magnitude = 0.0;
            for (int64_t p = 0; p < k; ++p) {
              const double term = static_cast<double>(ta == Trans::kNo ? a(i, p) : a(p, i)) *
                                  (tb == Trans::kNo ? bm(p, j) : bm(j, p));
              exact += term;
              magnitude += std::fabs(term);
            }
            const double c_start = c0(i, j);
            const double bound = (k + 2) * kU * (0.5 * magnitude + std::fabs(c_start));
            ASSERT_NEAR(got[i * n + j], 0.5 * exact + c_start, bound)
                << name << " element (" << i << ", " << j << ")";
          }
        }
      }
    }
  }
  cpu::set_thread_invariant_gemm(false);
}

TEST(ThreadInvarianceTest, SumOfSquares) {
  // Lengths around a chunk and past several; an empty part; one part 1000x
  // larger, so that the order of the chunk sums would show.
  const int64_t c = cpu::kChunkElements;
  const std::vector<int64_t> lengths = {0, 1, 7, c - 1, c, c + 1, 3 * c + 5};
  std::vector<Tensor> parts;
  for (size_t i = 0; i < lengths.size(); ++i) {
    Tensor t = random_tensor({lengths[i]}, 10 + i);
    if (i == 4) {
      for (int64_t j = 0; j < t.numel(); ++j) t.data()[j] *= 1000.0f;
    }
    parts.push_back(t);
  }
  double first = 0.0;
  const int before = blas_threads();
  for (int threads : kThreadCounts) {
    set_threads(threads);
    const double got = cpu::sum_of_squares(parts);
    if (threads == 1) first = got;
    EXPECT_EQ(std::memcmp(&got, &first, sizeof(double)), 0)
        << threads << " threads: " << got << " vs " << first;
  }
  set_threads(before);
  // Every x^2 is exact in double and non-negative, so any order of the N
  // additions errs by at most gamma_N (double, u = 2^-53) times the sum; the
  // long double reference by N 2^-64 of it.
  long double want = 0.0L;
  int64_t n = 0;
  for (const Tensor& t : parts) {
    for (int64_t j = 0; j < t.numel(); ++j)
      want += static_cast<long double>(t.data()[j]) * t.data()[j];
    n += t.numel();
  }
  const double bound = (n * 0x1p-53 + n * 0x1p-64) * static_cast<double>(want);
  EXPECT_NEAR(first, static_cast<double>(want), bound);
}

TEST(ThreadInvarianceTest, BiasGrad) {
  for (int64_t tokens : kTokens) {
    for (int64_t features : kFeatures) {
      const std::string name = "accumulate_bias_grad " + shape_name(tokens, features);
      // dy is a column block of a wider gradient (row stride > features).
      const Tensor wide = random_tensor({tokens, features + 5}, 1);
      const Tensor dy = wide.slice(-1, 2, features);
      const Tensor db0 = random_tensor({features}, 2);
      const std::vector<Tensor> out = at_every_thread_count(name, [&] {
        Tensor db = db0.clone();
        cpu::accumulate_bias_grad(dy, db);
        return std::vector<Tensor>{db};
      });
      // The documented order, exactly: each block of kRowBlock tokens summed
      // in fp32 from zero in token order, the block sums added in block order,
      // then added to db. (One block: a plain fp32 loop over the tokens.)
      // Within the Higham bound of any order too: T + 1 terms, gamma_T.
      for (int64_t j = 0; j < features; ++j) {
        float total = 0.0f;
        double exact = db0.data()[j], magnitude = std::fabs(db0.data()[j]);
        for (int64_t r0 = 0; r0 < tokens; r0 += cpu::kRowBlock) {
          float block = 0.0f;
          for (int64_t t = r0; t < std::min(tokens, r0 + cpu::kRowBlock); ++t) {
            block += dy(t, j);
            exact += dy(t, j);
            magnitude += std::fabs(dy(t, j));
          }
          total = r0 == 0 ? block : total + block;
        }
        ASSERT_EQ(out[0].data()[j], db0.data()[j] + total) << name << " at " << j;
        ASSERT_NEAR(out[0].data()[j], exact, reference::gamma(tokens) * magnitude)
            << name << " at " << j;
      }
    }
  }
}

// Error factors c in |got - exact| <= c u M, M from norm_reference.h, as in
// norm_test.cpp (one call into zeroed gradients; the sums over tokens are in
// double, so how they are grouped adds only O(T 2^-53) relative).
constexpr double kLnDx = 15, kLnDgamma = 6, kLnDbeta = 2, kRmsDx = 11, kRmsDw = 5;

void expect_within(const std::string& what, const Tensor& got, const Matrix& ref, const Matrix& mag,
                   double factor) {
  const std::vector<float> g = got.to_vector();
  ASSERT_EQ(g.size(), ref.size()) << what;
  for (size_t i = 0; i < g.size(); ++i) {
    ASSERT_LE(std::fabs(g[i] - ref[i]), factor * kU * mag[i])
        << what << " at " << i << ": got " << g[i] << ", reference " << ref[i];
  }
}

TEST(ThreadInvarianceTest, LayerNormBackward) {
  for (int64_t tokens : kTokens) {
    for (int64_t d : kFeatures) {
      const std::string name = "layer_norm_backward " + shape_name(tokens, d);
      const Tensor x = random_tensor({tokens, d}, 3), dy = random_tensor({tokens, d}, 4);
      const Tensor gamma = random_tensor({d}, 5), beta = random_tensor({d}, 6);
      Tensor y = Tensor::empty({tokens, d}), mean = Tensor::empty({tokens}),
             rstd = Tensor::empty({tokens});
      cpu::layer_norm_forward(x, gamma, beta, 1e-5f, y, mean, rstd);
      const std::vector<Tensor> out = at_every_thread_count(name, [&] {
        Tensor y2 = Tensor::empty({tokens, d}), mean2 = Tensor::empty({tokens}),
               rstd2 = Tensor::empty({tokens});
        cpu::layer_norm_forward(x, gamma, beta, 1e-5f, y2, mean2, rstd2);
        Tensor dx = Tensor::empty({tokens, d}), dgamma = Tensor::zeros({d}),
               dbeta = Tensor::zeros({d});
        cpu::layer_norm_backward(x, gamma, mean, rstd, dy, dx, dgamma, dbeta);
        return std::vector<Tensor>{y2, mean2, rstd2, dx, dgamma, dbeta};
      });
      const reference::NormResult ref =
          reference::layer_norm(to_matrix(x), to_matrix(gamma), to_matrix(beta), to_matrix(dy),
                                tokens, d, static_cast<double>(1e-5f));
      expect_within(name + " dx", out[3], ref.dx, ref.dx_mag, kLnDx);
      expect_within(name + " dgamma", out[4], ref.dgamma, ref.dgamma_mag, kLnDgamma);
      expect_within(name + " dbeta", out[5], ref.dbeta, ref.dbeta_mag, kLnDbeta);
    }
  }
}

TEST(ThreadInvarianceTest, RmsNormBackward) {
  for (int64_t tokens : kTokens) {
    for (int64_t d : kFeatures) {
      const std::string name = "rms_norm_backward " + shape_name(tokens, d);
      const Tensor x = random_tensor({tokens, d}, 7), dy = random_tensor({tokens, d}, 8);
      const Tensor weight = random_tensor({d}, 9);
      Tensor y = Tensor::empty({tokens, d}), rstd = Tensor::empty({tokens});
      cpu::rms_norm_forward(x, weight, 1e-6f, y, rstd);
      const std::vector<Tensor> out = at_every_thread_count(name, [&] {
        Tensor dx = Tensor::empty({tokens, d}), dweight = Tensor::zeros({d});
        cpu::rms_norm_backward(x, weight, rstd, dy, dx, dweight);
        return std::vector<Tensor>{dx, dweight};
      });
      const reference::NormResult ref = reference::rms_norm(
          to_matrix(x), to_matrix(weight), to_matrix(dy), tokens, d, static_cast<double>(1e-6f));
      expect_within(name + " dx", out[0], ref.dx, ref.dx_mag, kRmsDx);
      expect_within(name + " dweight", out[1], ref.dgamma, ref.dgamma_mag, kRmsDw);
    }
  }
}

struct AttentionCase {
  int64_t batch, seq, n_head, n_kv_head, head_dim, window;
};

TEST(ThreadInvarianceTest, Attention) {
  // Across query blocks with GQA (a group split between scratch chunks at low
  // thread counts), MQA, one sequence of many heads (more heads than slabs),
  // a sliding window, and a tiny shape that stays on one thread.
  const AttentionCase cases[] = {{1, 2 * cpu::kQueryBlock + 2, 4, 2, 8, 0},
                                 {2, 70, 3, 1, 4, 0},
                                 {1, 4 * cpu::kQueryBlock + 1, 6, 6, 16, 0},
                                 {2, 100, 4, 2, 8, 37},
                                 {3, 5, 2, 1, 4, 0}};
  for (const AttentionCase& c : cases) {
    const std::string name = "attention B" + std::to_string(c.batch) + " T" +
                             std::to_string(c.seq) + " H" + std::to_string(c.n_head) + "/" +
                             std::to_string(c.n_kv_head) + " window " + std::to_string(c.window);
    const int64_t tokens = c.batch * c.seq;
    const Tensor q = random_tensor({tokens, c.n_head * c.head_dim}, 11);
    const Tensor k = random_tensor({tokens, c.n_kv_head * c.head_dim}, 12);
    const Tensor v = random_tensor({tokens, c.n_kv_head * c.head_dim}, 13);
    const Tensor dout = random_tensor({tokens, c.n_head * c.head_dim}, 14);
    // The scratch as asked for, then with 3 slabs more than threads: the
    // chunking of the heads changes, the bits must not.
    const auto run = [&](int64_t extra_slabs) {
      return at_every_thread_count(name, [&] {
        Tensor probs = Tensor::empty({c.batch, c.n_head, c.seq, c.seq});
        Tensor o = Tensor::empty(q.shape()), dq = Tensor::empty(q.shape()),
               dk = Tensor::empty(k.shape()), dv = Tensor::empty(k.shape());
        Shape scratch_shape = cpu::attention_backward_scratch_shape(c.seq);
        scratch_shape[0] += extra_slabs;
        Tensor scratch = Tensor::full(scratch_shape, 7.0f);
        cpu::attention_forward(q, k, v, c.window, probs, o);
        cpu::attention_backward(q, k, v, probs, dout, dq, dk, dv, scratch);
        return std::vector<Tensor>{probs, o, dq, dk, dv};
      });
    };
    const std::vector<Tensor> out = run(0), more_slabs = run(3);
    for (size_t i = 0; i < out.size(); ++i) {
      EXPECT_TRUE(testing::same_bits(more_slabs[i], out[i]))
          << name << ": output " << i << " changes with 3 more scratch slabs";
    }
    const reference::CoreDims dims{c.batch,           c.seq,   c.n_head, c.n_kv_head, c.head_dim,
                                   /*extra_depth=*/0, c.window};
    // Rigorous fp32 bounds for any grouping of the sums (attention_reference.h).
    const reference::CoreResult ref = reference::causal_attention(
        dims, reference::exact(to_matrix(q)), reference::exact(to_matrix(k)),
        reference::exact(to_matrix(v)), reference::exact(to_matrix(dout)));
    EXPECT_EQ(reference::check_within(out[0].to_vector(), ref.probs), "") << name << " probs";
    EXPECT_EQ(reference::check_within(out[1].to_vector(), ref.out), "") << name << " out";
    EXPECT_EQ(reference::check_within(out[2].to_vector(), ref.dq), "") << name << " dq";
    EXPECT_EQ(reference::check_within(out[3].to_vector(), ref.dk), "") << name << " dk";
    EXPECT_EQ(reference::check_within(out[4].to_vector(), ref.dv), "") << name << " dv";
  }
}

TEST(ThreadInvarianceTest, CachedAttention) {
  // A prefill of 130 tokens (three query blocks) for two sequences, one with
  // 5 tokens cached before it, then one decoding step.
  const int64_t n_head = 4, n_kv_head = 2, hs = 8, capacity = 160, n = 2 * cpu::kQueryBlock + 2;
  const Tensor q = random_tensor({2 * n, n_head * hs}, 21);
  Tensor k_cache = random_tensor({3, n_kv_head, capacity, hs}, 22);
  Tensor v_cache = random_tensor({3, n_kv_head, capacity, hs}, 23);
  for (const CacheRows& rows : {CacheRows{{2, 0}, {0, 5}, n}, CacheRows{{2, 0}, {n, n + 5}, 1}}) {
    const int64_t tokens = 2 * rows.n_new;
    at_every_thread_count("cached_attention n " + std::to_string(rows.n_new), [&] {
      // Filled: positions past the step's end are scratch the kernel leaves alone.
      Tensor scores = Tensor::full({tokens, n_head, capacity}, 7.0f);
      Tensor out = Tensor::empty({tokens, n_head * hs});
      cpu::cached_attention(q.slice(0, 0, tokens), k_cache, v_cache, rows, 0, scores, out);
      return std::vector<Tensor>{scores, out};
    });
  }
}

TEST(ThreadInvarianceTest, CrossEntropy) {
  // A row of more than two vocabulary chunks plus padded columns; a few tokens
  // (the case the chunks are for) and more; one ignored row; targets in every
  // chunk; with and without label smoothing.
  const int64_t real = 2 * cpu::kVocabChunk + 5, v_local = real + 11;
  for (int64_t tokens : {int64_t{1}, int64_t{7}, int64_t{40}}) {
    for (float smoothing : {0.0f, 0.1f}) {
      const std::string name = "cross_entropy tokens " + std::to_string(tokens) + " smoothing " +
                               std::to_string(smoothing);
      Tensor logits = random_tensor({tokens, v_local}, 31);
      for (int64_t i = 0; i < logits.numel(); ++i) logits.data()[i] *= 8.0f;
      std::vector<int32_t> targets(tokens);
      for (int64_t t = 0; t < tokens; ++t) targets[t] = static_cast<int32_t>((t * 7919) % real);
      if (tokens > 1) targets[1] = -100;
      kernels::CrossEntropyRows rows;
      rows.targets = &targets;
      rows.real = real;
      rows.vocab_size = real;
      rows.label_smoothing = smoothing;
      rows.vocab_size_local = v_local;
      const std::vector<Tensor> out = at_every_thread_count(name, [&] {
        Tensor partials = Tensor::empty({tokens, kernels::kCrossEntropyPartials});
        Tensor max = Tensor::empty({tokens}), sum_exp = Tensor::empty({tokens});
        Tensor losses = Tensor::empty({tokens}), dlogits = Tensor::empty({tokens, v_local});
        cpu::cross_entropy_partials(logits, rows, partials);
        cpu::cross_entropy_combine(partials, rows, max, sum_exp, losses);
        cpu::cross_entropy_backward(logits, rows, max, sum_exp, nullptr, 1.0f, dlogits);
        return std::vector<Tensor>{max, sum_exp, partials, losses, dlogits};
      });
      double total = 0.0;  // as mean_loss adds them: double, token order
      for (int64_t t = 0; t < tokens; ++t) total += out[3].data()[t];
      // Within the reference's bounds (vocab_reference.h, c = 2, one part:
      // the chunk sums are rescaled and added in double, rounded to fp32 for
      // the partials and once more by the combine).
      Matrix x(tokens * real);
      for (int64_t t = 0; t < tokens; ++t) {
        for (int64_t j = 0; j < real; ++j) x[t * real + j] = logits(t, j);
      }
      const reference::CrossEntropyResult ref =
          reference::cross_entropy(x, targets, tokens, real, smoothing, -100, 1);
      double want_total = 0.0;
      for (int64_t t = 0; t < tokens; ++t) {
        ASSERT_LE(std::fabs(out[3].data()[t] - ref.losses[t]), 2 * kU * ref.loss_mag[t])
            << name << " loss " << t;
        want_total += ref.losses[t];
        for (int64_t j = 0; j < v_local; ++j) {
          const float got = out[4](t, j);
          if (j >= real) {
            ASSERT_EQ(got, 0.0f) << name << " padded column " << j;
            continue;
          }
          ASSERT_LE(std::fabs(got - ref.dlogits[t * real + j]),
                    2 * kU * ref.dlogits_mag[t * real + j])
              << name << " dlogits " << t << ", " << j;
        }
      }
      double loss_bound = 0.0;
      for (int64_t t = 0; t < tokens; ++t) loss_bound += 2 * kU * ref.loss_mag[t];
      EXPECT_NEAR(total, want_total, loss_bound + reference::gamma(tokens) * std::fabs(want_total))
          << name;
    }
  }
}

TEST(ThreadInvarianceTest, EmbeddingBackward) {
  // Rows [100, 400) of a vocabulary are local; ids repeat and fall outside.
  const int64_t vocab_start = 100, rows = 300;
  for (int64_t tokens : kTokens) {
    for (int64_t d : kFeatures) {
      const std::string name = "embedding_backward " + shape_name(tokens, d);
      std::mt19937 gen(static_cast<uint32_t>(tokens * 31 + d));
      std::vector<int32_t> ids(tokens);
      for (int32_t& id : ids) id = static_cast<int32_t>(gen() % 500);
      if (tokens > 2) ids[2] = ids[0];  // a repeat for sure
      const Tensor dy = random_tensor({tokens, d}, 41);
      const Tensor table0 = random_tensor({rows, d}, 42);
      const std::vector<Tensor> out = at_every_thread_count(name, [&] {
        Tensor dtable = table0.clone();
        cpu::embedding_backward(ids, vocab_start, dy, dtable);
        return std::vector<Tensor>{dtable};
      });
      // The contract, exactly: each row adds its tokens' gradients in token order.
      Tensor want = table0.clone();
      for (int64_t t = 0; t < tokens; ++t) {
        const int64_t row = ids[t] - vocab_start;
        if (row < 0 || row >= rows) continue;
        for (int64_t j = 0; j < d; ++j) want(row, j) += dy(t, j);
      }
      EXPECT_TRUE(testing::same_bits(out[0], want)) << name;
    }
  }
}

TEST(ThreadInvarianceTest, PositionEmbeddingBackward) {
  for (int64_t seq : {int64_t{7}, cpu::kRowBlock + 1}) {
    for (int64_t d : kFeatures) {
      const int64_t batch = 3, tokens = batch * seq;
      const std::string name = "position_embedding_backward " + shape_name(tokens, d);
      const Tensor dx = random_tensor({tokens, d}, 51);
      const Tensor table0 = random_tensor({seq + 2, d}, 52);
      const std::vector<Tensor> out = at_every_thread_count(name, [&] {
        Tensor dtable = table0.clone();
        cpu::position_embedding_backward(dx, seq, dtable);
        return std::vector<Tensor>{dtable};
      });
      // Each position adds its sequences in order.
      Tensor want = table0.clone();
      for (int64_t b = 0; b < batch; ++b) {
        for (int64_t p = 0; p < seq; ++p) {
          for (int64_t j = 0; j < d; ++j) want(p, j) += dx(b * seq + p, j);
        }
      }
      EXPECT_TRUE(testing::same_bits(out[0], want)) << name;
    }
  }
}

TEST(ThreadInvarianceTest, Activations) {
  // Not reductions, but built with -ffast-math: the vector and scalar expf /
  // tanhf differ in the last bits, so how the elements are cut into tasks must
  // not depend on the thread count. 3 kParallelElements + 3: parallel, and
  // ragged against every block.
  const int64_t n = 3 * cpu::kParallelElements + 3;
  Tensor x = random_tensor({n}, 61), dy = random_tensor({n}, 62), up = random_tensor({n}, 63);
  for (int64_t i = 0; i < n; ++i) x.data()[i] *= 6.0f;
  for (kernels::GeluForm form : {kernels::GeluForm::kTanh, kernels::GeluForm::kErf}) {
    at_every_thread_count("gelu", [&] {
      Tensor y = Tensor::empty({n}), dx = Tensor::empty({n});
      cpu::gelu_forward(form, x, y);
      cpu::gelu_backward(form, x, dy, dx);
      return std::vector<Tensor>{y, dx};
    });
  }
  at_every_thread_count("silu and swiglu", [&] {
    Tensor y = Tensor::empty({n}), dx = Tensor::empty({n}), h = Tensor::empty({n}),
           dgate = Tensor::empty({n}), dup = Tensor::empty({n});
    cpu::silu_forward(x, y);
    cpu::silu_backward(x, dy, dx);
    cpu::swiglu_forward(x, up, h);
    cpu::swiglu_backward(x, up, dy, dgate, dup);
    return std::vector<Tensor>{y, dx, h, dgate, dup};
  });
}

TEST(ThreadInvarianceTest, AdamW) {
  // Segments shorter than, around and longer than one chunk, updated in one call.
  const int64_t c = cpu::kChunkElements;
  const std::vector<int64_t> lengths = {1, 1000, c + 3, 5, 2 * c};
  at_every_thread_count("adamw_update", [&] {
    std::vector<kernels::AdamWSegment> segments;
    std::vector<Tensor> outputs;
    for (size_t i = 0; i < lengths.size(); ++i) {
      Tensor v = random_tensor({lengths[i]}, 70 + 4 * i);
      for (int64_t j = 0; j < v.numel(); ++j) v.data()[j] = std::fabs(v.data()[j]);
      kernels::AdamWSegment s{random_tensor({lengths[i]}, 71 + 4 * i),
                              random_tensor({lengths[i]}, 72 + 4 * i),
                              random_tensor({lengths[i]}, 73 + 4 * i),
                              v,
                              i % 2 == 0,
                              Tensor()};
      segments.push_back(s);
      outputs.insert(outputs.end(), {s.param, s.exp_avg, s.exp_avg_sq});
    }
    kernels::AdamWStep step;
    step.step_size = 1e-3f;
    step.bias_correction2_sqrt = 0.3f;
    step.decay = 0.999f;
    step.grad_scale = 0.7f;
    cpu::adamw_update(segments, step);
    return outputs;
  });
}

TEST(ThreadInvarianceTest, RopeAndInit) {
  // No sums: each element is computed alone. The table is now filled in
  // parallel over positions; the random fill must stay TP- and thread-invariant.
  const int64_t seq = 600, half = 32, tokens = 2 * seq, width = 4 * 2 * half;
  std::vector<double> inv_freq(half);
  for (int64_t i = 0; i < half; ++i) inv_freq[i] = std::pow(10000.0, -2.0 * i / (2 * half));
  const Tensor x = random_tensor({tokens, width}, 81);
  at_every_thread_count("rope", [&] {
    Tensor cos, sin, y = Tensor::empty(x.shape()), dx = Tensor::empty(x.shape());
    cpu::rope_table(seq, inv_freq, cos, sin);
    cpu::rope_forward(x, cos, sin, y);
    cpu::rope_backward(x, cos, sin, dx);
    return std::vector<Tensor>{cos, sin, y, dx};
  });
  at_every_thread_count("fill_random", [&] {
    kernels::RandomFill fill;
    fill.full_shape = {300, 700};
    fill.dim = 1;
    fill.offset_along_dim = 350;
    fill.scale = 0.02f;
    fill.seed = 5;
    fill.stream = 9;
    Tensor normal = Tensor::empty({300, 350}), uniform = Tensor::empty({300, 350});
    cpu::fill_random(normal, fill);
    fill.normal = false;
    cpu::fill_random(uniform, fill);
    return std::vector<Tensor>{normal, uniform};
  });
}

}  // namespace
}  // namespace colrow
