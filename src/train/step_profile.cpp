// StepProfile (step_profile.h).
#include "train/step_profile.h"

#include <algorithm>
#include <cstdio>
#include <vector>

namespace colrow {
namespace {

std::string row(const std::string& name, double calls, double ms, double step_ms) {
  char text[160];
  std::snprintf(text, sizeof text, "  %-36s %8.1f %10.2f %7.1f%%", name.c_str(), calls, ms,
                100.0 * ms / step_ms);
  return text;
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
  }
  step_ms_ += step_ms;
  ++profiled_;
  if (step_ < last_) return "";

  const double n = static_cast<double>(profiled_), ms = step_ms_ / n;
  std::vector<kernels::OpTime> ops;
  std::map<std::string, double> phases;
  double timed = 0.0;
  for (const auto& [name, t] : ops_) {
    ops.push_back(t);
    phases[kernels::op_phase(name)] += t.ms / n;
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
                "operation, summed)\n  %-36s %8s %10s %8s",
                static_cast<long long>(first_), static_cast<long long>(last_), ms, "phase", "calls",
                "ms/step", "share");
  std::string report = head;
  for (const auto& [phase, phase_ms] : by_phase) {
    double calls = 0.0;
    for (const kernels::OpTime& t : ops) {
      if (kernels::op_phase(t.op) == phase) calls += t.calls / n;
    }
    report += "\n" + row(phase, calls, phase_ms, ms);
  }
  report += "\n" + row("untimed (communication, host, idle)", 0.0, std::max(0.0, ms - timed), ms);
  report += "\n  operation";
  for (const kernels::OpTime& t : ops) report += "\n" + row(t.op, t.calls / n, t.ms / n, ms);
  return report;
}

}  // namespace colrow
