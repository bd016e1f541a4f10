// AdamW over every tp x dp mesh of the world, zero 0 and ZeRO-1, on a toy set
// of parameters shaped like a model's (split over tp along dim 0 and dim 1,
// replicated, KV-style blocks shared by two tp ranks) with different gradients
// on every dp rank: against an independent double-precision AdamW with
// clipping; ZeRO-1 against zero 0; the global norm across meshes; weight decay
// on matrices only; the exact collectives of one step; configuration errors;
// gradients reduced over dp as bf16 (--grad-reduce-dtype bf16); the bf16
// compute copies renewed by every step; gradient buckets, reduced in the step
// or during backward (overlap).
#include "colrow/train/adamw.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <memory>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "colrow/core/error.h"
#include "colrow/dist/process_mesh.h"
#include "colrow/dist/recording_communicator.h"
#include "colrow/nn/parameter_group.h"
#include "nn/layer_test_helpers.h"
#include "support/adamw_reference.h"
#include "support/test_world.h"

namespace colrow {
namespace {

using testing::world;
using Values = std::vector<double>;

constexpr int kSteps = 5;
// Gradient scales per step, powers of two: with grad_clip 2, steps 1 and 3
// clip (norm >= 7) and steps 0, 2, 4 do not (norm <= 1).
constexpr double kScale[kSteps] = {0.125, 4.0, 0.0625, 8.0, 0.125};
constexpr double kClip = 2.0;
double lr_of(int step) {
  return 0.01 * (1 + step % 3);
}

struct ToyTensor {
  const char* name;
  Shape full;
  int dim;
};
const ToyTensor kTensors[] = {
    {"h.0.w1.weight", {12, 6}, 0},  // split over tp along rows (column-parallel)
    {"h.0.w2.weight", {6, 12}, 1},  // split along columns (row-parallel)
    {"h.0.w2.bias", {6}, 0},        // replicated
    {"h.0.k.weight", {4, 6}, 0},    // 2 blocks: at tp 4, each on 2 ranks (replicated KV)
    {"ln_f.weight", {7}, 0},        // replicated, odd size: ZeRO-1 pads
};
constexpr size_t kCount = sizeof(kTensors) / sizeof(kTensors[0]);

ShardSpec spec_of(size_t i, int tp_rank, int tp) {
  const ToyTensor& t = kTensors[i];
  if (t.full.size() == 1) return ShardSpec::replicated(t.full);
  int count = tp;
  if (i == 3) count = tp % 2 == 0 ? 2 : 1;  // two KV heads: split at tp 2, shared at tp 4
  return {t.full, t.dim, tp_rank / (tp / count), count};
}

// The elements a shard holds, row-major.
Values block_of(const Values& full, const ShardSpec& s) {
  if (s.full_shape.size() == 1) return full;
  const int64_t rows = s.full_shape[0], cols = s.full_shape[1];
  const reference::Matrix b = testing::block(full, rows, cols, s.dim, s.index, s.count);
  return Values(b.begin(), b.end());
}

// Initial values: k 2^-10 in [-1, 1).
Values initial_values(size_t i) {
  std::mt19937_64 gen(100 + i);
  Values v(shape_numel(kTensors[i].full));
  for (double& x : v) x = static_cast<double>(static_cast<int64_t>(gen() % 2048) - 1024) / 1024;
  return v;
}

// Gradient of tensor i on dp rank d at step s: k 2^-8 times a power of two,
// |k| <= 256. Dyadic with few bits, so sums over up to 4 ranks are exact in
// fp32 in any order: the average differs from the double one only by the
// division by dp (one rounding), and zero 0 and ZeRO-1 sum to the same bits.
Values full_grad(size_t i, int d, int s) {
  std::mt19937_64 gen(1000 * s + 10 * d + i);
  Values v(shape_numel(kTensors[i].full));
  for (double& x : v)
    x = static_cast<double>(static_cast<int64_t>(gen() % 513) - 256) / 256 * kScale[s];
  return v;
}

Tensor to_tensor(const Shape& shape, const Values& v) {
  return Tensor::from_vector(shape, std::vector<float>(v.begin(), v.end()));
}

AdamWConfig config_with(int zero, DType grad_reduce_dtype = DType::kF32) {
  AdamWConfig c;
  c.grad_reduce_dtype = grad_reduce_dtype;
  c.beta1 = 0.9f;
  c.beta2 = 0.95f;
  c.eps = 1e-8f;
  c.weight_decay = 0.1f;
  c.grad_clip = static_cast<float>(kClip);
  c.zero = zero;
  return c;
}

std::vector<std::pair<int, int>> meshes() {
  std::vector<std::pair<int, int>> out;
  for (int tp = 1; tp <= world().size(); ++tp) {
    if (world().size() % tp == 0) out.push_back({tp, world().size() / tp});
  }
  return out;
}

struct TrainRun {
  std::vector<std::unique_ptr<Parameter>> params;
  std::vector<double> norms;
};

// Every toy tensor's shard on tp rank `tp_rank` of `tp_size`, at its initial
// values; `owned` keeps them, the pointers are AdamW's list.
std::vector<Parameter*> initial_params(int tp_rank, int tp_size,
                                       std::vector<std::unique_ptr<Parameter>>& owned) {
  std::vector<Parameter*> ptrs;
  for (size_t i = 0; i < kCount; ++i) {
    const ShardSpec spec = spec_of(i, tp_rank, tp_size);
    owned.push_back(std::make_unique<Parameter>(kTensors[i].name, spec, Init::zeros(), 0));
    owned.back()->value.copy_from(to_tensor(spec.local_shape(), block_of(initial_values(i), spec)));
    ptrs.push_back(owned.back().get());
  }
  return ptrs;
}

// Step s's gradients of dp rank d, in place of full_grad's: k/16 times
// kScale[s], |k| <= 16. Sums over up to 4 ranks need 7 significant bits, so
// bf16 holds every gradient and every partial sum exactly.
Values coarse_grad(size_t i, int d, int s) {
  Values v = full_grad(i, d, s);
  for (double& x : v) x = std::round(x / kScale[s] * 16) / 16 * kScale[s];
  return v;
}

using GradFn = Values (*)(size_t, int, int);

// Step s's gradients of dp rank `dp_rank`, each parameter's shard of them.
void set_grads(const std::vector<std::unique_ptr<Parameter>>& params, int dp_rank, int s,
               GradFn grad_of = full_grad) {
  for (size_t i = 0; i < params.size(); ++i) {
    Parameter& p = *params[i];
    p.grad.copy_from(to_tensor(p.shard.local_shape(), block_of(grad_of(i, dp_rank, s), p.shard)));
  }
}

TrainRun train(Communicator& tp, Communicator& dp, int zero, int steps,
               DType grad_reduce_dtype = DType::kF32, GradFn grad_of = full_grad) {
  TrainRun run;
  AdamW adamw(tp, dp, initial_params(tp.rank(), tp.size(), run.params),
              config_with(zero, grad_reduce_dtype));
  for (int s = 0; s < steps; ++s) {
    set_grads(run.params, dp.rank(), s, grad_of);
    run.norms.push_back(adamw.step(static_cast<float>(lr_of(s))));
  }
  EXPECT_EQ(adamw.step_count(), steps);
  return run;
}

struct Reference {
  reference::AdamWTensors state;
  std::vector<double> norms;
};

Reference reference_run(int dp, int steps, double clip = kClip) {
  Reference ref;
  for (size_t i = 0; i < kCount; ++i) {
    ref.state.params.push_back(initial_values(i));
    ref.state.m.push_back(Values(ref.state.params.back().size(), 0.0));
    ref.state.v.push_back(Values(ref.state.params.back().size(), 0.0));
    ref.state.decay.push_back(kTensors[i].full.size() >= 2);
  }
  const reference::AdamWHyper hyper{0.9f, 0.95f, 1e-8f, 0.1f, clip};
  for (int s = 0; s < steps; ++s) {
    std::vector<Values> grads;
    for (size_t i = 0; i < kCount; ++i) {
      Values mean(shape_numel(kTensors[i].full), 0.0);
      for (int d = 0; d < dp; ++d) {
        const Values g = full_grad(i, d, s);
        for (size_t j = 0; j < g.size(); ++j) mean[j] += g[j] / dp;
      }
      grads.push_back(mean);
    }
    ref.norms.push_back(reference::adamw_step(ref.state, grads, s + 1, lr_of(s), hyper));
  }
  return ref;
}

// fp32 against double: the averaged grads agree to one rounding, each step's
// update lr m_hat / (sqrt(v_hat) + eps) (|m_hat / sqrt(v_hat)| <= ~3 here) to a
// few ulps of lr, and the decay p (1 - lr wd) to an ulp of |p| <= 1: after 5
// steps a few 1e-7 at most; 2e-6 leaves room, and a wrong formula (bias
// correction, decay, clip, dp average) moves values by ~1e-3 or more.
constexpr double kTolerance = 2e-6;

// The test can see clipping: without it the reference ends far outside kTolerance.
TEST(AdamW, ClippingMovesTheReferenceBeyondTheTolerance) {
  const Reference clipped = reference_run(world().size(), kSteps);
  const Reference unclipped = reference_run(world().size(), kSteps, /*clip=*/0.0);
  double max_difference = 0.0;
  for (size_t i = 0; i < kCount; ++i) {
    for (size_t j = 0; j < clipped.state.params[i].size(); ++j) {
      max_difference = std::max(
          max_difference, std::abs(clipped.state.params[i][j] - unclipped.state.params[i][j]));
    }
  }
  EXPECT_GT(max_difference, 100 * kTolerance);
}

TEST(AdamW, MatchesDoubleReferenceOnEveryMesh) {
  for (auto [tp_size, dp_size] : meshes()) {
    ProcessMesh mesh(world(), tp_size, /*pp=*/1, dp_size);
    const Reference ref = reference_run(dp_size, kSteps);
    for (int zero : {0, 1}) {
      SCOPED_TRACE("tp " + std::to_string(tp_size) + " dp " + std::to_string(dp_size) + " zero " +
                   std::to_string(zero));
      TrainRun run = train(mesh.tp(), mesh.dp(), zero, kSteps);
      for (size_t i = 0; i < kCount; ++i) {
        const Parameter& p = *run.params[i];
        const Values expected = block_of(ref.state.params[i], p.shard);
        const std::vector<float> got = p.value.to_vector();
        ASSERT_EQ(got.size(), expected.size());
        for (size_t j = 0; j < got.size(); ++j) {
          EXPECT_NEAR(got[j], expected[j], kTolerance) << p.name << "[" << j << "]";
        }
      }
      for (int s = 0; s < kSteps; ++s) {
        // Norm of fp32 averages (each within 2^-24 relative of the double one).
        EXPECT_NEAR(run.norms[s], ref.norms[s], 1e-6 * ref.norms[s]) << "step " << s;
        EXPECT_EQ(ref.norms[s] > kClip, s == 1 || s == 3) << "the test must clip exactly there";
      }
    }
  }
}

// With dyadic grads the dp sums are exact in any order, so both modes average
// to the same bits; the global norm's double partial sums are added in another
// order (per slice, then over dp), which moves it by ~1e-16 relative, far below
// the fp32 rounding of the clip factor. So the parameters agree bit for bit,
// and the norm agrees across modes and across tp.
TEST(AdamW, ZeroOneGivesTheSameParametersAsZeroZero) {
  for (auto [tp_size, dp_size] : meshes()) {
    SCOPED_TRACE("tp " + std::to_string(tp_size) + " dp " + std::to_string(dp_size));
    ProcessMesh mesh(world(), tp_size, /*pp=*/1, dp_size);
    TrainRun plain = train(mesh.tp(), mesh.dp(), 0, kSteps);
    TrainRun sharded = train(mesh.tp(), mesh.dp(), 1, kSteps);
    for (size_t i = 0; i < kCount; ++i) {
      EXPECT_EQ(plain.params[i]->value.to_vector(), sharded.params[i]->value.to_vector())
          << kTensors[i].name;
    }
    for (int s = 0; s < kSteps; ++s) {
      EXPECT_NEAR(plain.norms[s], sharded.norms[s], 1e-14 * plain.norms[s]);
      // The same dp average at every tp: the norm must not depend on tp.
      if (tp_size > 1) {
        const Reference ref = reference_run(dp_size, kSteps);
        EXPECT_NEAR(plain.norms[s], ref.norms[s], 1e-6 * ref.norms[s]);
      }
    }
  }
}

// bf16 training: each step renews every parameter's compute copy with the
// updated value rounded once (in the update's own pass at zero 0, after the
// gather at ZeRO-1), so no caller refreshes them; a step that updates nothing
// leaves them as they were.
TEST(AdamW, StepRenewsTheBf16ComputeCopies) {
  for (auto [tp_size, dp_size] : meshes()) {
    for (int zero : {0, 1}) {
      SCOPED_TRACE("tp " + std::to_string(tp_size) + " dp " + std::to_string(dp_size) + " zero " +
                   std::to_string(zero));
      ProcessMesh mesh(world(), tp_size, /*pp=*/1, dp_size);
      std::vector<std::unique_ptr<Parameter>> params;
      AdamW adamw(mesh.tp(), mesh.dp(), initial_params(mesh.tp().rank(), mesh.tp().size(), params),
                  config_with(zero, DType::kF32));
      for (auto& p : params) p->set_compute_dtype(DType::kBF16);
      for (int s = 0; s < 3; ++s) {
        set_grads(params, mesh.dp_rank(), s);
        if (s == 2) params[0]->grad.data()[0] = std::numeric_limits<float>::quiet_NaN();
        std::vector<std::vector<float>> before;
        for (auto& p : params) before.push_back(p->compute_copy.to_vector());
        const double norm = adamw.step(static_cast<float>(lr_of(s)));
        for (size_t i = 0; i < params.size(); ++i) {
          SCOPED_TRACE(std::string(kTensors[i].name) + ", step " + std::to_string(s));
          const std::vector<float> copy = params[i]->compute_copy.to_vector();
          EXPECT_EQ(copy, params[i]->value.to(DType::kBF16).to_vector());
          if (std::isfinite(norm)) {
            EXPECT_NE(copy, before[i]);  // the step moved every parameter
          } else {
            EXPECT_EQ(copy, before[i]);
          }
        }
      }
    }
  }
}

TEST(AdamW, WeightDecayAppliesToMatricesOnly) {
  for (auto [tp_size, dp_size] : meshes()) {
    ProcessMesh mesh(world(), tp_size, /*pp=*/1, dp_size);
    for (int zero : {0, 1}) {
      for (bool decay_none : {false, true}) {
        std::vector<std::unique_ptr<Parameter>> params;
        const std::vector<Parameter*> ptrs = initial_params(mesh.tp_rank(), tp_size, params);
        AdamWConfig config = config_with(zero);
        config.weight_decay = 0.5f;
        if (decay_none) config.decays = [](const Parameter&) { return false; };
        AdamW adamw(mesh.tp(), mesh.dp(), ptrs, config);
        // Zero grads: the moments stay 0, the Adam step is -0, only decay moves p.
        adamw.step(0.1f);
        const float factor = static_cast<float>(1.0 - 0.1f * 0.5);
        for (size_t i = 0; i < kCount; ++i) {
          const bool matrix = kTensors[i].full.size() == 2;
          const Values start = block_of(initial_values(i), params[i]->shard);
          const std::vector<float> got = params[i]->value.to_vector();
          for (size_t j = 0; j < got.size(); ++j) {
            const float p0 = static_cast<float>(start[j]);
            EXPECT_EQ(got[j], matrix && !decay_none ? p0 * factor : p0) << kTensors[i].name;
          }
        }
      }
    }
  }
}

// A NaN or Inf in one element of one gradient on one rank: every rank's
// norm is non-finite and nothing moves anywhere (parameters, moments, step
// count); the next finite step then gives the same bits as a run that never
// saw the bad step. Every tensor is tried, the replicated ones included: on
// tp ranks > 0 the norm does not count them, and the last world rank (tp
// rank > 0 where tp > 1) is the one poisoned.
TEST(AdamW, NonFiniteGradientOnOneRankUpdatesNothingAnywhere) {
  const float kBad[] = {std::numeric_limits<float>::quiet_NaN(),
                        std::numeric_limits<float>::infinity()};
  for (auto [tp_size, dp_size] : meshes()) {
    ProcessMesh mesh(world(), tp_size, /*pp=*/1, dp_size);
    for (int zero : {0, 1}) {
      for (size_t bad_tensor = 0; bad_tensor < kCount; ++bad_tensor) {
        SCOPED_TRACE("tp " + std::to_string(tp_size) + " zero " + std::to_string(zero) + " " +
                     kTensors[bad_tensor].name);
        std::vector<std::unique_ptr<Parameter>> bad_params, good_params;
        AdamW bad(mesh.tp(), mesh.dp(), initial_params(mesh.tp_rank(), tp_size, bad_params),
                  config_with(zero));
        AdamW good(mesh.tp(), mesh.dp(), initial_params(mesh.tp_rank(), tp_size, good_params),
                   config_with(zero));
        set_grads(bad_params, mesh.dp_rank(), 0);
        set_grads(good_params, mesh.dp_rank(), 0);
        bad.step(static_cast<float>(lr_of(0)));
        good.step(static_cast<float>(lr_of(0)));
        const std::vector<float> m_before = bad.exp_avg().to_vector();
        const std::vector<float> v_before = bad.exp_avg_sq().to_vector();
        std::vector<std::vector<float>> before;
        for (auto& p : bad_params) before.push_back(p->value.to_vector());

        set_grads(bad_params, mesh.dp_rank(), 1);
        if (world().rank() == world().size() - 1) {
          Tensor& g = bad_params[bad_tensor]->grad;
          g.view({g.numel()})
              .slice(0, g.numel() - 1, 1)
              .copy_from(Tensor::full({1}, kBad[bad_tensor % 2]));
        }
        EXPECT_FALSE(std::isfinite(bad.step(static_cast<float>(lr_of(1)))));
        EXPECT_EQ(bad.step_count(), 1);
        EXPECT_EQ(bad.exp_avg().to_vector(), m_before);
        EXPECT_EQ(bad.exp_avg_sq().to_vector(), v_before);
        for (size_t i = 0; i < kCount; ++i) {
          EXPECT_EQ(bad_params[i]->value.to_vector(), before[i]) << kTensors[i].name;
        }

        set_grads(bad_params, mesh.dp_rank(), 1);
        set_grads(good_params, mesh.dp_rank(), 1);
        EXPECT_EQ(bad.step(static_cast<float>(lr_of(1))), good.step(static_cast<float>(lr_of(1))));
        for (size_t i = 0; i < kCount; ++i) {
          EXPECT_EQ(bad_params[i]->value.to_vector(), good_params[i]->value.to_vector())
              << kTensors[i].name;
        }
      }
    }
  }
}

// With grad_reduce_dtype bf16 the dp sum is the bf16 wire's, of the same
// count, wherever there is more than one dp rank.
TEST(AdamW, OneStepIssuesExactlyTheseCollectives) {
  for (auto [tp_size, dp_size] : meshes()) {
    ProcessMesh mesh(world(), tp_size, /*pp=*/1, dp_size);
    for (auto [zero, dtype] : {std::pair{0, DType::kF32}, std::pair{1, DType::kF32},
                               std::pair{0, DType::kBF16}, std::pair{1, DType::kBF16}}) {
      SCOPED_TRACE("tp " + std::to_string(tp_size) + " zero " + std::to_string(zero) +
                   " grad_reduce_dtype " + dtype_name(dtype));
      const std::string wire = dtype == DType::kBF16 && dp_size > 1 ? "_bf16_wire" : "";
      RecordingCommunicator tp(mesh.tp()), dp(mesh.dp());
      std::vector<std::unique_ptr<Parameter>> params;
      std::vector<Parameter*> ptrs;
      int64_t local = 0;
      for (size_t i = 0; i < kCount; ++i) {
        params.push_back(std::make_unique<Parameter>(
            kTensors[i].name, spec_of(i, mesh.tp_rank(), tp_size), Init::zeros(), 0));
        ptrs.push_back(params.back().get());
        local += params.back()->value.numel();
      }
      AdamW adamw(tp, dp, ptrs, config_with(zero, dtype));
      EXPECT_TRUE(tp.events().empty() && dp.events().empty());  // construction talks to no one
      adamw.step(0.01f);
      const int64_t padded = (local + dp_size - 1) / dp_size * dp_size;
      using E = CollectiveEvent;
      if (zero == 0) {
        EXPECT_EQ(adamw.slice_size(), local);
        EXPECT_EQ(dp.events(), (std::vector<E>{{"all_reduce_sum" + wire, local, 0}}));
      } else {
        EXPECT_EQ(adamw.padded_size(), padded);
        EXPECT_EQ(adamw.slice_size(), padded / dp_size);
        std::vector<float> positions(padded);
        for (int64_t j = 0; j < padded; ++j) positions[j] = static_cast<float>(j);
        Tensor mine = Tensor::zeros({adamw.slice_size()});
        adamw.copy_own_slice(Tensor::from_vector({padded}, positions), mine);
        EXPECT_EQ(mine.data()[0], padded / dp_size * mesh.dp_rank());  // the dp_rank-th part
        EXPECT_EQ(dp.events(), (std::vector<E>{{"reduce_scatter_sum" + wire, padded, 0},
                                               {"all_gather", 2, 0},  // norm partials
                                               {"all_gather", padded / dp_size, 0}}));
      }
      EXPECT_EQ(tp.events(), (std::vector<E>{{"all_gather", 2, 0}}));
      EXPECT_EQ(adamw.exp_avg().numel(), adamw.slice_size());
      EXPECT_EQ(adamw.exp_avg_sq().numel(), adamw.slice_size());
    }
  }
}

// Where bf16 holds every gradient and every partial sum, the bf16 wire's sum
// is the fp32 one: the same parameters and norms, bit for bit, in both modes
// and on every mesh (whatever order the backend adds in).
TEST(AdamW, Bf16GradReduceIsExactWhereBf16HoldsEverySum) {
  for (auto [tp_size, dp_size] : meshes()) {
    ProcessMesh mesh(world(), tp_size, /*pp=*/1, dp_size);
    for (int zero : {0, 1}) {
      SCOPED_TRACE("tp " + std::to_string(tp_size) + " dp " + std::to_string(dp_size) + " zero " +
                   std::to_string(zero));
      TrainRun fp32 = train(mesh.tp(), mesh.dp(), zero, kSteps, DType::kF32, coarse_grad);
      TrainRun bf16 = train(mesh.tp(), mesh.dp(), zero, kSteps, DType::kBF16, coarse_grad);
      for (size_t i = 0; i < kCount; ++i) {
        EXPECT_EQ(bf16.params[i]->value.to_vector(), fp32.params[i]->value.to_vector())
            << kTensors[i].name;
      }
      EXPECT_EQ(bf16.norms, fp32.norms);
    }
  }
}

// Each rank's gradients are rounded to bf16 before they cross: every element
// 1 + 2^-10 (below half of bf16's ulp at 1) arrives as 1, so the norm of the
// average is sqrt(N) for N elements instead of fp32's sqrt(N) (1 + 2^-10).
// At dp 1 nothing crosses and nothing is rounded.
TEST(AdamW, Bf16GradReduceRoundsEachRanksGradients) {
  int64_t elements = 0;
  for (const ToyTensor& t : kTensors) elements += shape_numel(t.full);
  const double fp32_norm = std::sqrt(static_cast<double>(elements)) * (1.0 + 0x1p-10);
  for (auto [tp_size, dp_size] : meshes()) {
    ProcessMesh mesh(world(), tp_size, /*pp=*/1, dp_size);
    for (int zero : {0, 1}) {
      SCOPED_TRACE("tp " + std::to_string(tp_size) + " dp " + std::to_string(dp_size) + " zero " +
                   std::to_string(zero));
      std::vector<std::unique_ptr<Parameter>> params;
      AdamWConfig config = config_with(zero, DType::kBF16);
      config.grad_clip = 0.0f;
      AdamW adamw(mesh.tp(), mesh.dp(), initial_params(mesh.tp_rank(), tp_size, params), config);
      for (auto& p : params) p->grad.fill(1.0f + 0x1p-10f);
      const double norm = adamw.step(0.01f);
      const double expected = dp_size > 1 ? std::sqrt(static_cast<double>(elements)) : fp32_norm;
      EXPECT_NEAR(norm, expected, 1e-12 * expected);
    }
  }
}

// Buckets (AdamWConfig::bucket_size) change which collective carries each
// gradient and, under ZeRO-1, which rank updates it, not the arithmetic: with
// dyadic gradients the dp sums are exact, so one parameter per bucket, a few
// parameters per bucket, and either of them reduced during "backward"
// (grads_ready, reported as the model does: last parameters first, some never)
// give the parameters of one bucket bit for bit, and the norm to its double
// partial sums' order (see ZeroOneGivesTheSameParametersAsZeroZero). The
// same on the bf16 wire, with gradients whose every partial sum bf16 holds.
TEST(AdamW, BucketsAndOverlapGiveTheBitsOfOneBucket) {
  struct Layout {
    int64_t bucket_size;
    bool overlap;
  };
  struct Wire {
    DType dtype;
    GradFn grad_of;
  };
  for (auto [tp_size, dp_size] : meshes()) {
    ProcessMesh mesh(world(), tp_size, /*pp=*/1, dp_size);
    for (auto [dtype, grad_of] : {Wire{DType::kF32, full_grad}, Wire{DType::kBF16, coarse_grad}})
      for (int zero : {0, 1}) {
        TrainRun one = train(mesh.tp(), mesh.dp(), zero, kSteps, dtype, grad_of);
        for (Layout layout :
             {Layout{1, false}, Layout{1, true}, Layout{20, false}, Layout{20, true}}) {
          SCOPED_TRACE("tp " + std::to_string(tp_size) + " dp " + std::to_string(dp_size) +
                       " zero " + std::to_string(zero) + " bucket_size " +
                       std::to_string(layout.bucket_size) + (layout.overlap ? " overlap" : "") +
                       " grad_reduce_dtype " + dtype_name(dtype));
          TrainRun run;
          AdamWConfig config = config_with(zero, dtype);
          config.bucket_size = layout.bucket_size;
          config.overlap_grad_reduce = layout.overlap;
          AdamW adamw(mesh.tp(), mesh.dp(), initial_params(mesh.tp_rank(), tp_size, run.params),
                      config);
          if (layout.bucket_size == 1) {
            EXPECT_EQ(adamw.bucket_count(), kCount);
          } else {  // some bucket holds several parameters
            EXPECT_GT(adamw.bucket_count(), 1u);
            EXPECT_LT(adamw.bucket_count(), kCount);
          }
          for (int s = 0; s < kSteps; ++s) {
            set_grads(run.params, mesh.dp_rank(), s, grad_of);
            adamw.grads_ready({4, 3});  // the step takes 0, 1 and 2
            run.norms.push_back(adamw.step(static_cast<float>(lr_of(s))));
          }
          for (size_t i = 0; i < kCount; ++i) {
            EXPECT_EQ(run.params[i]->value.to_vector(), one.params[i]->value.to_vector())
                << kTensors[i].name;
          }
          for (int s = 0; s < kSteps; ++s) {
            EXPECT_NEAR(run.norms[s], one.norms[s], 1e-14 * one.norms[s]);
          }
        }
      }
  }
}

// With overlap each bucket's collective starts the moment its last gradient
// is reported, in the order reported, and step() starts the rest in bucket
// order. Bucket 0 holds the last parameter of the list. On the bf16 wire too.
TEST(AdamW, OverlapStartsEachBucketWhenItsGradientsAreReady) {
  for (auto [tp_size, dp_size] : meshes()) {
    ProcessMesh mesh(world(), tp_size, /*pp=*/1, dp_size);
    for (DType dtype : {DType::kF32, DType::kBF16})
      for (int zero : {0, 1}) {
        SCOPED_TRACE("tp " + std::to_string(tp_size) + " dp " + std::to_string(dp_size) + " zero " +
                     std::to_string(zero) + " grad_reduce_dtype " + dtype_name(dtype));
        RecordingCommunicator tp(mesh.tp()), dp(mesh.dp());
        std::vector<std::unique_ptr<Parameter>> params;
        AdamWConfig config = config_with(zero, dtype);
        config.bucket_size = 1;  // one parameter each
        config.overlap_grad_reduce = true;
        AdamW adamw(tp, dp, initial_params(mesh.tp_rank(), tp_size, params), config);
        ASSERT_EQ(adamw.bucket_count(), kCount);
        auto sizes = [&](size_t i) {  // a bucket's elements, and this rank's part of them
          const int64_t parts = zero == 1 ? dp_size : 1;
          const int64_t padded = (params[i]->value.numel() + parts - 1) / parts * parts;
          return std::pair{padded, padded / parts};
        };
        using E = CollectiveEvent;
        const std::string wire = dtype == DType::kBF16 && dp_size > 1 ? "_bf16_wire" : "";
        const std::string sum = (zero == 0 ? "all_reduce_sum" : "reduce_scatter_sum") + wire;
        std::vector<E> expected;
        // dp > 1: parameters 3 and 1 go as reported; step() sends the rest in
        // bucket order (bucket 0 holds parameter 4). dp 1: all in step().
        for (size_t i : {3, 1}) {
          adamw.grads_ready({i});
          if (dp_size > 1) expected.push_back({sum, sizes(i).first, 0});
          EXPECT_EQ(dp.events(), expected) << "after reporting parameter " << i;
        }
        adamw.step(0.01f);
        const std::vector<size_t> rest =
            dp_size > 1 ? std::vector<size_t>{4, 2, 0} : std::vector<size_t>{4, 3, 2, 1, 0};
        for (size_t i : rest) expected.push_back({sum, sizes(i).first, 0});
        if (zero == 1) {
          expected.push_back({"all_gather", 2, 0});  // norm partials
          for (size_t i : {4, 3, 2, 1, 0}) expected.push_back({"all_gather", sizes(i).second, 0});
        }
        EXPECT_EQ(dp.events(), expected);
        if (dp_size > 1) {  // at dp 1 nothing crosses, and reports are not looked at
          EXPECT_THROW(adamw.grads_ready({kCount}), InternalError);
          adamw.grads_ready({2});
          EXPECT_THROW(adamw.grads_ready({2}), InternalError);  // twice in one step
        }
      }
  }
}

// The moments of a run with buckets, gathered whole (the checkpoint's
// layout), equal those of one bucket at zero 0, element by element; and
// copy_own_slice gives each rank back its own slice.
TEST(AdamW, BucketMomentsGatherToTheFlatLayout) {
  for (auto [tp_size, dp_size] : meshes()) {
    ProcessMesh mesh(world(), tp_size, /*pp=*/1, dp_size);
    SCOPED_TRACE("tp " + std::to_string(tp_size) + " dp " + std::to_string(dp_size));
    std::vector<std::unique_ptr<Parameter>> plain_params, bucket_params;
    AdamW plain(mesh.tp(), mesh.dp(), initial_params(mesh.tp_rank(), tp_size, plain_params),
                config_with(0));
    AdamWConfig config = config_with(1);
    config.bucket_size = 20;
    AdamW bucketed(mesh.tp(), mesh.dp(), initial_params(mesh.tp_rank(), tp_size, bucket_params),
                   config);
    set_grads(plain_params, mesh.dp_rank(), 0);
    set_grads(bucket_params, mesh.dp_rank(), 0);
    plain.step(0.01f);
    bucketed.step(0.01f);
    for (auto moment : {&AdamW::exp_avg, &AdamW::exp_avg_sq}) {
      const Tensor whole = bucketed.gather_slices((bucketed.*moment)());
      ASSERT_EQ(whole.numel(), bucketed.padded_size());
      for (size_t i = 0; i < kCount; ++i) {
        const int64_t n = plain_params[i]->value.numel();
        EXPECT_EQ(whole.slice(0, bucketed.offset(i), n).to_vector(),
                  (plain.*moment)().slice(0, plain.offset(i), n).to_vector())
            << kTensors[i].name;
      }
      Tensor mine = Tensor::zeros({bucketed.slice_size()});
      bucketed.copy_own_slice(whole, mine);
      EXPECT_EQ(mine.to_vector(), (bucketed.*moment)().to_vector());
    }
  }
}

// A ParameterGroup (attention's fused q, k, v) moves into the flat gradient
// buffer as one tensor, its parts side by side in one bucket, and the parts
// stay views of it; the updates are bitwise those of the same parameters
// ungrouped. A list that splits or reorders a group's parts is refused.
TEST(AdamW, AParameterGroupsGradientsMoveAsOneTensor) {
  ProcessMesh mesh(world(), /*tp=*/1, /*pp=*/1, world().size());
  auto make = [](std::vector<std::unique_ptr<Parameter>>& owned) {
    const Shape shapes[] = {{7}, {4, 5}, {2, 5}, {3, 5}, {6}};
    for (size_t i = 0; i < 5; ++i) {
      owned.push_back(std::make_unique<Parameter>(
          "p" + std::to_string(i), ShardSpec::replicated(shapes[i]), Init::normal(1.0f), 11));
    }
    std::vector<Parameter*> list;
    for (auto& p : owned) list.push_back(p.get());
    return list;
  };
  for (int zero : {0, 1}) {
    SCOPED_TRACE("zero " + std::to_string(zero));
    std::vector<std::unique_ptr<Parameter>> grouped_owned, plain_owned;
    const std::vector<Parameter*> grouped = make(grouped_owned), plain = make(plain_owned);
    ParameterGroup group({grouped[1], grouped[2], grouped[3]});
    {
      AdamWConfig config = config_with(zero);
      config.bucket_size = 1;  // a bucket per unit: the group is one
      std::vector<std::unique_ptr<Parameter>> other_owned;
      const std::vector<Parameter*> other = make(other_owned);
      ParameterGroup other_group({other[1], other[2], other[3]});
      const AdamW per_unit(mesh.tp(), mesh.dp(), other, config);
      EXPECT_EQ(per_unit.bucket_count(), 3u);
      EXPECT_EQ(per_unit.offset(2), per_unit.offset(1) + 20);
      EXPECT_EQ(per_unit.offset(3), per_unit.offset(2) + 10);
      EXPECT_NO_THROW(other_group.check_views("after AdamW"));
      EXPECT_EQ(other_group.grad().raw_data(), other[1]->grad.raw_data());
    }
    // One bucket each: the same flat layout, so ZeRO-1 splits it alike and
    // the norms and updates can be compared bit for bit.
    AdamW with_group(mesh.tp(), mesh.dp(), grouped, config_with(zero));
    AdamW without(mesh.tp(), mesh.dp(), plain, config_with(zero));
    EXPECT_NO_THROW(group.check_views("after AdamW"));
    for (int s = 0; s < 3; ++s) {
      for (size_t i = 0; i < 5; ++i) {
        const Tensor g = testing::random_tensor(plain[i]->grad.shape(), 100 * s + i);
        grouped[i]->grad.copy_from(g);
        plain[i]->grad.copy_from(g);
      }
      EXPECT_EQ(with_group.step(0.01f), without.step(0.01f));
      with_group.zero_grad();
      without.zero_grad();
    }
    for (size_t i = 0; i < 5; ++i) {
      EXPECT_EQ(grouped[i]->value.to_vector(), plain[i]->value.to_vector()) << plain[i]->name;
    }
  }
  std::vector<std::unique_ptr<Parameter>> owned;
  const std::vector<Parameter*> list = make(owned);
  ParameterGroup group({list[1], list[2], list[3]});
  EXPECT_THROW(AdamW(mesh.tp(), mesh.dp(), {list[0], list[2], list[1], list[3]}, config_with(0)),
               InternalError)
      << "reordered";
  EXPECT_THROW(AdamW(mesh.tp(), mesh.dp(), {list[1], list[2], list[4]}, config_with(0)),
               InternalError)
      << "a part missing";
}

TEST(AdamW, BadConfigurationsFailOnEveryRankBeforeAnyCollective) {
  auto message = [](AdamWConfig c) {
    try {
      validate(c);
    } catch (const ConfigError& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  AdamWConfig c = config_with(0);
  EXPECT_EQ(message(c), "no error");
  c.beta1 = 1.0f;
  EXPECT_NE(message(c).find("[adamw] beta1 (1.0"), std::string::npos) << message(c);
  c = config_with(0);
  c.beta2 = -0.1f;
  EXPECT_NE(message(c).find("beta2"), std::string::npos);
  c = config_with(0);
  c.eps = 0.0f;
  EXPECT_NE(message(c).find("eps (0.0"), std::string::npos);
  c = config_with(0);
  c.weight_decay = -1.0f;
  EXPECT_NE(message(c).find("weight_decay (-1.0"), std::string::npos);
  c = config_with(0);
  c.bucket_size = -1;
  EXPECT_NE(message(c).find("bucket_size (-1) must be >= 0"), std::string::npos);
  c = config_with(2);
  EXPECT_NE(message(c).find("zero (2) must be 0 or 1"), std::string::npos);
  RecordingCommunicator tp(world()), dp(world());
  EXPECT_THROW(AdamW(tp, dp, {}, c), ConfigError);
  EXPECT_TRUE(tp.events().empty() && dp.events().empty());
  world().barrier();  // every rank got here: nothing hung
}

}  // namespace
}  // namespace colrow
