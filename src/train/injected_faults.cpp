// COLROW_INJECT_FAULT: deliberate faults for the reliability tests.
#include "colrow/train/injected_faults.h"

#include <csignal>
#include <cstdlib>
#include <iostream>
#include <limits>
#include <sstream>

#include "colrow/core/error.h"

namespace colrow {
namespace {

constexpr const char* kVariable = "COLROW_INJECT_FAULT";

const std::pair<const char*, FaultKind> kKinds[] = {{"kill-in-step", FaultKind::kKillInStep},
                                                    {"kill-in-save", FaultKind::kKillInSave},
                                                    {"error-in-step", FaultKind::kErrorInStep},
                                                    {"nan-grad", FaultKind::kNanGrad},
                                                    {"inf-grad", FaultKind::kInfGrad}};

// A whole decimal number >= minimum, or nothing.
bool parse_count(const std::string& text, int64_t minimum, int64_t* value) {
  if (text.empty() || text.size() > 12 || text.find_first_not_of("0123456789") != std::string::npos)
    return false;
  *value = std::stoll(text);
  return *value >= minimum;
}

InjectedFault parse_one(const std::string& entry) {
  const auto bad = [&entry](const std::string& rule) {
    return ConfigError(std::string("[faults] ") + kVariable + " entry (" + entry + ") " + rule +
                       ". Write KIND@STEP[:RANK], e.g. kill-in-step@3:1, with KIND one of "
                       "kill-in-step, kill-in-save, error-in-step, nan-grad, inf-grad.");
  };
  const size_t at = entry.find('@');
  if (at == std::string::npos) throw bad("has no @STEP");
  InjectedFault fault{FaultKind::kKillInStep, 0, 0};
  bool known = false;
  for (const auto& [name, kind] : kKinds) {
    if (entry.compare(0, at, name) == 0 && at == std::string(name).size()) {
      fault.kind = kind;
      known = true;
    }
  }
  if (!known) throw bad("names no known fault");
  const std::string where = entry.substr(at + 1);
  const size_t colon = where.find(':');
  int64_t step = 0, rank = 0;
  if (!parse_count(where.substr(0, colon), 1, &step)) throw bad("must give a step >= 1");
  if (colon != std::string::npos && !parse_count(where.substr(colon + 1), 0, &rank)) {
    throw bad("must give a rank >= 0 after the colon");
  }
  fault.step = step;
  fault.rank = static_cast<int>(rank);
  return fault;
}

}  // namespace

std::vector<InjectedFault> parse_injected_faults(const std::string& spec) {
  std::vector<InjectedFault> faults;
  std::stringstream list(spec);
  for (std::string entry; std::getline(list, entry, ',');) {
    if (!entry.empty()) faults.push_back(parse_one(entry));
  }
  return faults;
}

FaultInjector::FaultInjector(std::vector<InjectedFault> faults, int world_rank)
    : faults_(std::move(faults)), world_rank_(world_rank) {}

FaultInjector FaultInjector::from_environment(int world_rank) {
  const char* spec = std::getenv(kVariable);
  return FaultInjector(parse_injected_faults(spec == nullptr ? "" : spec), world_rank);
}

bool FaultInjector::due(FaultKind kind, int64_t step) const {
  for (const InjectedFault& f : faults_) {
    if (f.kind == kind && f.step == step && f.rank == world_rank_) return true;
  }
  return false;
}

void FaultInjector::kill_if_due(FaultKind where, int64_t step) const {
  if (!due(where, step)) return;
  std::cerr << "[rank " << world_rank_ << "] " << kVariable << ": SIGKILL "
            << (where == FaultKind::kKillInSave ? "while saving" : "in") << " step " << step << "\n"
            << std::flush;
  std::raise(SIGKILL);
}

void FaultInjector::fail_if_due(int64_t step) const {
  if (!due(FaultKind::kErrorInStep, step)) return;
  throw BackendError(std::string("[faults] ") + kVariable + ": error-in-step at step " +
                     std::to_string(step) + " on this rank alone.");
}

void FaultInjector::poison_gradient_if_due(int64_t step,
                                           const std::vector<Parameter*>& params) const {
  const bool nan = due(FaultKind::kNanGrad, step);
  if (!(nan || due(FaultKind::kInfGrad, step)) || params.empty()) return;
  Tensor& grad = params.front()->grad;
  const float value =
      nan ? std::numeric_limits<float>::quiet_NaN() : std::numeric_limits<float>::infinity();
  grad.view({grad.numel()}).slice(0, 0, 1).copy_from(Tensor::full({1}, value));
}

}  // namespace colrow
