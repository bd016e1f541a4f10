// The training run behind `colrow train`: tp x pp x dp mesh (1F1B over the
// pipeline stages), GptModel, AdamW (ZeRO-1 over dp), warmup + cosine schedule,
// gradient accumulation, held-out validation, checkpoints with exact resume,
// metrics, Ctrl-C.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "colrow/runtime/placement.h"

namespace colrow {

struct TrainOptions {
  std::string model = "gpt2-tiny";  // a preset, or a directory with config.json
  std::string data;  // token file (.bin / llm.c header) or text (.txt, .gz); "" = the Jargon File
  int64_t steps = 200;     // counted from the start of training, also when resuming
  int64_t stop_after = 0;  // > 0: save and stop after this step, as if interrupted
                           // (Megatron's --exit-interval); the schedule still spans steps
  int64_t seq_len = 128;
  int64_t batch = 8;  // sequences per dp rank per micro-batch
  int64_t grad_accum = 1;
  double lr = 1e-3;
  double min_lr = -1.0;  // < 0: lr / 10
  int64_t warmup = -1;   // < 0: steps / 20
  double weight_decay = 0.1;
  double grad_clip = 1.0;
  uint64_t seed = 1337;
  int tp = 0;                  // 0: world size / (pp x dp)
  int pp = 1;                  // pipeline stages (1F1B over grad_accum micro-batches)
  std::vector<int> pp_layers;  // layers per stage ({} = as even as it goes)
  int dp = 1;
  int zero = -1;                           // -1: 1 when dp > 1
  std::string grad_reduce_dtype = "fp32";  // what gradients cross dp ranks as: fp32 or bf16
  bool overlap_grad_reduce = false;        // start each bucket's dp reduction during backward
  int64_t ddp_bucket_size = -1;            // elements per gradient bucket; 0: one bucket; -1: one
                                           // bucket, or 25 MiB of fp32 with overlap (PyTorch DDP's)
  bool sequence_parallel = false;          // Megatron's: norms and residuals on tokens / tp rows
  bool recompute_activation = false;       // the MLP's activation made again in backward
  bool overlap_tp_backward = true;         // tp sums of backward during the weight GEMMs
  bool cuda_graph = false;                 // micro-batches replayed as CUDA graphs once warm
  int64_t logits_chunk_mib = 256;  // logits the output head holds at once (0: all tokens')
  std::string out;                         // run directory for checkpoints ("" = none)
  int64_t save_every = 0;                  // 0: only at the end
  std::string save_dtype = "fp32";  // model.safetensors' dtype; bf16 keeps fp32 masters beside
  int64_t eval_every = 0;           // 0: only at the end
  int64_t eval_windows = 64;        // validation windows per evaluation (0 = all)
  std::string metrics;              // JSONL file ("" = none)
  std::string resume;               // run or step directory to continue
  std::string init;                 // Hugging Face checkpoint to start from
  bool skip_nonfinite = false;      // a NaN/Inf gradient skips the step (counted), not the run
  int threads = 0;
  int64_t profile = 0;   // > 0: time each kernel operation over this many steps after the first
  DeviceOptions device;  // --device, --comm, --dtype and the kernel flags (runtime/placement.h)
};

// Returns the process exit status.
int run_training(const TrainOptions& options, const Launch& launch);

}  // namespace colrow
