// `colrow bench comm` (see bench_comm.h). Sizes follow nccl-tests: the bytes
// of an all_reduce buffer, of all_gather's output and of reduce_scatter's
// input. Timed runs start from the same integers and go on summing their own
// results (in place): the values grow but stay finite or become inf, which
// costs no time, and never NaN. The check is a separate run on fresh inputs.
// In bf16 the sums are the bf16 wire's, on integers small enough that bf16
// holds every partial sum.
#include "bench_comm.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>
#include <sstream>
#include <vector>

#include "cli.h"
#include "colrow/core/error.h"
#include "colrow/dist/device_communicator.h"
#include "colrow/dist/mpi_communicator.h"
#include "colrow/runtime/threads.h"

namespace colrow::apps {
namespace {

using Clock = std::chrono::steady_clock;

enum class Op { kAllReduce, kAllGather, kReduceScatter };

const char* op_name(Op op) {
  switch (op) {
    case Op::kAllReduce:
      return "all_reduce";
    case Op::kAllGather:
      return "all_gather";
    case Op::kReduceScatter:
      return "reduce_scatter";
  }
  return "unknown";
}

// --ops, "" meaning every collective of the dtype; bf16 has the two sums.
std::vector<Op> parse_ops(std::string text, DType dtype) {
  if (text.empty()) {
    text = dtype == DType::kBF16 ? "all_reduce,reduce_scatter"
                                 : "all_reduce,all_gather,reduce_scatter";
  }
  std::vector<Op> ops;
  std::stringstream list(text);
  for (std::string item; std::getline(list, item, ',');) {
    if (item == "all_reduce") {
      ops.push_back(Op::kAllReduce);
    } else if (item == "all_gather") {
      ops.push_back(Op::kAllGather);
    } else if (item == "reduce_scatter") {
      ops.push_back(Op::kReduceScatter);
    } else {
      throw ConfigError("[bench] ops (" + text +
                        ") must be a comma-separated list of all_reduce, all_gather and "
                        "reduce_scatter.");
    }
  }
  if (ops.empty()) throw ConfigError("[bench] ops is empty: name at least one collective.");
  for (Op op : ops) {
    if (dtype == DType::kBF16 && op == Op::kAllGather) {
      throw ConfigError("[bench] ops (" + text +
                        ") with --dtype bf16: the bf16 wire carries sums only (all_reduce, "
                        "reduce_scatter); all_gather of bf16 moves fp32. Drop all_gather.");
    }
  }
  return ops;
}

// In and out of one collective; in-place all_reduce uses `in` only.
struct Operands {
  Tensor in, out;
  int64_t bytes;  // the nccl-tests size
  int64_t count;  // its elements
};

// The operands for a size of `bytes`: whole elements, and for the gathers and
// scatters a whole number of elements per rank (at least one).
Operands operands_for(Op op, int64_t bytes, int ranks, DType dtype) {
  const int64_t element = dtype_bytes(dtype);
  const int64_t count = std::max<int64_t>(1, bytes / element);
  const int64_t per_rank = std::max<int64_t>(1, count / ranks);
  auto make = [&](int64_t n) { return Tensor::empty({n}, Device::cpu(), dtype); };
  switch (op) {
    case Op::kAllReduce:
      return {make(count), Tensor(), count * element, count};
    case Op::kAllGather:
      return {make(per_rank), make(ranks * per_rank), ranks * per_rank * element, ranks * per_rank};
    case Op::kReduceScatter:
      return {make(ranks * per_rank), make(per_rank), ranks * per_rank * element, ranks * per_rank};
  }
  return {};
}

void run(Op op, Communicator& c, Operands& x) {
  const bool bf16 = x.in.dtype() == DType::kBF16;
  switch (op) {
    case Op::kAllReduce:
      if (bf16) {
        c.all_reduce_sum_bf16_wire(x.in);
      } else {
        c.all_reduce_sum(x.in);
      }
      return;
    case Op::kAllGather:
      c.all_gather(x.in, x.out);
      return;
    case Op::kReduceScatter:
      if (bf16) {
        c.reduce_scatter_sum_bf16_wire(x.in, x.out);
      } else {
        c.reduce_scatter_sum(x.in, x.out);
      }
      return;
  }
}

// Rank q's k-th input: small integers, so every sum is exact in any order:
// in [-50, 50] in fp32; in [-4, 4] in bf16, whose 8 significant bits then
// hold any sum over up to 16 ranks.
float input(int q, int64_t k, DType dtype) {
  if (dtype == DType::kBF16) return static_cast<float>((k * 7 + q * 13) % 9 - 4);
  return static_cast<float>((k * 7 + q * 13) % 101 - 50);
}

void fill_inputs(Operands& x, int rank) {
  const DType dtype = x.in.dtype();
  std::vector<float> values(x.in.numel());
  for (int64_t k = 0; k < x.in.numel(); ++k) values[k] = input(rank, k, dtype);
  x.in.convert_from(Tensor::from_vector({x.in.numel()}, values));
}

// Elements of this rank's result that differ from the exact answer.
int64_t wrong_elements(Op op, const Operands& x, int rank, int ranks) {
  const DType dtype = x.in.dtype();
  auto sum_at = [&](int64_t k) {
    float s = 0.0f;
    for (int q = 0; q < ranks; ++q) s += input(q, k, dtype);
    return s;
  };
  int64_t wrong = 0;
  switch (op) {
    case Op::kAllReduce: {
      const std::vector<float> got = x.in.to_vector();
      for (int64_t k = 0; k < x.in.numel(); ++k) wrong += got[k] != sum_at(k);
      break;
    }
    case Op::kAllGather: {
      const std::vector<float> got = x.out.to_vector();
      const int64_t n = x.in.numel();
      for (int64_t k = 0; k < x.out.numel(); ++k) {
        wrong += got[k] != input(static_cast<int>(k / n), k % n, dtype);
      }
      break;
    }
    case Op::kReduceScatter: {
      const std::vector<float> got = x.out.to_vector();
      const int64_t n = x.out.numel();
      for (int64_t k = 0; k < n; ++k) wrong += got[k] != sum_at(rank * n + k);
      break;
    }
  }
  return wrong;
}

// nccl-tests' bus bandwidth factor: the bytes a ring moves per byte of size.
double bus_factor(Op op, int ranks) {
  const double r = ranks;
  return op == Op::kAllReduce ? 2.0 * (r - 1) / r : (r - 1) / r;
}

struct Measurement {
  double seconds = 0.0;  // mean per call, the slowest rank's
  int64_t wrong = 0;     // summed over ranks
};

Measurement measure(Op op, Communicator& c, Operands& x, Communicator& world,
                    const CommBenchOptions& o) {
  Measurement m;
  fill_inputs(x, c.rank());
  run(op, c, x);
  Tensor wrong = Tensor::full({1}, static_cast<float>(wrong_elements(op, x, c.rank(), c.size())));
  world.all_reduce_sum(wrong);
  m.wrong = static_cast<int64_t>(wrong.data()[0]);

  fill_inputs(x, c.rank());
  for (int i = 0; i < o.warmup; ++i) run(op, c, x);
  world.barrier();
  const auto start = Clock::now();
  for (int i = 0; i < o.iterations; ++i) run(op, c, x);
  Tensor seconds = Tensor::full(
      {1}, static_cast<float>(std::chrono::duration<double>(Clock::now() - start).count() /
                              o.iterations));
  world.all_reduce_max(seconds);
  m.seconds = seconds.data()[0];
  return m;
}

// One transport under test.
struct Transport {
  std::string name;   // "shm" | "mpi"
  std::string title;  // for the header
  std::unique_ptr<Communicator> comm;
};

std::vector<Transport> transports(MpiCommunicator& world, const std::string& which) {
  std::vector<Transport> list;
  if (which != "mpi") {
    // A plain MpiCommunicator back means there is nothing to share (one rank)
    // or, for auto, that shared memory could not be set up (a note says why).
    const CommKind kind = which == "shm" ? CommKind::kShm : CommKind::kAuto;
    std::unique_ptr<Communicator> c =
        make_device_communicator(world.split_group(0, world.rank(), "bench"), Device::cpu(), kind);
    if (dynamic_cast<MpiCommunicator*>(c.get()) == nullptr) {
      list.push_back({"shm", "shm (shared memory)", std::move(c)});
    }
  }
  if (which != "shm") {
    list.push_back({"mpi", "mpi (Open MPI)", world.split_group(0, world.rank(), "bench")});
  }
  return list;
}

std::string fixed(double v, int decimals) {
  char text[32];
  std::snprintf(text, sizeof text, "%.*f", decimals, v);
  return text;
}

}  // namespace

int run_comm_bench(const CommBenchOptions& o, const Launch& launch) {
  validate(o);
  const DType dtype = parse_dtype("--dtype", o.dtype);
  const std::vector<Op> ops = parse_ops(o.ops, dtype);
  auto* world = dynamic_cast<MpiCommunicator*>(&launch.world);
  COLROW_CHECK(world != nullptr, "bench comm runs over the MPI world");
  const int threads = threads_per_rank(o.threads, launch.local_ranks);
  set_threads(threads);
  std::vector<Transport> list = transports(*world, o.comm);
  const int ranks = world->size();
  const bool print = world->rank() == 0;

  if (print && !o.json) {
    std::printf(
        "# colrow bench comm: %d ranks, %d thread(s) per rank, %s. time: the\n"
        "# slowest rank's mean over %d calls; algbw = size / time; busbw = algbw x "
        "%s;\n# #wrong: elements off the exact answer, all ranks.\n#\n",
        ranks, threads, dtype == DType::kBF16 ? "bf16 sums on the bf16 wire" : "fp32 sum",
        o.iterations, "2(R-1)/R (all_reduce) or (R-1)/R");
    std::printf("# %-14s %11s %11s", "", "", "");
    for (const Transport& t : list) std::printf("   %-36s", t.title.c_str());
    std::printf("\n# %-14s %11s %11s", "collective", "size (B)", "count");
    for (size_t i = 0; i < list.size(); ++i) {
      std::printf(" %10s %7s %7s %7s", "time (us)", "algbw", "busbw", "#wrong");
    }
    if (list.size() == 2) std::printf(" %8s", "speedup");
    std::printf("\n");
  }

  nlohmann::json results = nlohmann::json::array();
  int64_t total_wrong = 0;
  for (Op op : ops) {
    for (int64_t bytes = o.min_bytes; bytes <= o.max_bytes; bytes *= o.step_factor) {
      std::vector<Measurement> row;
      Operands x = operands_for(op, bytes, ranks, dtype);
      for (Transport& t : list) row.push_back(measure(op, *t.comm, x, *world, o));
      for (const Measurement& m : row) total_wrong += m.wrong;  // summed over ranks already
      if (!print) continue;
      if (!o.json)
        std::printf("  %-14s %11lld %11lld", op_name(op), static_cast<long long>(x.bytes),
                    static_cast<long long>(x.count));
      for (size_t i = 0; i < row.size(); ++i) {
        const double algbw = x.bytes / row[i].seconds / 1e9;
        const double busbw = algbw * bus_factor(op, ranks);
        results.push_back({{"op", op_name(op)},
                           {"comm", list[i].name},
                           {"bytes", x.bytes},
                           {"count", x.count},
                           {"time_us", row[i].seconds * 1e6},
                           {"algbw_gbs", algbw},
                           {"busbw_gbs", busbw},
                           {"wrong", row[i].wrong}});
        if (!o.json) {
          std::printf(" %10s %7s %7s %7lld", fixed(row[i].seconds * 1e6, 1).c_str(),
                      fixed(algbw, 2).c_str(), fixed(busbw, 2).c_str(),
                      static_cast<long long>(row[i].wrong));
        }
      }
      if (!o.json && row.size() == 2) {
        std::printf(" %7sx", fixed(row[1].seconds / row[0].seconds, 2).c_str());
      }
      if (!o.json) std::printf("\n");
    }
  }
  if (print) {
    if (o.json) {
      std::cout << nlohmann::json{{"benchmark", "comm"},
                                  {"dtype", dtype_name(dtype)},
                                  {"ranks", ranks},
                                  {"threads_per_rank", threads},
                                  {"iterations", o.iterations},
                                  {"results", results},
                                  {"wrong", total_wrong}}
                       .dump()
                << "\n";
    } else {
      std::printf("# wrong elements in all: %lld\n", static_cast<long long>(total_wrong));
    }
  }
  return total_wrong == 0 ? 0 : 1;
}

}  // namespace colrow::apps
