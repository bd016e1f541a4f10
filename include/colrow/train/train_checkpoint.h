// Training checkpoints: everything a run needs to continue exactly where it
// stopped, at the same or another tp x pp x dp.
//   RUN/step-00000100/  config.json, model.safetensors (Hugging Face, any tp),
//                       optimizer.exp_avg.safetensors, optimizer.exp_avg_sq
//                       .safetensors (AdamW moments, unsharded, same names and
//                       layouts as the model), train_state.json (step, seed, ...)
//                       and, when model.safetensors is a BF16 export
//                       (--save-dtype bf16), optimizer.master_weights
//                       .safetensors: the fp32 weights training continues from
//   RUN/latest -> step-00000100   (a symlink, replaced atomically)
// A new checkpoint is written under a temporary name and renamed, and only
// then does `latest` move and the previous one go: killing the job at any
// moment leaves `latest` pointing at a complete checkpoint. The data position
// and the randomness are pure functions of (seed, step), so step is all the
// data state there is. RUN/latest is itself a model directory (eval, generate).
#pragma once

#include <cstdint>
#include <string>

#include "colrow/dist/process_mesh.h"
#include "colrow/nn/gpt_model.h"
#include "colrow/train/adamw.h"
#include "colrow/train/injected_faults.h"

namespace colrow {

struct TrainState {
  int64_t step = 0;  // optimizer steps done
  uint64_t seed = 0;
  int64_t skipped_steps = 0;  // steps whose gradient was not finite (--skip-nonfinite)
};

// Collective over the mesh's world. Returns the checkpoint's directory.
// `model_dtype`: model.safetensors' dtype. `faults`: kill-in-save fires after
// model.safetensors is written.
std::string save_training_checkpoint(GptModel& model, AdamW& optimizer, const TrainState& state,
                                     const std::string& run_dir, ProcessMesh& mesh,
                                     DType model_dtype = DType::kF32,
                                     const FaultInjector& faults = FaultInjector());

// `dir`: a run directory (its `latest` is used) or a step directory. Reads the
// model (from the fp32 masters when model.safetensors is an export), the
// moments (resharded to this mesh) and the state. Every rank reads
// its own slices; the only collectives are one all_gather over tp per file
// (its checksums).
TrainState load_training_checkpoint(GptModel& model, AdamW& optimizer, const std::string& dir);

// The step directory `dir` names: dir/latest when dir is a run directory.
std::string resolve_checkpoint_dir(const std::string& dir);

}  // namespace colrow
