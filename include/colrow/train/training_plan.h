// What `colrow train`'s flags decide before anything is read or allocated: the
// mesh, the pipeline split, the tokens of one step, the learning-rate
// schedule and AdamW's settings, each checked. A pure function of the flags,
// the model's shape and the world size, so every rank reaches the same plan
// (or the same ConfigError), and the CLI fuzzer runs exactly these checks.
#pragma once

#include <cstdint>
#include <vector>

#include "colrow/nn/model_config.h"
#include "colrow/train/adamw_config.h"
#include "colrow/train/lr_schedule.h"
#include "colrow/train/trainer.h"

namespace colrow {

struct TrainingPlan {
  int tp = 1;
  std::vector<int> stage_layers;  // layers of each pipeline stage
  int64_t tokens_per_step = 0;    // batch x seq_len x grad_accum x dp
  LrSchedule schedule;
  AdamWConfig adam;                // zero resolved: 1 when dp > 1 unless asked
  DType save_dtype = DType::kF32;  // of the checkpoints' model.safetensors
};

// ConfigError (one line: the value, the rule, the fix) on the first flag that
// does not fit; the data, --init and --resume are checked where they are read.
TrainingPlan plan_training(const TrainOptions& options, const ModelConfig& config, int world_size);

}  // namespace colrow
