// LrSchedule: the learning rate at each step, linear warmup then cosine decay
// to min_lr (llm.c's train_gpt2 and nanoGPT's get_lr). A pure function of the
// step, so a resumed run uses exactly the rates an uninterrupted one would.
#pragma once

#include <cstdint>

namespace colrow {

struct LrSchedule {
  double lr = 0.0;           // peak rate, reached at the last warmup step
  double min_lr = 0.0;       // the floor the cosine reaches at total_steps
  int64_t warmup_steps = 0;  // 0: no warmup
  int64_t total_steps = 0;   // the decay ends here; later steps use min_lr
};

// Pure check, identical on every rank: 0 <= min_lr <= lr, warmup_steps >= 0,
// total_steps >= warmup_steps. ConfigError naming the field otherwise.
void validate(const LrSchedule& schedule);

// step counts from 0. Warmup (step < warmup_steps): lr * (step + 1) /
// warmup_steps, so the first step already moves (a step at rate 0 would be
// wasted) and step warmup_steps - 1 runs at lr. Then
//   min_lr + (lr - min_lr) * (1 + cos(pi * (step - warmup) / (total - warmup))) / 2
// until total_steps, min_lr from there on.
double lr_at(const LrSchedule& schedule, int64_t step);

}  // namespace colrow
