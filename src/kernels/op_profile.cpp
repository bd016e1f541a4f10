// Per-operation timing (kernels/op_profile.h). GPU events come from a pool
// and go back to it when their pair has been read, so a profiled step
// creates no events once the pool has grown to one step's worth.
#include "kernels/op_profile.h"

#include <algorithm>
#include <chrono>
#include <map>

#include "core/device_runtime.h"

namespace colrow::kernels {
namespace {

struct PendingPair {
  const char* op;
  OpWork work;
  int device;
  void* start;
  void* stop;
};

struct Profile {
  bool on = false;
  std::map<std::string, OpTime> totals;
  std::vector<PendingPair> pending;         // GPU pairs not read yet
  std::map<int, std::vector<void*>> spare;  // events ready for reuse, per GPU
};

Profile& profile() {
  static Profile p;
  return p;
}

double now_ms() {
  using Clock = std::chrono::steady_clock;
  return std::chrono::duration<double, std::milli>(Clock::now().time_since_epoch()).count();
}

void* recorded_mark(int device) {
  std::vector<void*>& spare = profile().spare[device];
  void* mark = nullptr;
  if (spare.empty()) {
    mark = device_runtime::create_mark(device);
  } else {
    mark = spare.back();
    spare.pop_back();
  }
  device_runtime::record_mark(device, mark);
  return mark;
}

void add(const char* op, const OpWork& work, double ms) {
  OpTime& t = profile().totals[op];
  t.op = op;
  t.calls += 1;
  t.ms += ms;
  t.work.flops += work.flops;
  t.work.bytes += work.bytes;
}

}  // namespace

void set_op_profiling(bool on) {
  profile().on = on;
}

bool op_profiling() {
  return profile().on;
}

OpScope::OpScope(const char* op, Device device, OpWork work) : device_(device), work_(work) {
  if (!profile().on) return;
  op_ = op;
  if (device.is_cpu()) {
    cpu_start_ms_ = now_ms();
  } else {
    start_ = recorded_mark(device.index);
  }
}

OpScope::~OpScope() {
  if (op_ == nullptr) return;
  if (device_.is_cpu()) {
    add(op_, work_, now_ms() - cpu_start_ms_);
  } else {
    profile().pending.push_back({op_, work_, device_.index, start_, recorded_mark(device_.index)});
  }
}

std::vector<OpTime> take_op_times() {
  Profile& p = profile();
  for (const PendingPair& pair : p.pending) {
    add(pair.op, pair.work, device_runtime::elapsed_ms(pair.start, pair.stop));
    p.spare[pair.device].push_back(pair.start);
    p.spare[pair.device].push_back(pair.stop);
  }
  p.pending.clear();
  std::vector<OpTime> times;
  for (auto& [op, t] : p.totals) times.push_back(t);
  p.totals.clear();
  std::sort(times.begin(), times.end(),
            [](const OpTime& a, const OpTime& b) { return a.ms > b.ms; });
  return times;
}

std::string op_phase(const std::string& op) {
  const auto has = [&](const char* part) { return op.find(part) != std::string::npos; };
  if (has("all_reduce") || has("all_gather") || has("reduce_scatter") || has("broadcast") ||
      has("send") || op == "recv") {
    return "communication";  // dist/profiled_communicator.h
  }
  if (op == "gemm" || has("linear")) return "gemm";
  if (has("attention") || has("rope") || has("kv_cache")) return "attention";
  if (has("cross_entropy")) return "loss";
  if (has("adamw") || has("sum_of_squares") || op == "divide") return "optimizer";
  if (has("norm") || has("gelu") || has("silu") || has("swiglu") || has("bias") ||
      has("embedding") || op == "add" || op == "add_into") {
    return "norms and elementwise";
  }
  return "other";
}

}  // namespace colrow::kernels
