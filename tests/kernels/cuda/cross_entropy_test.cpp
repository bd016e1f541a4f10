// CUDA vocabulary-parallel cross-entropy pieces against the CPU kernels, with
// tp emulated on one process: the full logits are split into per-rank column
// blocks (strided views), and the all-reduces between the pieces are done on
// the host from the CPU's values, so each GPU piece is compared with the CPU
// piece on the same inputs. Cases: vocab_size_local 1, 37, 504, 1000, a rank with
// padded columns (filled with NaN, which must never be read), a rank with no
// real class, ignored rows, label smoothing, -inf logits; repeated runs give
// the same bits; a NaN logit makes its row's loss NaN; shape errors; bf16
// logits read natively give the fp32 kernels' numbers, rounded once.
#include "kernels/cuda/cross_entropy.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "colrow/core/error.h"
#include "kernels/cpu/cross_entropy.h"
#include "kernels/cuda/cuda_test_helpers.h"
#include "support/gpu.h"

namespace colrow {
namespace {

using testing::expect_same_bits;
using testing::kU;

namespace cpu = kernels::cpu;
namespace gpu = kernels::cuda;
using kernels::CrossEntropyRows;

constexpr int32_t kIgnore = -100;
const float kNaN = std::numeric_limits<float>::quiet_NaN();
const float kInf = std::numeric_limits<float>::infinity();

struct Case {
  int64_t tokens, vocab_size, vocab_local;
  int ranks;
  float smoothing;
  bool ignore_some;
  std::string name() const {
    return "tokens " + std::to_string(tokens) + ", vocab " + std::to_string(vocab_size) + " = " +
           std::to_string(ranks) + " x " + std::to_string(vocab_local) + " (padded), smoothing " +
           std::to_string(smoothing);
  }
  int64_t real(int r) const {
    return std::clamp(vocab_size - r * vocab_local, int64_t{0}, vocab_local);
  }
};

// vocab_local 1; 37 unpadded; two ranks of 504 with padding; three ranks, the
// last with 10 real classes; three ranks, the last with none (30 = 16 + 14 + 0).
const Case kCases[] = {{5, 1, 1, 1, 0.0f, false},      {7, 37, 37, 1, 0.0f, true},
                       {33, 1000, 504, 2, 0.1f, true}, {9, 50, 20, 3, 0.1f, false},
                       {12, 30, 16, 3, 0.0f, true},    {100, 30, 16, 3, 0.2f, true}};

struct Problem {
  Tensor logits;  // host [tokens, ranks * vocab_local]; padded columns NaN
  std::vector<int32_t> targets;
  Tensor dloss;  // host [tokens]
};

Problem make_problem(const Case& c, uint32_t seed) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> logit(-4.0f, 4.0f);
  std::uniform_int_distribution<int64_t> cls(0, c.vocab_size - 1);
  const int64_t width = c.ranks * c.vocab_local;
  std::vector<float> x(c.tokens * width);
  std::vector<int32_t> targets(c.tokens);
  for (int64_t t = 0; t < c.tokens; ++t) {
    for (int64_t j = 0; j < width; ++j) x[t * width + j] = j < c.vocab_size ? logit(gen) : kNaN;
    targets[t] = (c.ignore_some && t % 5 == 3) ? kIgnore : static_cast<int32_t>(cls(gen));
    // A few -inf logits (never the target's): no probability mass, finite loss.
    if (t % 4 == 1 && c.vocab_size > 1) {
      const int64_t j = (targets[t] + 1) % c.vocab_size;
      x[t * width + j] = -kInf;
    }
  }
  std::vector<float> dloss(c.tokens);
  std::uniform_real_distribution<float> unit(0.0f, 1.0f);
  for (float& d : dloss) d = unit(gen);
  return {Tensor::from_vector({c.tokens, width}, x), targets,
          Tensor::from_vector({c.tokens}, dloss)};
}

CrossEntropyRows rows_of(const Case& c, const std::vector<int32_t>& targets, int r) {
  CrossEntropyRows rows;
  rows.targets = &targets;
  rows.ignore_index = kIgnore;
  rows.vocab_start = r * c.vocab_local;
  rows.real = c.real(r);
  rows.vocab_size = c.vocab_size;
  rows.label_smoothing = c.smoothing;
  return rows;
}

Shape target_shape(const Case& c) {
  return c.smoothing > 0.0f ? Shape{c.tokens, 2} : Shape{c.tokens};
}

// Element-wise |gpu - cpu| <= bound[i]; equal values (infinities, or NaN on
// both sides) always pass.
void expect_within(const std::string& what, const Tensor& got, const Tensor& want,
                   const std::vector<double>& bound) {
  const std::vector<float> g = got.to_vector(), w = want.to_vector();
  ASSERT_EQ(g.size(), w.size()) << what;
  ASSERT_EQ(g.size(), bound.size()) << what;
  int64_t bad = 0, first = -1;
  for (size_t i = 0; i < g.size(); ++i) {
    if (g[i] == w[i] || (std::isnan(g[i]) && std::isnan(w[i]))) continue;
    if (!(std::fabs(static_cast<double>(g[i]) - w[i]) <= bound[i])) {
      if (first < 0) first = static_cast<int64_t>(i);
      ++bad;
    }
  }
  EXPECT_EQ(bad, 0) << what << ": " << bad << " of " << g.size() << " outside the bound; first at "
                    << first << ": GPU " << (first >= 0 ? g[first] : 0.0f) << ", CPU "
                    << (first >= 0 ? w[first] : 0.0f) << ", bound "
                    << (first >= 0 ? bound[first] : 0.0);
}

// The GPU pieces of one rank, for the determinism check.
struct GpuPieces {
  Tensor max, sum_exp, target_logit, dlogits;
};

TEST(CudaCrossEntropyTest, PiecesMatchCpu) {
  COLROW_REQUIRE_GPU();
  const Device dev = testing::test_gpu();
  uint32_t seed = 10;
  for (const Case& c : kCases) {
    SCOPED_TRACE(c.name());
    const Problem p = make_problem(c, seed++);
    const Tensor logits_dev = p.logits.to(dev);
    const int64_t T = c.tokens, vl = c.vocab_local;
    const double a = c.smoothing, a_over_v = a / static_cast<double>(c.vocab_size);

    // 1. Local max: exact (a max rounds nothing), so bitwise equal.
    std::vector<float> m(T, -kInf);  // the all-reduce max over ranks
    for (int r = 0; r < c.ranks; ++r) {
      const CrossEntropyRows rows = rows_of(c, p.targets, r);
      Tensor max_cpu = Tensor::empty({T}), max_gpu = Tensor::full({T}, 7.0f, dev);
      cpu::cross_entropy_local_max(p.logits.slice(1, r * vl, vl), rows, max_cpu);
      gpu::cross_entropy_local_max(logits_dev.slice(1, r * vl, vl), rows, max_gpu);
      expect_same_bits("local max, rank " + std::to_string(r), max_gpu, max_cpu);
      for (int64_t t = 0; t < T; ++t) m[t] = std::max(m[t], max_cpu.data()[t]);
    }
    const Tensor m_host = Tensor::from_vector({T}, m), m_dev = m_host.to(dev);

    // 2. Sums, on the reduced max. Both sides form z = x - m with one fp32
    // subtraction (|dz| <= u |z| if the CPU does it in double instead), so
    // exp's inputs differ by at most u |z| (relative error u |z| in exp); each
    // expf is within 4 ulp; the double accumulation is exact to ~n 2^-53; the
    // final rounding to fp32 costs u/2 S on each side:
    //   |S_gpu - S_cpu| <= sum_j (8u + 2u |z_j|) e^{z_j} <= 8u sum_j (1 + |z_j|) e^{z_j},
    // plus e^{z_j} for z_j < -87, which the CPU's exp flushes to 0.
    // target_logit[t, 0] is one rounding of x - m: within u |z|. The smoothing
    // sum of z_j: within u |z_j| per term plus u/2 |sum| per side: 2u sum |z_j|.
    Tensor s_total = Tensor::zeros({T}), tl_total = Tensor::zeros(target_shape(c));
    const int64_t tl_stride = c.smoothing > 0.0f ? 2 : 1;
    for (int r = 0; r < c.ranks; ++r) {
      const CrossEntropyRows rows = rows_of(c, p.targets, r);
      const Tensor x = p.logits.slice(1, r * vl, vl);
      Tensor se_cpu = Tensor::empty({T}), tl_cpu = Tensor::empty(target_shape(c));
      Tensor se_gpu = Tensor::full({T}, 7.0f, dev),
             tl_gpu = Tensor::full(target_shape(c), 7.0f, dev);
      cpu::cross_entropy_sums(x, rows, m_host, se_cpu, tl_cpu);
      gpu::cross_entropy_sums(logits_dev.slice(1, r * vl, vl), rows, m_dev, se_gpu, tl_gpu);
      std::vector<double> se_bound(T, 0.0), tl_bound(T * tl_stride, 0.0);
      for (int64_t t = 0; t < T; ++t) {
        if (p.targets[t] == kIgnore) continue;  // exactly zero on both sides
        double exp_mag = 0.0, z_mag = 0.0, flushed = 0.0;
        for (int64_t j = 0; j < rows.real; ++j) {
          const double z = static_cast<double>(x(t, j)) - m[t];
          if (std::isinf(z)) continue;
          exp_mag += (1.0 + std::fabs(z)) * std::exp(z);
          if (z < -87.0) flushed += std::exp(z);
          z_mag += std::fabs(z);
        }
        se_bound[t] = 8 * kU * exp_mag + flushed;
        const int64_t mine = p.targets[t] - rows.vocab_start;
        if (mine >= 0 && mine < rows.real) {
          tl_bound[t * tl_stride] = kU * std::fabs(static_cast<double>(x(t, mine)) - m[t]);
        }
        if (tl_stride == 2) tl_bound[t * 2 + 1] = 2 * kU * z_mag;
      }
      expect_within("sum_exp, rank " + std::to_string(r), se_gpu, se_cpu, se_bound);
      expect_within("target_logit, rank " + std::to_string(r), tl_gpu, tl_cpu, tl_bound);
      // [all-reduce sum over tp], emulated with the CPU's values in rank order
      for (int64_t t = 0; t < T; ++t) s_total.data()[t] += se_cpu.data()[t];
      for (int64_t i = 0; i < tl_total.numel(); ++i) tl_total.data()[i] += tl_cpu.data()[i];
    }

    // 3. Loss from the reduced values (the same inputs on both sides). In
    // double and rounded once, two evaluations differ by at most an ulp; an
    // fp32 evaluation on the CPU side would add a few roundings of the terms:
    //   |dloss| <= 4u (|log S| + (1 - a) |tl0| + a/V |tl1|).
    const CrossEntropyRows rows0 = rows_of(c, p.targets, 0);
    Tensor losses_cpu = Tensor::empty({T}), losses_gpu = Tensor::full({T}, 7.0f, dev);
    cpu::cross_entropy_loss(s_total, tl_total, rows0, losses_cpu);
    gpu::cross_entropy_loss(s_total.to(dev), tl_total.to(dev), rows0, losses_gpu);
    std::vector<double> loss_bound(T, 0.0);
    double total_bound = 0.0, total_gpu = 0.0, total_cpu = 0.0;  // in token order, as mean_loss
    const std::vector<float> lg = losses_gpu.to_vector();
    for (int64_t t = 0; t < T; ++t) {
      if (p.targets[t] == kIgnore) {
        EXPECT_EQ(lg[t], 0.0f) << "ignored row " << t;
        continue;
      }
      const float* in = tl_total.data() + t * tl_stride;
      double mag = std::fabs(std::log(static_cast<double>(s_total.data()[t]))) +
                   (1.0 - a) * std::fabs(in[0]);
      if (tl_stride == 2) mag += a_over_v * std::fabs(in[1]);
      loss_bound[t] = 4 * kU * mag;
      total_bound += loss_bound[t];
      total_gpu += lg[t];
      total_cpu += losses_cpu.data()[t];
    }
    expect_within("losses", losses_gpu, losses_cpu, loss_bound);
    if (std::isfinite(total_cpu)) {
      EXPECT_NEAR(total_gpu, total_cpu, total_bound + 1e-12 * std::fabs(total_cpu));
    } else {
      EXPECT_EQ(total_gpu, total_cpu);  // +inf from a -inf logit under label smoothing
    }

    // 4. Backward, per rank, with dloss and with a uniform scale. Per element
    // each side is within (6u + u |z|) |scale| e^z/S (exp and its argument, the
    // division) plus 3u |scale| (e^z/S + a/V + (1 - a)[target]) (the
    // subtraction of a/V, the scaling, the target's subtraction; a/V itself
    // rounded once) of the exact value; twice that, generously:
    //   16u |scale| ((1 + |z|) e^z/S + a/V + (1 - a)[target])
    // (+ |scale| e^z/S below z = -87, where the CPU's exp flushes to 0).
    // Ignored rows and padded columns are exactly zero.
    const Tensor dloss_dev = p.dloss.to(dev);
    for (int r = 0; r < c.ranks; ++r) {
      const CrossEntropyRows rows = rows_of(c, p.targets, r);
      const Tensor x = p.logits.slice(1, r * vl, vl);
      for (const bool per_token : {true, false}) {
        SCOPED_TRACE(per_token ? "dloss per token" : "uniform scale");
        const float uniform = 1.0f / static_cast<float>(T);
        Tensor dx_cpu = Tensor::empty({T, vl}), dx_gpu = Tensor::full({T, vl}, 7.0f, dev);
        cpu::cross_entropy_backward(x, rows, m_host, s_total, per_token ? &p.dloss : nullptr,
                                    uniform, dx_cpu);
        gpu::cross_entropy_backward(logits_dev.slice(1, r * vl, vl), rows, m_dev, s_total.to(dev),
                                    per_token ? &dloss_dev : nullptr, uniform, dx_gpu);
        std::vector<double> bound(T * vl, 0.0);
        const std::vector<float> g = dx_gpu.to_vector();
        for (int64_t t = 0; t < T; ++t) {
          const bool ignored = p.targets[t] == kIgnore;
          const double scale = std::fabs(per_token ? p.dloss.data()[t] : uniform);
          for (int64_t j = 0; j < vl; ++j) {
            if (ignored || j >= rows.real) {
              EXPECT_EQ(g[t * vl + j], 0.0f) << "row " << t << ", column " << j;
              continue;
            }
            const double z = static_cast<double>(x(t, j)) - m[t];
            const double e = std::isinf(z) ? 0.0 : std::exp(z) / s_total.data()[t];
            const bool target = p.targets[t] - rows.vocab_start == j;
            bound[t * vl + j] =
                16 * kU * scale * ((1.0 + std::fabs(z)) * e + a_over_v + (target ? 1.0 - a : 0.0)) +
                (z < -87.0 ? scale * e : 0.0);  // the CPU flushes e^z to 0 there
          }
        }
        expect_within("dlogits, rank " + std::to_string(r), dx_gpu, dx_cpu, bound);
      }
    }
  }
}

GpuPieces run_gpu_pieces(const Case& c, const Problem& p, Device dev) {
  const CrossEntropyRows rows = rows_of(c, p.targets, 0);
  const Tensor x = p.logits.to(dev).slice(1, 0, c.vocab_local);
  GpuPieces g{Tensor::empty({c.tokens}, dev), Tensor::empty({c.tokens}, dev),
              Tensor::empty(target_shape(c), dev),
              Tensor::empty({c.tokens, c.vocab_local}, dev, p.logits.dtype())};
  gpu::cross_entropy_local_max(x, rows, g.max);
  gpu::cross_entropy_sums(x, rows, g.max, g.sum_exp, g.target_logit);
  const Tensor dloss = p.dloss.to(dev);
  gpu::cross_entropy_backward(x, rows, g.max, g.sum_exp, &dloss, 0.0f, g.dlogits);
  return g;
}

// Fixed reduction trees: every piece has the same bits on every run.
TEST(CudaCrossEntropyTest, RepeatedRunsGiveTheSameBits) {
  COLROW_REQUIRE_GPU();
  const Device dev = testing::test_gpu();
  const Case c{64, 1990, 1000, 2, 0.1f, true};  // rank 0: 1000 real columns
  const Problem p = make_problem(c, 77);
  const GpuPieces a = run_gpu_pieces(c, p, dev), b = run_gpu_pieces(c, p, dev);
  expect_same_bits("max", a.max, b.max);
  expect_same_bits("sum_exp", a.sum_exp, b.sum_exp);
  expect_same_bits("target_logit", a.target_logit, b.target_logit);
  expect_same_bits("dlogits", a.dlogits, b.dlogits);
  const CrossEntropyRows rows = rows_of(c, p.targets, 0);
  Tensor l1 = Tensor::empty({c.tokens}, dev), l2 = Tensor::empty({c.tokens}, dev);
  gpu::cross_entropy_loss(a.sum_exp, a.target_logit, rows, l1);
  gpu::cross_entropy_loss(a.sum_exp, a.target_logit, rows, l2);
  expect_same_bits("losses", l1, l2);
}

// bf16 logits are read natively: the same kernels on the widened logits give
// the same max, sums and target logits bit for bit, and the bf16 gradient is
// their fp32 gradient rounded once; also written over the logits (a strided
// column block: the GPU writes through the row stride).
TEST(CudaCrossEntropyTest, Bf16LogitsGiveTheFp32KernelsNumbersRoundedOnce) {
  COLROW_REQUIRE_GPU();
  const Device dev = testing::test_gpu();
  const Case c{64, 1990, 1000, 2, 0.1f, true};
  const Problem p = make_problem(c, 78);
  Problem narrow = p, wide = p;
  narrow.logits = p.logits.to(DType::kBF16);
  wide.logits = narrow.logits.to(DType::kF32);
  const GpuPieces b = run_gpu_pieces(c, narrow, dev), f = run_gpu_pieces(c, wide, dev);
  expect_same_bits("max", b.max, f.max);
  expect_same_bits("sum_exp", b.sum_exp, f.sum_exp);
  expect_same_bits("target_logit", b.target_logit, f.target_logit);
  EXPECT_EQ(b.dlogits.dtype(), DType::kBF16);
  EXPECT_EQ(b.dlogits.to_vector(), f.dlogits.to(DType::kBF16).to_vector());

  const CrossEntropyRows rows = rows_of(c, p.targets, 0);
  Tensor logits = narrow.logits.to(dev);
  Tensor block = logits.slice(1, 0, c.vocab_local);
  const Tensor dloss = p.dloss.to(dev);
  gpu::cross_entropy_backward(block, rows, b.max, b.sum_exp, &dloss, 0.0f, block);
  EXPECT_EQ(block.to_vector(), b.dlogits.to_vector());
}

// One rank, row 2 holds a NaN logit: its loss is NaN on both backends, the
// other rows' losses stay finite.
TEST(CudaCrossEntropyTest, NanLogitMakesItsRowLossNan) {
  COLROW_REQUIRE_GPU();
  const Device dev = testing::test_gpu();
  const Case c{4, 37, 37, 1, 0.0f, false};
  Problem p = make_problem(c, 5);
  p.logits(2, (p.targets[2] + 3) % 37) = kNaN;
  const CrossEntropyRows rows = rows_of(c, p.targets, 0);
  auto losses_of = [&](Device d, bool use_gpu) {
    const Tensor x = p.logits.to(d);
    Tensor max = Tensor::empty({c.tokens}, d), se = Tensor::empty({c.tokens}, d),
           tl = Tensor::empty({c.tokens}, d), losses = Tensor::empty({c.tokens}, d);
    if (use_gpu) {
      gpu::cross_entropy_local_max(x, rows, max);
      gpu::cross_entropy_sums(x, rows, max, se, tl);
      gpu::cross_entropy_loss(se, tl, rows, losses);
    } else {
      cpu::cross_entropy_local_max(x, rows, max);
      cpu::cross_entropy_sums(x, rows, max, se, tl);
      cpu::cross_entropy_loss(se, tl, rows, losses);
    }
    return losses.to_vector();
  };
  const std::vector<float> g = losses_of(dev, true), h = losses_of(Device::cpu(), false);
  for (int64_t t = 0; t < c.tokens; ++t) {
    EXPECT_EQ(std::isnan(g[t]), t == 2) << "GPU row " << t;
    EXPECT_EQ(std::isnan(h[t]), t == 2) << "CPU row " << t;
  }
}

TEST(CudaCrossEntropyTest, ShapeErrorsAreInternalErrors) {
  COLROW_REQUIRE_GPU();
  const Device dev = testing::test_gpu();
  const std::vector<int32_t> targets = {0, 1, 2};
  CrossEntropyRows rows;
  rows.targets = &targets;
  rows.real = 4;
  rows.vocab_size = 4;
  const Tensor logits = Tensor::zeros({3, 4}, dev);
  Tensor max3 = Tensor::empty({3}, dev), max2 = Tensor::empty({2}, dev);
  EXPECT_THROW(gpu::cross_entropy_local_max(logits, rows, max2), InternalError);
  EXPECT_THROW(gpu::cross_entropy_local_max(Tensor::zeros({2, 4}, dev), rows, max3), InternalError);
  CrossEntropyRows too_real = rows;
  too_real.real = 5;
  EXPECT_THROW(gpu::cross_entropy_local_max(logits, too_real, max3), InternalError);
  CrossEntropyRows smoothing = rows;
  smoothing.label_smoothing = 0.1f;
  Tensor se = Tensor::empty({3}, dev), tl1 = Tensor::empty({3}, dev);
  EXPECT_THROW(gpu::cross_entropy_sums(logits, smoothing, max3, se, tl1), InternalError)
      << "target_logit must be [tokens, 2] with label smoothing";
  Tensor dx = Tensor::empty({3, 5}, dev);
  EXPECT_THROW(gpu::cross_entropy_backward(logits, rows, max3, se, nullptr, 1.0f, dx),
               InternalError);
  CrossEntropyRows no_targets = rows;
  no_targets.targets = nullptr;
  EXPECT_THROW(gpu::cross_entropy_local_max(logits, no_targets, max3), InternalError);
}

}  // namespace
}  // namespace colrow
