// Linear warmup then cosine decay (llm.c's train_gpt2.c learning-rate block).
#include "colrow/train/lr_schedule.h"

#include <cmath>
#include <string>

#include "colrow/core/error.h"

namespace colrow {

void validate(const LrSchedule& s) {
  if (!(s.lr >= 0.0)) {
    throw ConfigError("[lr_schedule] lr (" + std::to_string(s.lr) + ") must be >= 0.");
  }
  if (!(s.min_lr >= 0.0 && s.min_lr <= s.lr)) {
    throw ConfigError("[lr_schedule] min_lr (" + std::to_string(s.min_lr) +
                      ") must lie in [0, lr (" + std::to_string(s.lr) + ")].");
  }
  if (s.warmup_steps < 0) {
    throw ConfigError("[lr_schedule] warmup_steps (" + std::to_string(s.warmup_steps) +
                      ") must be >= 0.");
  }
  if (s.total_steps < s.warmup_steps) {
    throw ConfigError("[lr_schedule] total_steps (" + std::to_string(s.total_steps) +
                      ") must be >= warmup_steps (" + std::to_string(s.warmup_steps) +
                      "). Shorten the warmup or train longer.");
  }
}

double lr_at(const LrSchedule& s, int64_t step) {
  if (step < s.warmup_steps) {
    return s.lr * static_cast<double>(step + 1) / static_cast<double>(s.warmup_steps);
  }
  if (step >= s.total_steps) return s.min_lr;
  const double decay_ratio = static_cast<double>(step - s.warmup_steps) /
                             static_cast<double>(s.total_steps - s.warmup_steps);
  const double coeff = 0.5 * (1.0 + std::cos(M_PI * decay_ratio));
  return s.min_lr + coeff * (s.lr - s.min_lr);
}

}  // namespace colrow
