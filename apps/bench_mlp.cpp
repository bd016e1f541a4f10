// `colrow bench mlp`. The verification runs first: the same MLP unsharded (a
// group of one, built from the same TP-invariant initialization) on a few
// tokens must give the same output, input gradient and weight-gradient shards.
// Timing: per-iteration time is the slowest rank's; figures are medians.
// --dtype bf16 runs the mixed-precision MLP (bf16 weight copies, activations
// and activation gradients; fp32 weight gradients) against the same GEMMs on
// bf16 operands, and verifies against the unsharded MLP in bf16.
#include "bench_mlp.h"

#include "bench_common.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <functional>
#include <iostream>
#include <nlohmann/json.hpp>
#include <optional>
#include <vector>

#include "cli.h"
#include "colrow/core/allocator.h"
#include "colrow/core/error.h"
#include "colrow/dist/local_communicator.h"
#include "colrow/dist/process_mesh.h"
#include "colrow/dist/recording_communicator.h"
#include "colrow/nn/parallel_mlp.h"
#include "colrow/nn/parameter_group.h"
#include "colrow/runtime/blas_environment.h"
#include "colrow/runtime/threads.h"
#include "kernels/ops.h"

namespace colrow::apps {
namespace {

using ops::Trans;

// Per-round seconds of each measured step, each the maximum over ranks.
struct Timings {
  std::vector<std::vector<double>> seconds;  // [step][round]
};

// Runs every step once per round, interleaved, so all of them see the same
// machine (frequency, neighbours); stops after min_iterations rounds and
// min_seconds, decided jointly so ranks stay in lock-step. A round's time for
// a step is the slowest rank's.
Timings time_rounds(Communicator& world, const MlpBenchOptions& o,
                    const std::vector<std::function<void()>>& steps) {
  Timings t;
  t.seconds.resize(steps.size());
  const auto start = BenchClock::now();
  for (int round = 0;; ++round) {
    for (size_t s = 0; s < steps.size(); ++s) {
      const auto t0 = BenchClock::now();
      steps[s]();
      t.seconds[s].push_back(seconds_since(t0));
    }
    const bool more =
        (round + 1 < o.min_iterations || seconds_since(start) < o.min_seconds) && round + 1 < 1000;
    Tensor go = Tensor::full({1}, more ? 1.0f : 0.0f);
    world.all_reduce_max(go);  // continue while any rank wants to
    if (go.data()[0] == 0.0f) break;
  }
  for (std::vector<double>& per_round : t.seconds) {
    Tensor v = Tensor::empty({static_cast<int64_t>(per_round.size())});
    for (size_t i = 0; i < per_round.size(); ++i) v.data()[i] = static_cast<float>(per_round[i]);
    world.all_reduce_max(v);
    for (size_t i = 0; i < per_round.size(); ++i) per_round[i] = v.data()[i];
  }
  return t;
}

// The weights on `device`, computing in `dtype` (bf16: rounded copies of the fp32 values).
// Through the parameter groups (nn/parameter_group.h): SwiGLU's gate and up are one.
void place(ParallelMLP& mlp, Device device, DType dtype) {
  move_parameters(mlp.parameters(), device);
  set_compute_dtype(mlp.parameters(), dtype);
}

// The largest relative error between the sharded MLP on `device` and the
// unsharded one on the CPU (the reference path), both in `dtype`, on x and
// dy: output, input gradient, and every parameter gradient's shard.
double verify(Communicator& tp, const MlpConfig& config, const Tensor& x, const Tensor& dy,
              Device device, DType dtype) {
  ParallelMLP sharded(tp, config);
  place(sharded, device, dtype);
  LocalCommunicator alone("unsharded");
  ParallelMLP reference(alone, config);
  place(reference, Device::cpu(), dtype);
  const Tensor y = sharded.forward(x.to(device).to(dtype)).to(Device::cpu()).clone();
  const Tensor dx = sharded.backward(dy.to(device).to(dtype)).to(Device::cpu()).clone();
  const Tensor y_ref = reference.forward(x.to(dtype)).clone();
  const Tensor dx_ref = reference.backward(dy.to(dtype)).clone();
  double err = std::max(relative_error(y, y_ref), relative_error(dx, dx_ref));
  std::vector<Parameter*> mine = sharded.parameters(), full = reference.parameters();
  for (size_t i = 0; i < mine.size(); ++i) {
    const ShardSpec& s = mine[i]->shard;
    err =
        std::max(err, relative_error(mine[i]->grad, full[i]->grad.shard(s.dim, s.index, s.count)));
  }
  return err;
}

// The GEMMs one rank's MLP runs per forward+backward, as plain ops::gemm calls.
struct PlainGemms {
  std::vector<Tensor> a, b, c;
  std::vector<Trans> ta, tb;
  std::vector<float> beta;
  double flops = 0.0;

  void add(Trans trans_a, Trans trans_b, Tensor a_, Tensor b_, Tensor c_, float beta_) {
    const int64_t m = trans_a == Trans::kNo ? a_.size(0) : a_.size(1);
    const int64_t k = trans_a == Trans::kNo ? a_.size(1) : a_.size(0);
    flops += 2.0 * m * c_.size(1) * k;
    ta.push_back(trans_a), tb.push_back(trans_b), beta.push_back(beta_);
    a.push_back(a_), b.push_back(b_), c.push_back(c_);
  }
  void run() {
    for (size_t i = 0; i < a.size(); ++i) ops::gemm(ta[i], tb[i], 1.0f, a[i], b[i], beta[i], c[i]);
  }
};

// Operands in `dtype` as the MLP has them: activations, their gradients and
// weight copies in dtype, weight gradients accumulated in fp32.
PlainGemms plain_gemms_of(const MlpConfig& config, int64_t tokens, int tp, Device device,
                          DType dtype) {
  const int64_t d = config.d_model, h = config.ffn_hidden_size / tp;
  auto full = [&](const Shape& shape, float value) {
    return Tensor::full(shape, value, device).to(dtype);
  };
  auto activation = [&](const Shape& shape) { return Tensor::zeros(shape, device, dtype); };
  auto weight_grad = [&](const Shape& shape) { return Tensor::zeros(shape, device); };
  // SwiGLU's gate and up are one fused projection of 2h outputs
  // (nn/fused_column_parallel_linear.h): one GEMM each way, as the MLP runs them.
  const int64_t up = config.activation == Activation::kSwiGlu ? 2 * h : h;
  const Tensor x = full({tokens, d}, 0.5f), w_up = full({up, d}, 0.01f);
  const Tensor w_down = full({d, h}, 0.01f), hid = full({tokens, h}, 0.5f);
  const Tensor d_up = full({tokens, up}, 0.5f);
  PlainGemms g;
  g.add(Trans::kNo, Trans::kYes, x, w_up, activation({tokens, up}), 0.0f);   // y = x W^T
  g.add(Trans::kYes, Trans::kNo, d_up, x, weight_grad({up, d}), 1.0f);       // dW += dy^T x
  g.add(Trans::kNo, Trans::kNo, d_up, w_up, activation({tokens, d}), 0.0f);  // dx = dy W
  g.add(Trans::kNo, Trans::kYes, hid, w_down, activation({tokens, d}), 0.0f);
  g.add(Trans::kYes, Trans::kNo, x, hid, weight_grad({d, h}), 1.0f);
  g.add(Trans::kNo, Trans::kNo, x, w_down, activation({tokens, h}), 0.0f);
  return g;
}

}  // namespace

int run_mlp_bench(const MlpBenchOptions& o, const Launch& launch) {
  Communicator& world = launch.world;
  // Everything is checked before anything is allocated, identically on every rank.
  validate(o, world.size());
  const int tp_size = ProcessMesh::resolve_tp(o.tp, /*pp=*/1, o.dp, world.size());
  const MlpConfig config = mlp_config(o);
  const Placement placement = resolve_placement(o.device, launch.local_rank);
  const Device device = placement.device;
  const DType dtype = placement.dtype;
  const int threads = threads_per_rank(o.threads, launch.local_ranks);
  set_threads(threads);

  std::optional<MemoryPhase> phase(std::in_place, "communicators");
  ProcessMesh mesh(world, tp_size, /*pp=*/1, o.dp, device, placement.comm);
  phase.emplace("the MLPs' weights, activations and gradients");
  const Tensor x_host = random_tensor({o.tokens, o.d_model}, o.seed, "bench.x");
  const Tensor dy_host = random_tensor({o.tokens, o.d_model}, o.seed, "bench.dy");

  const int64_t verify_tokens = std::min<int64_t>(o.tokens, o.verify_tokens);
  const double verify_error = verify(mesh.tp(), config, x_host.slice(0, 0, verify_tokens),
                                     dy_host.slice(0, 0, verify_tokens), device, dtype);
  const Tensor x = x_host.to(device).to(dtype), dy = dy_host.to(device).to(dtype);
  // fp32: sums of up to a few thousand terms in different orders, ~1e-6
  // relative typically; 1e-4 would only be crossed by a wrong shard or sum.
  // bf16: the fp32 sums' order can move a value across a rounding boundary,
  // one ulp (2^-8 relative) of an output or hidden element, which the next
  // GEMM carries into its sums. Measured 4.5e-3 (d 256) to 9.2e-3 (d 1024,
  // gelu and swiglu), a few ulps of the largest element; 5e-2 leaves room for
  // wider layers, while a wrong shard or sum is O(1).
  const double kVerifyTolerance = dtype == DType::kBF16 ? 5e-2 : 1e-4;
  if (!(verify_error <= kVerifyTolerance)) {
    throw InternalError("[bench] the sharded MLP differs from the unsharded one: relative error " +
                        std::to_string(verify_error) + " > " + std::to_string(kVerifyTolerance));
  }

  RecordingCommunicator tp(mesh.tp());
  ParallelMLP mlp(tp, config);
  // The same MLP waiting for each collective where it starts: what overlapping
  // the input-gradient all-reduce with the weight-gradient GEMMs gains.
  MlpConfig blocking_config = config;
  blocking_config.overlap_backward = false;
  ParallelMLP blocking(mesh.tp(), blocking_config);
  for (ParallelMLP* m : {&mlp, &blocking}) {
    place(*m, device, dtype);
    for (int warmup = 0; warmup < 2; ++warmup) {
      m->forward(x);
      m->backward(dy);
    }
  }
  PlainGemms plain = plain_gemms_of(config, o.tokens, tp_size, device, dtype);
  plain.run();
  std::vector<double> comm_share;
  const Timings timings =
      time_rounds(world, o,
                  {
                      [&] {
                        mlp.forward(x);
                        synchronize(device);
                      },
                      [&] {
                        tp.clear();
                        const auto t0 = BenchClock::now();
                        mlp.forward(x);
                        mlp.backward(dy);
                        synchronize(device);
                        comm_share.push_back(tp.total_seconds() / seconds_since(t0));
                      },
                      [&] {
                        plain.run();
                        synchronize(device);
                      },
                      [&] {
                        blocking.forward(x);
                        blocking.backward(dy);
                        synchronize(device);
                      },
                  });
  const std::vector<double>& fwd = timings.seconds[0];
  const std::vector<double>& fwdbwd = timings.seconds[1];
  const std::vector<double>& sgemm = timings.seconds[2];
  const double blocking_ms = median(timings.seconds[3]) * 1e3;

  Tensor share = Tensor::full({1}, static_cast<float>(median(comm_share)));
  world.all_reduce_max(share);  // the most communication-bound rank
  const double fwd_ms = median(fwd) * 1e3, fwdbwd_ms = median(fwdbwd) * 1e3;
  const double flops_fwd = mlp.forward_flops(o.tokens) / tp_size;
  const double gflops_fwd = flops_fwd / (fwd_ms * 1e-3) / 1e9;
  const double gflops = 3.0 * flops_fwd / (fwdbwd_ms * 1e-3) / 1e9;
  const double sgemm_gflops = plain.flops / median(sgemm) / 1e9;
  if (world.rank() != 0) return 0;

  if (o.json) {
    nlohmann::json j = {{"benchmark", "mlp"},
                        {"tp", tp_size},
                        {"dp", o.dp},
                        {"d_model", o.d_model},
                        {"ffn_hidden_size", config.ffn_hidden_size},
                        {"tokens", o.tokens},
                        {"activation", to_string(config.activation)},
                        {"threads_per_rank", threads},
                        {"device", device.str()},
                        {"dtype", dtype_name(dtype)},
                        {"blas_core", blas_core_name()},
                        {"blas_threading", to_string(blas_threading())},
                        {"verify_relative_error", verify_error},
                        {"fwd_ms", fwd_ms},
                        {"fwdbwd_ms", fwdbwd_ms},
                        {"fwd_gflops_per_rank", gflops_fwd},
                        {"gflops_per_rank", gflops},
                        {"comm_fraction", share.data()[0]},
                        {"sgemm_gflops_per_rank", sgemm_gflops},
                        {"efficiency", gflops / sgemm_gflops},
                        {"fwdbwd_blocking_ms", blocking_ms},
                        {"overlap_gain", blocking_ms / fwdbwd_ms},
                        {"iterations", fwdbwd.size()}};
    std::cout << j.dump() << std::endl;
    return 0;
  }
  std::printf(
      "colrow bench mlp: tp %d x dp %d, d_model %ld, ffn %ld (%s), tokens %ld, %s, "
      "%d thread(s)/rank, OpenBLAS %s kernels (%s build)\n",
      tp_size, o.dp, static_cast<long>(o.d_model), static_cast<long>(config.ffn_hidden_size),
      to_string(config.activation), static_cast<long>(o.tokens), dtype_name(dtype), threads,
      blas_core_name().c_str(), to_string(blas_threading()));
  std::printf(
      "  verified against the unsharded MLP on %ld tokens: relative error %.2e (limit %.0e)\n",
      static_cast<long>(verify_tokens), verify_error, kVerifyTolerance);
  std::printf("  forward           %9.2f ms  %7.1f GFLOP/s per rank\n", fwd_ms, gflops_fwd);
  std::printf("  forward+backward  %9.2f ms  %7.1f GFLOP/s per rank  (%.1f%% in communication)\n",
              fwdbwd_ms, gflops, 100.0 * share.data()[0]);
  std::printf("  plain GEMMs, same shapes and dtype %7.1f GFLOP/s per rank  -> efficiency %.2f\n",
              sgemm_gflops, gflops / sgemm_gflops);
  std::printf("  forward+backward, no overlap %9.2f ms  -> overlapping gains %.3fx\n", blocking_ms,
              blocking_ms / fwdbwd_ms);
  return 0;
}

}  // namespace colrow::apps
