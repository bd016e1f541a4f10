// CUDA AdamW against the CPU kernel: segments of 1, 37, 1000 and 5000
// elements (the last spans several of the kernel's chunks) plus an empty one,
// decayed and not, in one call; three steps with different scalars, each from
// the same state on both backends; shape errors.
// Built twice: on a GPU (label gpu), and with COLROW_WARP_EMULATION, where
// the same kernels run on the CPU through the warp emulation
// (emulated/adamw.h), so CI checks them without a GPU.
#ifdef COLROW_WARP_EMULATION
#include "kernels/cuda/emulated/adamw.h"
#else
#include "kernels/cuda/adamw.h"
#endif

#include <gtest/gtest.h>

#include <cmath>
#include <iterator>
#include <string>
#include <vector>

#include "colrow/core/error.h"
#include "kernels/cpu/adamw.h"
#include "kernels/cuda/cuda_test_helpers.h"
#include "support/gpu.h"

namespace colrow {
namespace {

using testing::kU;
using testing::random_uniform;

namespace cpu = kernels::cpu;
#ifdef COLROW_WARP_EMULATION
namespace gpu = testing::emulated;
#else
namespace gpu = kernels::cuda;
#endif
using kernels::AdamWSegment;
using kernels::AdamWStep;

struct State {
  std::vector<Tensor> param, grad, exp_avg, exp_avg_sq;
  std::vector<bool> decay;
};

const int64_t kSizes[] = {1, 37, 0, 1000, 5000};

State random_state(uint32_t seed) {
  State s;
  for (size_t i = 0; i < std::size(kSizes); ++i) {
    const int64_t n = kSizes[i];
    s.param.push_back(random_uniform({n}, seed++, -1.0f, 1.0f));
    s.grad.push_back(random_uniform({n}, seed++, -0.1f, 0.1f));
    s.exp_avg.push_back(random_uniform({n}, seed++, -0.05f, 0.05f));
    s.exp_avg_sq.push_back(random_uniform({n}, seed++, 0.0f, 1e-3f));
    s.decay.push_back(i % 2 == 0);
  }
  return s;
}

State to_device(const State& s, Device dev) {
  State d;
  for (size_t i = 0; i < s.param.size(); ++i) {
    d.param.push_back(s.param[i].clone().to(dev));
    d.grad.push_back(s.grad[i].clone().to(dev));
    d.exp_avg.push_back(s.exp_avg[i].clone().to(dev));
    d.exp_avg_sq.push_back(s.exp_avg_sq[i].clone().to(dev));
  }
  d.decay = s.decay;
  return d;
}

std::vector<AdamWSegment> segments_of(const State& s) {
  std::vector<AdamWSegment> segments;
  for (size_t i = 0; i < s.param.size(); ++i) {
    segments.push_back(
        {s.param[i], s.grad[i], s.exp_avg[i], s.exp_avg_sq[i], s.decay[i], Tensor()});
  }
  return segments;
}

// The step's scalars as train/adamw.cpp derives them at step t.
AdamWStep step_at(int t, float lr, float weight_decay, float grad_scale) {
  AdamWStep s;
  s.beta1 = 0.9f;
  s.beta2 = 0.95f;
  s.eps = 1e-8f;
  s.step_size = static_cast<float>(lr / (1.0 - std::pow(0.9, t)));
  s.bias_correction2_sqrt = static_cast<float>(std::sqrt(1.0 - std::pow(0.95, t)));
  s.decay = static_cast<float>(1.0 - static_cast<double>(lr) * weight_decay);
  s.grad_scale = grad_scale;
  return s;
}

TEST(CudaAdamWTest, OneLaunchOverAllSegmentsMatchesCpu) {
  COLROW_REQUIRE_GPU();
  const Device dev = testing::test_gpu();
  State state = random_state(1);
  const AdamWStep steps[] = {step_at(1, 1e-3f, 0.1f, 1.0f), step_at(2, 6e-4f, 0.1f, 0.5f),
                             step_at(1000, 3e-4f, 0.0f, 0.25f)};
  for (const AdamWStep& step : steps) {
    SCOPED_TRACE("step_size " + std::to_string(step.step_size));
    State cpu_state{{}, {}, {}, {}, state.decay};
    for (size_t i = 0; i < state.param.size(); ++i) {
      cpu_state.param.push_back(state.param[i].clone());
      cpu_state.grad.push_back(state.grad[i].clone());
      cpu_state.exp_avg.push_back(state.exp_avg[i].clone());
      cpu_state.exp_avg_sq.push_back(state.exp_avg_sq[i].clone());
    }
    const State gpu_state = to_device(state, dev);
    cpu::adamw_update(segments_of(cpu_state), step);
    gpu::adamw_update(segments_of(gpu_state), step);

    // Bounds, from the old state (exact fp32 inputs) and step: each backend
    // evaluates every formula with at most 3 or 4 roundings on any path (nvcc
    // may fuse a multiply-add into an FMA, dropping one), each <= u of the
    // magnitudes involved, so the two differ by at most twice that:
    //   m: 8u (|m0| + |g|)     v: 8u (beta2 v0 + (1 - beta2) g^2)
    //   p: 8u (|p0| + |upd|) + step_size dm / denom + |upd| (8u + dv / (2 v))
    // with upd = step_size m / denom: denom's relative error is that of
    // sqrt(v) (half v's) plus its own roundings.
    for (size_t i = 0; i < state.param.size(); ++i) {
      SCOPED_TRACE("segment " + std::to_string(i));
      const std::vector<float> p0 = state.param[i].to_vector(), g0 = state.grad[i].to_vector(),
                               m0 = state.exp_avg[i].to_vector(),
                               v0 = state.exp_avg_sq[i].to_vector();
      const std::vector<float> pc = cpu_state.param[i].to_vector(),
                               mc = cpu_state.exp_avg[i].to_vector(),
                               vc = cpu_state.exp_avg_sq[i].to_vector();
      const std::vector<float> pg = gpu_state.param[i].to_vector(),
                               mg = gpu_state.exp_avg[i].to_vector(),
                               vg = gpu_state.exp_avg_sq[i].to_vector();
      int64_t bad = 0, first = -1;
      for (size_t j = 0; j < p0.size(); ++j) {
        const double g = static_cast<double>(g0[j]) * step.grad_scale;
        const double dm = 8 * kU * (std::fabs(m0[j]) + std::fabs(g));
        const double dv = 8 * kU * (step.beta2 * v0[j] + (1.0 - step.beta2) * g * g);
        const double denom =
            std::sqrt(static_cast<double>(vc[j])) / step.bias_correction2_sqrt + step.eps;
        const double upd = step.step_size * std::fabs(mc[j]) / denom;
        const double dp = 8 * kU * (std::fabs(p0[j]) + upd) + step.step_size * dm / denom +
                          upd * (8 * kU + (vc[j] > 0.0f ? dv / (2.0 * vc[j]) : 0.0));
        const bool ok = std::fabs(static_cast<double>(mg[j]) - mc[j]) <= dm &&
                        std::fabs(static_cast<double>(vg[j]) - vc[j]) <= dv &&
                        std::fabs(static_cast<double>(pg[j]) - pc[j]) <= dp;
        if (!ok && first < 0) first = static_cast<int64_t>(j);
        bad += ok ? 0 : 1;
      }
      EXPECT_EQ(bad, 0) << bad << " of " << p0.size() << " elements outside the bounds; first "
                        << first << ": p " << (first >= 0 ? pg[first] : 0.0f) << " vs "
                        << (first >= 0 ? pc[first] : 0.0f) << ", m "
                        << (first >= 0 ? mg[first] : 0.0f) << " vs "
                        << (first >= 0 ? mc[first] : 0.0f) << ", v "
                        << (first >= 0 ? vg[first] : 0.0f) << " vs "
                        << (first >= 0 ? vc[first] : 0.0f);
    }
    state = cpu_state;  // the next step starts from the CPU's result on both backends
  }
}

// Segments with a bf16 compute copy get the updated param rounded once, in
// the same launch (core's rounding, the same bits on either device).
TEST(CudaAdamWTest, WritesTheBf16ComputeCopies) {
  COLROW_REQUIRE_GPU();
  const State state = to_device(random_state(3), testing::test_gpu());
  std::vector<AdamWSegment> segments = segments_of(state);
  std::vector<Tensor> copies;
  for (AdamWSegment& s : segments) {
    s.compute = Tensor::zeros(s.param.shape(), s.param.device(), DType::kBF16);
    copies.push_back(s.compute);
  }
  gpu::adamw_update(segments, step_at(1, 1e-3f, 0.1f, 1.0f));
  for (size_t i = 0; i < segments.size(); ++i) {
    EXPECT_EQ(copies[i].to(Device::cpu()).to_vector(),
              state.param[i].to(Device::cpu()).to(DType::kBF16).to_vector())
        << "segment " << i;
  }
  // A compute copy of another dtype is a caller's bug.
  segments[0].compute = Tensor::zeros(segments[0].param.shape(), segments[0].param.device());
  EXPECT_THROW(gpu::adamw_update(segments, AdamWStep{}), InternalError);
}

TEST(CudaAdamWTest, NothingToDoIsFine) {
  COLROW_REQUIRE_GPU();
  gpu::adamw_update({}, AdamWStep{});
}

TEST(CudaAdamWTest, ShapeErrorsAreInternalErrors) {
  COLROW_REQUIRE_GPU();
  const Device dev = testing::test_gpu();
  const Tensor a = Tensor::zeros({4}, dev), b = Tensor::zeros({5}, dev);
  EXPECT_THROW(gpu::adamw_update({{a, b, a.clone(), a.clone(), true, Tensor()}}, AdamWStep{}),
               InternalError)
      << "grad longer than param";
  if (!testing::kGpuIsHost) {
    const Tensor host = Tensor::zeros({4});
    EXPECT_THROW(gpu::adamw_update({{a, host, a.clone(), a.clone(), true, Tensor()}}, AdamWStep{}),
                 InternalError)
        << "grad on the host";
    const Tensor h = Tensor::zeros({4});
    EXPECT_THROW(
        gpu::adamw_update({{h, h.clone(), h.clone(), h.clone(), true, Tensor()}}, AdamWStep{}),
        InternalError)
        << "every segment on the host";
  }
  const Tensor wide = Tensor::zeros({4, 6}, dev);
  const Tensor strided = wide.slice(1, 0, 3);
  EXPECT_THROW(gpu::adamw_update(
                   {{strided, strided.clone(), strided.clone(), strided.clone(), false, Tensor()}},
                   AdamWStep{}),
               InternalError)
      << "param not contiguous";
}

}  // namespace
}  // namespace colrow
