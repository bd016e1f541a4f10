// `colrow train --profile N`: where a training step's time goes. Steps 2 to
// N + 1 are timed per kernel operation (kernels/op_profile.h; step 1 warms
// caches, cuBLAS heuristics and the allocator); the report gives each phase
// (GEMMs, attention, norms and elementwise, loss, optimizer, communication,
// other) and each operation per step with its share of the step and what it
// achieved (the FLOP/s of its products, else the GB/s of its operands:
// kernels::OpWork), and what no operation covers (host work, idle device).
#pragma once

#include <cstdint>
#include <map>
#include <string>

#include "kernels/op_profile.h"

namespace colrow {

class StepProfile {
 public:
  explicit StepProfile(int64_t steps) : steps_(steps) {}

  // Before step `step` (1-based) of a run that ends at `last_step`.
  void begin_step(int64_t step, int64_t last_step);
  // After it, once its device work is done; returns the report after the
  // last profiled step, else "".
  std::string end_step(double step_ms);

 private:
  int64_t steps_;
  int64_t first_ = 0;  // first profiled step, 0 before it is known
  int64_t last_ = 0;
  int64_t step_ = 0;
  int64_t profiled_ = 0;
  double step_ms_ = 0.0;
  std::map<std::string, kernels::OpTime> ops_;
};

}  // namespace colrow
