// Faults injected on purpose, so that tests can prove what a training run
// does when one rank dies or one gradient turns non-finite
// (docs/reliability.md). Nothing happens unless COLROW_INJECT_FAULT is set;
// it is read once, by the training loop:
//   COLROW_INJECT_FAULT=kill-in-step@3:1   world rank 1 kills itself (SIGKILL,
//                                          as kill -9 would) in step 3, after
//                                          its backward passes
//   COLROW_INJECT_FAULT=kill-in-save@2:0   world rank 0 kills itself while
//                                          writing step 2's checkpoint, after
//                                          model.safetensors and before the
//                                          optimizer's files
//   COLROW_INJECT_FAULT=error-in-step@3:1  world rank 1 alone fails with an
//                                          error in step 3 (as a lost file or
//                                          device would), while the others
//                                          wait for it in a collective
//   COLROW_INJECT_FAULT=nan-grad@3:1       one element of one of rank 1's
//   COLROW_INJECT_FAULT=inf-grad@3:1       gradients becomes NaN (Inf) in step 3
// Several faults: a comma-separated list. The rank defaults to 0.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "colrow/nn/parameter.h"

namespace colrow {

enum class FaultKind { kKillInStep, kKillInSave, kErrorInStep, kNanGrad, kInfGrad };

struct InjectedFault {
  FaultKind kind;
  int64_t step;  // 1-based: the step being computed (or saved)
  int rank;      // world rank
};

// Parses the COLROW_INJECT_FAULT syntax above; ConfigError naming the bad
// entry otherwise. "" is no fault.
std::vector<InjectedFault> parse_injected_faults(const std::string& spec);

class FaultInjector {
 public:
  FaultInjector() = default;  // injects nothing
  FaultInjector(std::vector<InjectedFault> faults, int world_rank);
  static FaultInjector from_environment(int world_rank);  // COLROW_INJECT_FAULT

  // kill-in-step / kill-in-save due here: says so on stderr, then SIGKILL.
  void kill_if_due(FaultKind where, int64_t step) const;
  // error-in-step due here: throws BackendError on this rank only.
  void fail_if_due(int64_t step) const;
  // nan-grad / inf-grad due here: writes it into the first element of the
  // first parameter's gradient.
  void poison_gradient_if_due(int64_t step, const std::vector<Parameter*>& params) const;

 private:
  bool due(FaultKind kind, int64_t step) const;

  std::vector<InjectedFault> faults_;
  int world_rank_ = 0;
};

}  // namespace colrow
