// CUDA vocabulary-parallel cross-entropy pieces against the CPU kernels, with
// tp emulated on one process: the full logits are split into per-rank column
// blocks (strided views), and the all-gather between the pieces is done on
// the host from the CPU's partials, so each GPU piece is compared with the
// CPU piece on the same inputs. Cases: vocab_size_local 1, 37, 504, 1000, a rank with
// padded columns (filled with NaN, which must never be read), a rank with no
// real class, ignored rows, label smoothing, -inf logits; repeated runs give
// the same bits; a NaN logit makes its row's loss NaN; shape errors; bf16
// logits read natively give the fp32 kernels' numbers, rounded once; a chunk
// of the rows (first_row) gives the whole batch's rows.
// Built twice: on a GPU (label gpu), and with COLROW_WARP_EMULATION, where
// the same kernels run on the CPU through the warp emulation
// (emulated/cross_entropy.h), so CI checks them without a GPU.
#ifdef COLROW_WARP_EMULATION
#include "kernels/cuda/emulated/cross_entropy.h"
#else
#include "kernels/cuda/cross_entropy.h"
#endif

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
#ifdef COLROW_WARP_EMULATION
namespace gpu = testing::emulated;
#else
namespace gpu = kernels::cuda;
#endif
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
// last with 10 real classes; three ranks, the last with none (30 = 16 + 14 + 0);
// rows longer than a block's 256 threads x 8 columns, so that each thread sums
// several groups and rescales its running sum.
const Case kCases[] = {{5, 1, 1, 1, 0.0f, false},      {7, 37, 37, 1, 0.0f, true},
                       {33, 1000, 504, 2, 0.1f, true}, {9, 50, 20, 3, 0.1f, false},
                       {12, 30, 16, 3, 0.0f, true},    {100, 30, 16, 3, 0.2f, true},
                       {6, 5003, 5003, 1, 0.1f, true}, {8, 9001, 4608, 2, 0.0f, false}};

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
    // A row whose real logits on rank 1 are all -inf (that rank's max is -inf;
    // +inf loss under label smoothing), its target on rank 0.
    if (t % 7 == 5 && c.ranks > 1) {
      for (int64_t j = c.vocab_local; j < std::min(2 * c.vocab_local, c.vocab_size); ++j) {
        x[t * width + j] = -kInf;
      }
      if (targets[t] != kIgnore) targets[t] = static_cast<int32_t>(targets[t] % c.vocab_local);
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
  rows.vocab_size_local = c.vocab_local;
  rows.label_smoothing = c.smoothing;
  return rows;
}

Shape partials_shape(int64_t rows) {
  return Shape{rows, kernels::kCrossEntropyPartials};
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
  Tensor partials, max, sum_exp, losses, dlogits;
};

TEST(CudaCrossEntropyTest, PiecesMatchCpu) {
  COLROW_REQUIRE_GPU();
  const Device dev = testing::test_gpu();
  uint32_t seed = 10;
  for (const Case& c : kCases) {
    SCOPED_TRACE(c.name());
    const Problem p = make_problem(c, seed++);
    const Tensor logits_dev = testing::copy_to(p.logits, dev);
    const int64_t T = c.tokens, vl = c.vocab_local, P = kernels::kCrossEntropyPartials;
    const double a = c.smoothing, a_over_v = a / static_cast<double>(c.vocab_size);

    // 1. Each rank's partials: {m_r, S_r, x_target, Z_r}. The max and the
    // target logit round nothing, so they are bitwise equal. S_r: each side
    // forms every z = x - m' with one fp32 subtraction against a max m' <= m_r
    // it has seen so far (the GPU's thread's running max, the CPU's chunk's),
    // so |dz| <= u |z_j| with z_j = x_j - m_r; each exp is within 4 ulp; the
    // rescaling to m_r and the sums are in double (~n 2^-53); the rounding to
    // fp32 costs u/2 S_r per side:
    //   |S_gpu - S_cpu| <= sum_j (8u + 2u |z_j|) e^{z_j} <= 8u sum_j (1 + |z_j|) e^{z_j},
    // plus e^{z_j} for z_j < -87, which the CPU's exp flushes to 0.
    // Z_r: the GPU sums the raw logits in double (exact to ~n 2^-53 max |x|),
    // the CPU rounds each z once (u |z_j|); the final rounding to fp32 of two
    // double sums that differ can land an ulp apart (u |Z_r|): 3u sum |z_j|.
    Tensor gathered = Tensor::empty(partials_shape(c.ranks * T));  // the CPU's, in rank order
    for (int r = 0; r < c.ranks; ++r) {
      const CrossEntropyRows rows = rows_of(c, p.targets, r);
      const Tensor x = p.logits.slice(1, r * vl, vl);
      Tensor cpu_part = gathered.slice(0, r * T, T);
      Tensor gpu_part = Tensor::full(partials_shape(T), 7.0f, dev);
      cpu::cross_entropy_partials(x, rows, cpu_part);
      gpu::cross_entropy_partials(logits_dev.slice(1, r * vl, vl), rows, gpu_part);
      std::vector<double> bound(T * P, 0.0);
      for (int64_t t = 0; t < T; ++t) {
        if (p.targets[t] == kIgnore) continue;  // exactly zero on both sides
        const double m_r = cpu_part(t, 0);
        double exp_mag = 0.0, z_mag = 0.0, flushed = 0.0;
        for (int64_t j = 0; j < rows.real; ++j) {
          const double z = static_cast<double>(x(t, j)) - m_r;
          if (std::isinf(z)) continue;
          exp_mag += (1.0 + std::fabs(z)) * std::exp(z);
          if (z < -87.0) flushed += std::exp(z);
          z_mag += std::fabs(z);
        }
        bound[t * P + 1] = 8 * kU * exp_mag + flushed;
        bound[t * P + 3] = 3 * kU * z_mag;
      }
      expect_within("partials, rank " + std::to_string(r), gpu_part, cpu_part.clone(), bound);
    }

    // 2. The combine, on the same gathered partials. Both sides work in double
    // and round once; they differ only in exp and log (each within an ulp of
    // double), so max is bitwise equal, S within an fp32 ulp (2u S), and the
    // loss within 4u (|log S| + (1 - a) |x_target - m| + a/V |Z|).
    const CrossEntropyRows rows0 = rows_of(c, p.targets, 0);
    Tensor max_cpu = Tensor::empty({T}), s_cpu = Tensor::empty({T}),
           losses_cpu = Tensor::empty({T});
    Tensor max_gpu = Tensor::full({T}, 7.0f, dev), s_gpu = Tensor::full({T}, 7.0f, dev),
           losses_gpu = Tensor::full({T}, 7.0f, dev);
    cpu::cross_entropy_combine(gathered, rows0, max_cpu, s_cpu, losses_cpu);
    gpu::cross_entropy_combine(testing::copy_to(gathered, dev), rows0, max_gpu, s_gpu, losses_gpu);
    expect_same_bits("max", max_gpu, max_cpu);
    std::vector<double> s_bound(T, 0.0), loss_bound(T, 0.0);
    double total_bound = 0.0, total_gpu = 0.0, total_cpu = 0.0;  // in token order, as mean_loss
    const std::vector<float> lg = losses_gpu.to_vector();
    for (int64_t t = 0; t < T; ++t) {
      if (p.targets[t] == kIgnore) {
        EXPECT_EQ(lg[t], 0.0f) << "ignored row " << t;
        continue;
      }
      const double m = max_cpu.data()[t], s = s_cpu.data()[t];
      double target = 0.0, z_sum = 0.0;
      for (int64_t j = 0; j < c.vocab_size; ++j) {
        const double z = static_cast<double>(p.logits(t, j)) - m;
        if (j == p.targets[t]) target = z;
        z_sum += z;
      }
      s_bound[t] = 2 * kU * s;  // an fp32 ulp of S is at most 2u S
      loss_bound[t] = 4 * kU *
                      (std::fabs(std::log(s)) + (1.0 - a) * std::fabs(target) +
                       (a > 0.0 ? a_over_v * std::fabs(z_sum) : 0.0));  // z_sum may be -inf
      total_bound += loss_bound[t];
      total_gpu += lg[t];
      total_cpu += losses_cpu.data()[t];
    }
    expect_within("sum_exp", s_gpu, s_cpu, s_bound);
    expect_within("losses", losses_gpu, losses_cpu, loss_bound);
    if (std::isfinite(total_cpu)) {
      EXPECT_NEAR(total_gpu, total_cpu, total_bound + 1e-12 * std::fabs(total_cpu));
    } else {
      EXPECT_EQ(total_gpu, total_cpu);  // +inf from a -inf logit under label smoothing
    }

    // 3. Backward, per rank, with dloss and with a uniform scale. Per element
    // each side is within (6u + u |z|) |scale| e^z/S (exp and its argument, the
    // division) plus 3u |scale| (e^z/S + a/V + (1 - a)[target]) (the
    // subtraction of a/V, the scaling, the target's subtraction; a/V itself
    // rounded once) of the exact value; twice that, generously:
    //   16u |scale| ((1 + |z|) e^z/S + a/V + (1 - a)[target])
    // (+ |scale| e^z/S below z = -87, where the CPU's exp flushes to 0).
    // Ignored rows and padded columns are exactly zero.
    const Tensor dloss_dev = testing::copy_to(p.dloss, dev), m_dev = testing::copy_to(max_cpu, dev),
                 s_dev = testing::copy_to(s_cpu, dev);
    for (int r = 0; r < c.ranks; ++r) {
      const CrossEntropyRows rows = rows_of(c, p.targets, r);
      const Tensor x = p.logits.slice(1, r * vl, vl);
      for (const bool per_token : {true, false}) {
        SCOPED_TRACE(per_token ? "dloss per token" : "uniform scale");
        const float uniform = 1.0f / static_cast<float>(T);
        Tensor dx_cpu = Tensor::empty({T, vl}), dx_gpu = Tensor::full({T, vl}, 7.0f, dev);
        cpu::cross_entropy_backward(x, rows, max_cpu, s_cpu, per_token ? &p.dloss : nullptr,
                                    uniform, dx_cpu);
        gpu::cross_entropy_backward(logits_dev.slice(1, r * vl, vl), rows, m_dev, s_dev,
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
            const double z = static_cast<double>(x(t, j)) - max_cpu.data()[t];
            const double e = std::isinf(z) ? 0.0 : std::exp(z) / s_cpu.data()[t];
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

// One rank's pieces, its partials standing for the gathered ones.
GpuPieces run_gpu_pieces(const Case& c, const Problem& p, Device dev) {
  CrossEntropyRows rows = rows_of(c, p.targets, 0);
  rows.vocab_size = rows.real;  // rank 0's classes stand for the whole vocabulary
  const Tensor x = testing::copy_to(p.logits, dev).slice(1, 0, c.vocab_local);
  GpuPieces g{Tensor::empty(partials_shape(c.tokens), dev), Tensor::empty({c.tokens}, dev),
              Tensor::empty({c.tokens}, dev), Tensor::empty({c.tokens}, dev),
              Tensor::empty({c.tokens, c.vocab_local}, dev, p.logits.dtype())};
  gpu::cross_entropy_partials(x, rows, g.partials);
  gpu::cross_entropy_combine(g.partials, rows, g.max, g.sum_exp, g.losses);
  const Tensor dloss = testing::copy_to(p.dloss, dev);
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
  expect_same_bits("partials", a.partials, b.partials);
  expect_same_bits("max", a.max, b.max);
  expect_same_bits("sum_exp", a.sum_exp, b.sum_exp);
  expect_same_bits("losses", a.losses, b.losses);
  expect_same_bits("dlogits", a.dlogits, b.dlogits);
}

// bf16 logits are read natively: the same kernels on the widened logits give
// the same partials, max, sums and losses bit for bit, and the bf16 gradient is
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
  expect_same_bits("partials", b.partials, f.partials);
  expect_same_bits("max", b.max, f.max);
  expect_same_bits("sum_exp", b.sum_exp, f.sum_exp);
  expect_same_bits("losses", b.losses, f.losses);
  EXPECT_EQ(b.dlogits.dtype(), DType::kBF16);
  EXPECT_EQ(b.dlogits.to_vector(), f.dlogits.to(DType::kBF16).to_vector());

  CrossEntropyRows rows = rows_of(c, p.targets, 0);
  rows.vocab_size = rows.real;  // as run_gpu_pieces
  Tensor logits = testing::copy_to(narrow.logits, dev);
  Tensor block = logits.slice(1, 0, c.vocab_local);
  const Tensor dloss = testing::copy_to(p.dloss, dev);
  gpu::cross_entropy_backward(block, rows, b.max, b.sum_exp, &dloss, 0.0f, block);
  EXPECT_EQ(block.to_vector(), b.dlogits.to_vector());
}

// A chunk of the batch's rows (first_row, tokens: the output head in token
// chunks) reads its own targets out of the batch's, uploaded once: its
// pieces are the whole batch's rows, bit for bit.
TEST(CudaCrossEntropyTest, RowChunksAreTheBatchsRows) {
  COLROW_REQUIRE_GPU();
  const Device dev = testing::test_gpu();
  const Case c{64, 1990, 1000, 2, 0.1f, true};
  const Problem p = make_problem(c, 80);
  const GpuPieces whole = run_gpu_pieces(c, p, dev);
  CrossEntropyRows rows = rows_of(c, p.targets, 0);
  rows.vocab_size = rows.real;  // as run_gpu_pieces
  const Tensor x = testing::copy_to(p.logits, dev).slice(1, 0, c.vocab_local);
  const Tensor dloss = testing::copy_to(p.dloss, dev);
  for (const auto& [first, count] : {std::pair<int64_t, int64_t>{0, 29}, {29, 34}, {63, 1}}) {
    SCOPED_TRACE(std::to_string(first) + " + " + std::to_string(count));
    rows.first_row = first;
    rows.tokens = count;
    const Tensor chunk = x.slice(0, first, count);
    Tensor partials = Tensor::empty(partials_shape(count), dev);
    Tensor max = Tensor::empty({count}, dev), sum_exp = Tensor::empty({count}, dev);
    Tensor losses = Tensor::empty({count}, dev),
           dlogits = Tensor::empty({count, c.vocab_local}, dev);
    gpu::cross_entropy_partials(chunk, rows, partials);
    gpu::cross_entropy_combine(partials, rows, max, sum_exp, losses);
    const Tensor chunk_dloss = dloss.slice(0, first, count);
    gpu::cross_entropy_backward(chunk, rows, max, sum_exp, &chunk_dloss, 0.0f, dlogits);
    expect_same_bits("partials", partials, whole.partials.slice(0, first, count));
    expect_same_bits("losses", losses, whole.losses.slice(0, first, count));
    expect_same_bits("dlogits", dlogits, whole.dlogits.slice(0, first, count));
  }
}

// Each thread sums the same groups of 8 columns whatever the dtype and the
// row's alignment: bf16 logits in rows that start on 16 bytes, in rows that
// do not (a column offset of 1 or 3 and an odd row length), and the same
// values in fp32 give the same partials bit for bit.
TEST(CudaCrossEntropyTest, PartialsDoNotDependOnDtypeOrAlignment) {
  COLROW_REQUIRE_GPU();
  const Device dev = testing::test_gpu();
  const Case c{9, 5003, 5003, 1, 0.1f, true};
  const Problem p = make_problem(c, 79);
  const CrossEntropyRows rows = rows_of(c, p.targets, 0);
  const Tensor narrow = p.logits.to(DType::kBF16), wide = narrow.to(DType::kF32);
  auto partials_of = [&](const Tensor& host, int64_t offset, int64_t row_length) {
    Tensor padded = Tensor::zeros({c.tokens, row_length}, Device::cpu(), host.dtype());
    padded.slice(1, offset, c.vocab_size).copy_from(host);
    const Tensor on_gpu = testing::copy_to(padded, dev);
    Tensor out = Tensor::full(partials_shape(c.tokens), 7.0f, dev);
    gpu::cross_entropy_partials(on_gpu.slice(1, offset, c.vocab_size), rows, out);
    return out;
  };
  const Tensor aligned = partials_of(narrow, 0, 5008);  // 10016-byte rows
  for (const int64_t offset : {1, 3}) {
    expect_same_bits("bf16, offset " + std::to_string(offset), partials_of(narrow, offset, 5011),
                     aligned);
  }
  expect_same_bits("fp32, aligned", partials_of(wide, 0, 5008), aligned);
  expect_same_bits("fp32, offset 1", partials_of(wide, 1, 5007), aligned);
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
    Tensor partials = Tensor::empty(partials_shape(c.tokens), d);
    Tensor max = Tensor::empty({c.tokens}, d), se = Tensor::empty({c.tokens}, d),
           losses = Tensor::empty({c.tokens}, d);
    if (use_gpu) {
      gpu::cross_entropy_partials(x, rows, partials);
      gpu::cross_entropy_combine(partials, rows, max, se, losses);
    } else {
      cpu::cross_entropy_partials(x, rows, partials);
      cpu::cross_entropy_combine(partials, rows, max, se, losses);
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
  Tensor partials3 = Tensor::empty(partials_shape(3), dev);
  Tensor partials2 = Tensor::empty(partials_shape(2), dev);
  EXPECT_THROW(gpu::cross_entropy_partials(logits, rows, partials2), InternalError);
  EXPECT_THROW(gpu::cross_entropy_partials(Tensor::zeros({2, 4}, dev), rows, partials3),
               InternalError);
  CrossEntropyRows too_real = rows;
  too_real.real = 5;
  EXPECT_THROW(gpu::cross_entropy_partials(logits, too_real, partials3), InternalError);
  Tensor max3 = Tensor::empty({3}, dev), se = Tensor::empty({3}, dev),
         losses = Tensor::empty({3}, dev);
  CrossEntropyRows smoothing = rows;
  smoothing.label_smoothing = 0.1f;
  EXPECT_THROW(gpu::cross_entropy_combine(partials3, smoothing, max3, se, losses), InternalError)
      << "label smoothing counts each rank's real classes: vocab_size_local must be set";
  EXPECT_THROW(
      gpu::cross_entropy_combine(Tensor::empty(partials_shape(4), dev), rows, max3, se, losses),
      InternalError)
      << "the gathered rows must be whole ranks of tokens";
  Tensor dx = Tensor::empty({3, 5}, dev);
  EXPECT_THROW(gpu::cross_entropy_backward(logits, rows, max3, se, nullptr, 1.0f, dx),
               InternalError);
  CrossEntropyRows no_targets = rows;
  no_targets.targets = nullptr;
  EXPECT_THROW(gpu::cross_entropy_partials(logits, no_targets, partials3), InternalError);
}

}  // namespace
}  // namespace colrow
