// `colrow bench tp-profile` (see bench_tp_profile.h). Order of a run: check
// every flag and plan the (R, d) grid (identically on every rank, before any
// allocation); measure lambda_compute and lambda_comm once; then per R verify
// the sharded forward against the unsharded one and time each d. A round's
// time is the slowest rank's; a row reports the median round, a lambda the
// best; the steps of one measurement run interleaved, so all see the same
// machine.
#include "bench_tp_profile.h"

#include "bench_common.h"
#include "tp_profile_svg.h"

#include <mpi.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>
#include <thread>
#include <vector>

#include "cli.h"
#include "colrow/core/error.h"
#include "colrow/dist/device_communicator.h"
#include "colrow/dist/local_communicator.h"
#include "colrow/dist/mpi_communicator.h"
#include "colrow/nn/parallel_mlp.h"
#include "colrow/runtime/blas_environment.h"
#include "colrow/runtime/threads.h"
#include "colrow/runtime/tp_cost_model.h"
#include "kernels/ops.h"

namespace colrow::apps {
namespace {

using Clock = std::chrono::steady_clock;

constexpr uint64_t kSeed = 1234;
// The verification's fp32 sums run over at most a few thousand terms in
// different orders (~1e-6 relative); a wrong shard or sum is far above 1e-4.
constexpr int64_t kVerifyTokens = 64;
constexpr double kVerifyTolerance = 1e-4;
// A cell is skipped when its ranks would need more than this share of the
// node's memory: the rest belongs to the OS and to other jobs.
constexpr double kMemoryShare = 0.5;

// Whether rank 0 can write `path` ("" is never written): its directory exists
// and is writable, and the file, if there, is a writable regular file.
bool writable(const std::string& path) {
  if (path.empty()) return true;
  namespace fs = std::filesystem;
  std::error_code ec;
  const fs::path p(path);
  const fs::path dir = p.parent_path().empty() ? fs::path(".") : p.parent_path();
  if (!fs::is_directory(dir, ec) || access(dir.c_str(), W_OK) != 0) return false;
  if (!fs::exists(p, ec)) return true;
  return fs::is_regular_file(p, ec) && access(p.c_str(), W_OK) == 0;
}

std::string unwritable_message(const std::string& flag, const std::string& path) {
  return "[bench] " + flag + " (" + path +
         ") must be a file rank 0 can write, in an existing, writable directory with space. "
         "Choose another --" +
         flag + " (\"\" writes none).";
}

// Rank 0 checks the output paths; every rank learns the answer and throws alike.
void check_outputs(Communicator& world, const TpProfileOptions& o) {
  Tensor ok = Tensor::empty({2});
  ok.data()[0] = world.rank() == 0 ? writable(o.out_json) : 0.0f;
  ok.data()[1] = world.rank() == 0 ? writable(o.out_svg) : 0.0f;
  world.broadcast(ok, 0);
  if (ok.data()[0] == 0.0f) throw ConfigError(unwritable_message("out-json", o.out_json));
  if (ok.data()[1] == 0.0f) throw ConfigError(unwritable_message("out-svg", o.out_svg));
}

// The tp degrees: 1, 2, 4, ... up to the world size.
std::vector<int> tp_degrees(int world_size) {
  std::vector<int> degrees;
  for (int r = 1; r <= world_size; r *= 2) degrees.push_back(r);
  return degrees;
}

// Bytes one rank of a tp group of R holds for width d: two MLPs (the sharded
// one and the group-of-one twin), each 2 weights of d x 4d/R with their
// gradients, the buffers [T, 4d/R] (up, hidden) and [T, d] (y); plus x and the
// all-reduce buffer [T, d].
double bytes_per_rank(int tp, int64_t d, int64_t tokens) {
  const double h = 4.0 * d / tp;
  const double one_mlp = 2 * 2 * d * h + 2 * tokens * h + tokens * static_cast<double>(d);
  return 4.0 * (2 * one_mlp + 2 * tokens * static_cast<double>(d));
}

std::string gib(double bytes) {
  char text[32];
  std::snprintf(text, sizeof text, "%.1f GiB", bytes / (1 << 30));
  return text;
}

struct Cell {
  int tp = 1;
  int64_t d_model = 0;
  std::string skip;  // why it does not run; empty: it runs
};

// Pure: the same grid on every rank, given the smallest node's memory.
std::vector<Cell> plan(const TpProfileOptions& o, int world_size, double node_bytes) {
  std::vector<Cell> cells;
  for (int tp : tp_degrees(world_size)) {
    for (int64_t d = o.min_d; d <= o.max_d; d *= 2) {
      Cell c{tp, d, ""};
      const double need = tp * bytes_per_rank(tp, d, o.tokens);
      if ((4 * d) % tp != 0) {
        c.skip = "ffn 4d (" + std::to_string(4 * d) + ") is not divisible by R";
      } else if (need > kMemoryShare * node_bytes) {
        c.skip = "needs " + gib(need) + " (R ranks x " + gib(need / tp) + "), more than half of " +
                 gib(node_bytes) + " of memory";
      }
      cells.push_back(c);
    }
  }
  return cells;
}

// The smallest physical memory among the ranks' nodes, agreed on by all.
double smallest_node_bytes(Communicator& world) {
  const double mine = static_cast<double>(sysconf(_SC_PHYS_PAGES)) * sysconf(_SC_PAGE_SIZE);
  Tensor mib = Tensor::full({1}, static_cast<float>(-std::floor(mine / (1 << 20))));
  world.all_reduce_max(mib);  // max of -x: min of x; MiB stay exact in a float
  return -static_cast<double>(mib.data()[0]) * (1 << 20);
}

// How a step's rounds become one time: rows report the median round (typical
// of the run); the lambdas, capabilities of the machine measured once, take
// the best round, so that a neighbour's burst during that one phase cannot
// skew every prediction.
enum class Summary { kMedian, kBest };

double summarize(const std::vector<double>& v, Summary how) {
  return how == Summary::kBest ? *std::min_element(v.begin(), v.end()) : median(v);
}

// Runs every step once untimed (first touch, BLAS threads up), then
// `iterations` rounds of all steps in order. A barrier starts each step on all
// ranks of `group` together; a round's time is the slowest rank's. Returns one
// time per step, summarized over the rounds by `how`.
std::vector<double> time_steps(Communicator& group, int iterations, Summary how,
                               const std::vector<std::function<void()>>& steps) {
  for (const auto& step : steps) step();
  std::vector<Tensor> seconds;
  for (size_t s = 0; s < steps.size(); ++s) seconds.push_back(Tensor::empty({iterations}));
  for (int i = 0; i < iterations; ++i) {
    for (size_t s = 0; s < steps.size(); ++s) {
      group.barrier();
      const auto start = Clock::now();
      steps[s]();
      seconds[s].data()[i] =
          static_cast<float>(std::chrono::duration<double>(Clock::now() - start).count());
    }
  }
  std::vector<double> times;
  for (Tensor& t : seconds) {
    group.all_reduce_max(t);
    const std::vector<float> v = t.to_vector();
    times.push_back(summarize(std::vector<double>(v.begin(), v.end()), how));
  }
  return times;
}

// Ranks outside the current tp group wait here, sleeping: a blocking MPI
// barrier polls a core, which ranks that oversubscribe the cores cannot spare.
void quiet_barrier(MpiCommunicator& world) {
  MPI_Request request;
  COLROW_MPI_CHECK(MPI_Ibarrier(world.handle(), &request));
  for (int done = 0;;) {
    COLROW_MPI_CHECK(MPI_Test(&request, &done, MPI_STATUS_IGNORE));
    if (done) return;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
}

MlpConfig mlp_config(int64_t d, int64_t ffn) {
  MlpConfig c;
  c.name = "tp_profile.mlp";
  c.d_model = d;
  c.ffn_hidden_size = ffn;
  c.activation = Activation::kGelu;
  c.bias = true;
  c.seed = kSeed;
  return c;
}

// The largest relative error of the sharded forward against the unsharded one
// (a group of one, same TP-invariant weights) on a few tokens; the group's max.
double verify(Communicator& tp, int64_t d, int64_t tokens) {
  ParallelMLP sharded(tp, mlp_config(d, 4 * d));
  LocalCommunicator alone("unsharded");
  ParallelMLP reference(alone, mlp_config(d, 4 * d));
  const Tensor x = random_tensor({tokens, d}, kSeed, "tp_profile.verify_x");
  Tensor e = Tensor::full(
      {1}, static_cast<float>(relative_error(sharded.forward(x), reference.forward(x))));
  tp.all_reduce_max(e);
  return e.data()[0];
}

struct Row {
  int tp = 1;
  int64_t d_model = 0;
  std::string transport;                                // "shm", "mpi" or "none" (R = 1)
  double t_compute = 0.0, t_comm = 0.0, t_total = 0.0;  // seconds
  double predicted = 0.0;                               // t_comm / t_compute, the model's
  double measured() const { return t_comm / t_compute; }
  TpProfilePoint point() const { return {t_compute, t_comm, predicted}; }
  // Counts for the aim: R >= 2 (R = 1 has nothing to predict) and enough comm.
  bool counted() const { return tp >= 2 && tp_point_counts(point()); }
};

// t_compute, t_comm and t_total of one (R, d) over the tp group.
Row measure_cell(Communicator& tp, int64_t d, const TpProfileOptions& o) {
  ParallelMLP sharded(tp, mlp_config(d, 4 * d));
  LocalCommunicator alone("shard");
  ParallelMLP shard(alone, mlp_config(d, 4 * d / tp.size()));  // one rank's GEMM shapes
  const Tensor x = random_tensor({o.tokens, d}, kSeed, "tp_profile.x");
  Tensor y = Tensor::zeros({o.tokens, d});  // zeros stay zeros: no inf or denormal slows it
  const std::vector<double> t = time_steps(tp, o.iterations, Summary::kMedian,
                                           {
                                               [&] { shard.forward(x); },
                                               [&] { tp.all_reduce_sum(y); },
                                               [&] { sharded.forward(x); },
                                           });
  Row row;
  row.tp = tp.size();
  row.d_model = d;
  row.t_compute = t[0];
  row.t_comm = t[1];
  row.t_total = t[2];
  return row;
}

std::string transport_of(Communicator& c) {
  if (c.size() == 1) return "none";
  return dynamic_cast<MpiCommunicator*>(&c) != nullptr ? "mpi" : "shm";
}

struct LambdaCompute {
  double macs_per_second = 0.0;
  int tp = 1;
  int64_t d_model = 0, hidden = 0;
};

struct LambdaComm {
  double floats_per_second = 0.0;  // bus bandwidth; 0 at one rank (nothing moves)
  int64_t count = 0;
  int ranks = 1;
  std::string transport;
};

struct Lambdas {
  LambdaCompute compute;
  LambdaComm comm;
};

// Both lambdas, every rank at once, over the whole world:
//   lambda_compute: the two GEMMs of one rank's forward shard at (tp, d), up
//     [T, d] x [d, h] and down [T, h] x [h, d], h = 4d/tp (the run passes the
//     largest d of the largest R: where communication matters most); MAC/s.
//   lambda_comm: all_reduce_sum of [T, d_comm] through the communicator
//     --comm picks; nccl-tests' bus bandwidth in floats/s.
// Their rounds interleave, as a row's steps do, so both see the same machine
// and the all-reduce finds the caches as a row leaves them (back to back, a
// 32 MiB buffer would stay in a 32 MiB L3 and look faster than in a row).
Lambdas measure_lambdas(MpiCommunicator& world, CommKind kind, int tp, int64_t d, int64_t d_comm,
                        int64_t tokens, int iterations) {
  std::unique_ptr<Communicator> group =
      make_device_communicator(world.split_group(0, world.rank(), "world"), Device::cpu(), kind);
  const int64_t h = 4 * d / tp;
  const Tensor x = Tensor::full({tokens, d}, 0.5f), w_up = Tensor::full({h, d}, 0.01f);
  const Tensor hidden = Tensor::full({tokens, h}, 0.5f), w_down = Tensor::full({d, h}, 0.01f);
  Tensor up = Tensor::empty({tokens, h}), down = Tensor::empty({tokens, d});
  Tensor y = Tensor::zeros({tokens, d_comm});
  const std::vector<double> t =
      time_steps(*group, iterations, Summary::kBest,
                 {[&] {
                    ops::gemm(ops::Trans::kNo, ops::Trans::kYes, 1.0f, x, w_up, 0.0f, up);
                    ops::gemm(ops::Trans::kNo, ops::Trans::kYes, 1.0f, hidden, w_down, 0.0f, down);
                  },
                  [&] { group->all_reduce_sum(y); }});
  Lambdas l;
  l.compute = {tp_mlp_forward_macs(tokens, d, tp) / t[0], tp, d, h};
  l.comm.count = y.numel();
  l.comm.ranks = group->size();
  l.comm.transport = transport_of(*group);
  if (l.comm.ranks > 1) {
    l.comm.floats_per_second = all_reduce_bus_floats_per_second(l.comm.count, l.comm.ranks, t[1]);
  }
  return l;
}

// Writes `text` to `path` through a temporary name, so a failed write never
// leaves half a file. "" writes nothing.
bool write_file(const std::string& path, const std::string& text) {
  if (path.empty()) return true;
  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    out << text;
    out.close();
    if (!out) {
      std::remove(tmp.c_str());
      return false;
    }
  }
  return std::rename(tmp.c_str(), path.c_str()) == 0;
}

std::vector<PlotPoint> plot_points(const std::vector<Row>& rows) {
  std::vector<PlotPoint> points;
  for (const Row& r : rows) points.push_back({r.tp, r.d_model, r.measured(), r.predicted});
  return points;
}

std::string g4(double v) {
  char text[32];
  std::snprintf(text, sizeof text, "%.4g", v);
  return text;
}

// The node's 1-minute load average: other work on the cores shows here, and
// makes every time of the run suspect (the machine's noise, stated with it).
// This job's own busy ranks count too: about one per rank is the quiet value.
double load_average() {
  double load[1] = {0.0};
  return getloadavg(load, 1) == 1 ? load[0] : -1.0;
}

void print_header(const TpProfileOptions& o, int world_size, int threads, const Lambdas& l) {
  std::printf(
      "# colrow bench tp-profile: MLP forward (gelu, bias, ffn = 4 d), tokens %lld, %d rank(s), "
      "%d thread(s)/rank, OpenBLAS %s kernels (%s build), --comm %s\n"
      "# t_total: the sharded forward with its all-reduce. t_compute: one rank's shard (ffn "
      "4d/R) in a group of one,\n#   no communication. t_comm: all_reduce_sum of [tokens, d] "
      "fp32 over the same tp group.\n#   Each: median over %d iterations of the slowest "
      "rank's time.\n",
      static_cast<long long>(o.tokens), world_size, threads, blas_core_name().c_str(),
      to_string(blas_threading()), o.comm.c_str(), o.iterations);
  std::printf(
      "# lambda_compute = %.2f GMAC/s (%.2f GFLOP/s) per rank: sgemm of one rank's forward "
      "shard at R %d, d %lld, all ranks at once\n#   (rounds interleaved with lambda_comm's; "
      "both lambdas: the best of %d rounds)\n",
      l.compute.macs_per_second / 1e9, flops_from_macs(l.compute.macs_per_second) / 1e9,
      l.compute.tp, static_cast<long long>(l.compute.d_model), o.iterations);
  if (l.comm.ranks > 1) {
    std::printf(
        "# lambda_comm = %.3f Gfloat/s (%.2f GB/s) bus bandwidth: all_reduce_sum of %lld floats "
        "over %d ranks (%s)\n",
        l.comm.floats_per_second / 1e9, bytes_from_floats(l.comm.floats_per_second) / 1e9,
        static_cast<long long>(l.comm.count), l.comm.ranks, l.comm.transport.c_str());
  } else {
    std::printf("# lambda_comm: n/a (one rank: nothing moves)\n");
  }
  std::printf(
      "# predicted = (R-1)/d * lambda_compute / (4 lambda_comm)  [MAC/s, bus floats/s]; "
      "aim: ok = within 25%%, OFF = not, - = comm < 5%% of compute\n#\n"
      "# %3s %6s %6s %5s %12s %10s %11s %10s %10s %9s %4s\n",
      "R", "d", "ffn/R", "comm", "t_compute ms", "t_comm ms", "t_total ms", "measured", "predicted",
      "pred/meas", "aim");
}

void print_row(const Row& r) {
  const char* aim = !r.counted() ? "-" : tp_point_within(r.point()) ? "ok" : "OFF";
  std::printf("  %3d %6lld %6lld %5s %12.3f %10.3f %11.3f %10s %10s %9s %4s\n", r.tp,
              static_cast<long long>(r.d_model), static_cast<long long>(4 * r.d_model / r.tp),
              r.transport.c_str(), r.t_compute * 1e3, r.t_comm * 1e3, r.t_total * 1e3,
              g4(r.measured()).c_str(), g4(r.predicted).c_str(),
              g4(r.predicted / r.measured()).c_str(), aim);
  std::fflush(stdout);
}

nlohmann::json report(const TpProfileOptions& o, int world_size, int threads, const Lambdas& l,
                      const std::vector<Row>& rows, const nlohmann::json& skipped,
                      const TpAimSummary& aim) {
  nlohmann::json jrows = nlohmann::json::array();
  for (const Row& r : rows) {
    jrows.push_back(
        {{"tp", r.tp},
         {"d_model", r.d_model},
         {"ffn_hidden_local", 4 * r.d_model / r.tp},
         {"comm", r.transport},
         {"t_compute_ms", r.t_compute * 1e3},
         {"t_comm_ms", r.t_comm * 1e3},
         {"t_total_ms", r.t_total * 1e3},
         {"measured_ratio", r.measured()},
         {"predicted_ratio", r.predicted},
         {"predicted_over_measured", r.predicted / r.measured()},
         {"compute_gmacs", tp_mlp_forward_macs(o.tokens, r.d_model, r.tp) / r.t_compute / 1e9},
         {"counted", r.counted()},
         {"within", r.counted() && tp_point_within(r.point())}});
  }
  nlohmann::json floats = nullptr;  // none at one rank
  if (l.comm.ranks > 1) floats = l.comm.floats_per_second;
  return {{"benchmark", "tp-profile"},
          {"world_size", world_size},
          {"threads_per_rank", threads},
          {"tokens", o.tokens},
          {"iterations", o.iterations},
          {"comm", o.comm},
          {"blas_core", blas_core_name()},
          {"blas_threading", to_string(blas_threading())},
          {"model",
           "predicted_ratio = (tp - 1) / d_model * lambda_compute.macs_per_second / (4 * "
           "lambda_comm.floats_per_second); 0 at tp = 1"},
          {"lambda_compute",
           {{"macs_per_second", l.compute.macs_per_second},
            {"gflops_per_second", flops_from_macs(l.compute.macs_per_second) / 1e9},
            {"how",
             "sgemm of one rank's forward shard, [tokens, d] x [d, ffn/R] and [tokens, ffn/R] x "
             "[ffn/R, d], all ranks at once; the best round"},
            {"tp", l.compute.tp},
            {"d_model", l.compute.d_model},
            {"ffn_hidden_local", l.compute.hidden}}},
          {"lambda_comm",
           {{"floats_per_second", floats},
            {"gbytes_per_second", bytes_from_floats(l.comm.floats_per_second) / 1e9},
            {"how",
             "all_reduce_sum bus bandwidth (count / time * 2 (R-1) / R) over the world, rounds "
             "interleaved with lambda_compute's; the best round"},
            {"ranks", l.comm.ranks},
            {"count", l.comm.count},
            {"comm", l.comm.transport}}},
          {"rows", jrows},
          {"skipped", skipped},
          {"aim",
           {{"tolerance", kTpAimTolerance},
            {"min_comm_share", kTpAimMinShare},
            {"counted", aim.counted},
            {"within", aim.within},
            {"holds", aim.holds()}}}};
}

}  // namespace

int run_tp_profile_bench(const TpProfileOptions& o, const Launch& launch) {
  // Every check before anything is allocated, identically on every rank.
  validate(o);
  const CommKind kind = parse_comm_kind(o.comm);
  auto* world = dynamic_cast<MpiCommunicator*>(&launch.world);
  COLROW_CHECK(world != nullptr, "bench tp-profile runs over the MPI world");
  check_outputs(*world, o);
  const std::vector<Cell> cells = plan(o, world->size(), smallest_node_bytes(*world));
  // Cells run in (R, d) order: the last that runs is the largest d of the
  // largest R that runs, the shape lambda_compute is measured at.
  const Cell* widest = nullptr;
  int64_t max_d_run = 0;
  for (const Cell& c : cells) {
    if (!c.skip.empty()) continue;
    max_d_run = std::max(max_d_run, c.d_model);
    widest = &c;
  }
  if (widest == nullptr) {
    throw ConfigError("[bench] no (R, d_model) in min-d (" + std::to_string(o.min_d) +
                      ") .. max-d (" + std::to_string(o.max_d) + ") at tokens (" +
                      std::to_string(o.tokens) + ") fits in memory. Lower --max-d or --tokens.");
  }
  const int threads = threads_per_rank(o.threads, launch.local_ranks);
  set_threads(threads);
  const int world_size = world->size();
  const bool print = world->rank() == 0;

  const double load_at_start = load_average();
  const Lambdas lambdas =
      measure_lambdas(*world, kind, widest->tp, widest->d_model, max_d_run, o.tokens, o.iterations);
  if (print && !o.json) print_header(o, world_size, threads, lambdas);

  std::vector<Row> rows;
  nlohmann::json skipped = nlohmann::json::array();
  for (int tp_size : tp_degrees(world_size)) {
    const bool member = world->rank() < tp_size;
    std::unique_ptr<MpiCommunicator> host = world->split_group(member ? 0 : 1, world->rank(), "tp");
    if (member) {
      std::unique_ptr<Communicator> tp =
          make_device_communicator(std::move(host), Device::cpu(), kind);
      bool verified = false;
      for (const Cell& c : cells) {
        if (c.tp != tp_size) continue;
        if (!c.skip.empty()) {
          if (print && !o.json) {
            std::printf("  %3d %6lld   skipped: %s\n", c.tp, static_cast<long long>(c.d_model),
                        c.skip.c_str());
          }
          skipped.push_back({{"tp", c.tp}, {"d_model", c.d_model}, {"reason", c.skip}});
          continue;
        }
        if (!verified) {  // once per R, at its smallest d: the group and the shards are right
          const double err = verify(*tp, c.d_model, std::min(o.tokens, kVerifyTokens));
          if (!(err <= kVerifyTolerance)) {
            throw InternalError("[bench] the sharded MLP at R " + std::to_string(tp_size) + ", d " +
                                std::to_string(c.d_model) +
                                " differs from the unsharded one: relative error " +
                                std::to_string(err) + " > 1e-4");
          }
          verified = true;
        }
        Row row = measure_cell(*tp, c.d_model, o);
        row.transport = transport_of(*tp);
        row.predicted = predicted_comm_compute_ratio(
            row.tp, row.d_model, lambdas.compute.macs_per_second, lambdas.comm.floats_per_second);
        rows.push_back(row);
        if (print && !o.json) print_row(row);
      }
    }
    host.reset();
    quiet_barrier(*world);  // the next R starts when this one is done everywhere
  }

  std::vector<TpProfilePoint> points;
  for (const Row& r : rows) {
    if (r.tp >= 2) points.push_back(r.point());
  }
  const TpAimSummary aim = summarize_tp_aim(points);
  const std::string verdict = aim.counted == 0 ? "nothing to check (no point reaches 5%)"
                              : aim.holds()    ? "holds"
                                               : "does not hold";
  const std::string aim_text =
      "aim (prediction within 25% of measured where t_comm >= 5% of t_compute): " +
      std::to_string(aim.within) + " of " + std::to_string(aim.counted) + " points within -> " +
      verdict + (aim.counted == 0 ? "; lower --min-d" : "");

  int write_failure = 0;  // 1: --out-json, 2: --out-svg
  if (print) {
    nlohmann::json j = report(o, world_size, threads, lambdas, rows, skipped, aim);
    j["load_average"] = {{"start", load_at_start}, {"end", load_average()}};
    const std::string title = "TP MLP forward: t_comm / t_compute, tokens " +
                              std::to_string(o.tokens) + ", " + std::to_string(world_size) +
                              " rank(s), " + std::to_string(threads) + " thread(s)/rank";
    const std::string comm_rate = lambdas.comm.ranks > 1
                                      ? g4(lambdas.comm.floats_per_second / 1e9) + " Gfloat/s (bus)"
                                      : "n/a (one rank)";
    const std::vector<std::string> footer = {
        "solid: measured; dashed: predicted = (R-1)/d * lambda_compute / (4 lambda_comm), with",
        "lambda_compute " + g4(lambdas.compute.macs_per_second / 1e9) + " GMAC/s and lambda_comm " +
            comm_rate + " measured in this run",
        "aim (within 25% where t_comm >= 5% of t_compute): " + std::to_string(aim.within) + " of " +
            std::to_string(aim.counted) + " points -> " + verdict};
    if (!write_file(o.out_json, j.dump(2) + "\n")) {
      write_failure = 1;
    } else if (!write_file(o.out_svg,
                           tp_profile_svg(plot_points(rows), o.min_d, o.max_d, title, footer))) {
      write_failure = 2;
    }
    if (o.json) {
      std::cout << j.dump() << std::endl;
    } else {
      std::printf("# %s\n# load average of rank 0's node (1 min): %.2f at start, %.2f at end\n",
                  aim_text.c_str(), load_at_start, load_average());
    }
  }
  // Every rank learns whether rank 0's writes failed, and fails alike.
  Tensor failed = Tensor::full({1}, static_cast<float>(write_failure));
  world->broadcast(failed, 0);
  if (failed.data()[0] == 1.0f) throw ConfigError(unwritable_message("out-json", o.out_json));
  if (failed.data()[0] == 2.0f) throw ConfigError(unwritable_message("out-svg", o.out_svg));
  return 0;
}

}  // namespace colrow::apps
