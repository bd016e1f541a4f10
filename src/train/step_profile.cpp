// StepProfile (step_profile.h).
#include "train/step_profile.h"

#include <algorithm>
#include <cstdio>
#include <vector>

namespace colrow {
namespace {

// What the time achieved: the products' rate where there are products
// (GEMMs, attention), else the operands' bytes per second; "" for neither.
std::string rate(const kernels::OpWork& work, double ms) {
  if (ms <= 0.0) return "";
  char text[40];
  const double per_s = 1e3 / ms;
  if (work.flops > 0.0) {
    const double flops = work.flops * per_s;
    if (flops >= 1e12) {
      std::snprintf(text, sizeof text, "%.1f TFLOP/s", flops / 1e12);
    } else {
      std::snprintf(text, sizeof text, "%.1f GFLOP/s", flops / 1e9);
    }
  } else if (work.bytes > 0.0) {
    std::snprintf(text, sizeof text, "%.1f GB/s", work.bytes * per_s / 1e9);
  } else {
    return "";
  }
  return text;
}

std::string row(const std::string& name, double calls, double ms, double step_ms,
                const kernels::OpWork& work = {}) {
  char text[200];
  std::snprintf(text, sizeof text, "  %-36s %8.1f %10.2f %7.1f%%  %s", name.c_str(), calls, ms,
                100.0 * ms / step_ms, rate(work, ms).c_str());
  std::string line = text;
  while (!line.empty() && line.back() == ' ') line.pop_back();
  return line;
}

}  // namespace

void StepProfile::begin_step(int64_t step, int64_t last_step) {
  step_ = step;
  if (steps_ <= 0) return;
  if (first_ == 0) {
    first_ = step < last_step ? step + 1 : step;  // skip the warm-up step if there is another
    last_ = std::min(last_step, first_ + steps_ - 1);
  }
  kernels::set_op_profiling(step >= first_ && step <= last_);
}

std::string StepProfile::end_step(double step_ms) {
  if (!kernels::op_profiling()) return "";
  kernels::set_op_profiling(false);  // validation and saving stay out
  for (const kernels::OpTime& t : kernels::take_op_times()) {
    kernels::OpTime& total = ops_[t.op];
    total.op = t.op;
    total.calls += t.calls;
    total.ms += t.ms;
    total.work.flops += t.work.flops;
    total.work.bytes += t.work.bytes;
  }
  step_ms_ += step_ms;
  ++profiled_;
  if (step_ < last_) return "";

  const double n = static_cast<double>(profiled_), ms = step_ms_ / n;
  std::vector<kernels::OpTime> ops;
  std::map<std::string, double> phases;
  std::map<std::string, kernels::OpWork> phase_work;  // its products over its whole time
  double timed = 0.0;
  for (const auto& [name, t] : ops_) {
    ops.push_back(t);
    const std::string phase = kernels::op_phase(name);
    phases[phase] += t.ms / n;
    phase_work[phase].flops += t.work.flops / n;
    phase_work[phase].bytes += t.work.bytes / n;
    timed += t.ms / n;
  }
  std::sort(ops.begin(), ops.end(),
            [](const kernels::OpTime& a, const kernels::OpTime& b) { return a.ms > b.ms; });
  std::vector<std::pair<std::string, double>> by_phase(phases.begin(), phases.end());
  std::sort(by_phase.begin(), by_phase.end(),
            [](const auto& a, const auto& b) { return a.second > b.second; });

  char head[200];
  std::snprintf(head, sizeof head,
                "profile: steps %lld-%lld, %.2f ms per step (rank 0; device time of each "
                "operation, summed)\n  %-36s %8s %10s %8s  %s",
                static_cast<long long>(first_), static_cast<long long>(last_), ms, "phase", "calls",
                "ms/step", "share", "achieved");
  std::string report = head;
  for (const auto& [phase, phase_ms] : by_phase) {
    double calls = 0.0;
    for (const kernels::OpTime& t : ops) {
      if (kernels::op_phase(t.op) == phase) calls += t.calls / n;
    }
    report += "\n" + row(phase, calls, phase_ms, ms, phase_work[phase]);
  }
  report += "\n" + row("untimed (host, idle)", 0.0, std::max(0.0, ms - timed), ms);
  report += "\n  operation";
  for (const kernels::OpTime& t : ops) {
    const kernels::OpWork work{t.work.flops / n, t.work.bytes / n};
    report += "\n" + row(t.op, t.calls / n, t.ms / n, ms, work);
  }
  return report;
}

}  // namespace colrow
