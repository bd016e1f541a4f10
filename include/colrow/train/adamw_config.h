// AdamW's hyperparameters and their checks, apart from the optimizer so that
// the flag checks (train's plan, the CLI fuzzer) need no kernels.
#pragma once

#include <cstdint>
#include <functional>

#include "colrow/core/dtype.h"
#include "colrow/nn/parameter.h"

namespace colrow {

// nanoGPT's rule: decay matrices (2-d weights, embeddings included), not
// norm gains or biases (1-d).
bool decays_matrices(const Parameter& p);

struct AdamWConfig {
  float beta1 = 0.9f;
  float beta2 = 0.95f;
  float eps = 1e-8f;
  float weight_decay = 0.1f;
  float grad_clip = 1.0f;  // max global norm; <= 0 disables clipping
  int zero = 0;            // 0: every dp rank updates everything; 1: ZeRO-1
  // What the gradients cross dp ranks as (--grad-reduce-dtype): fp32, or bf16
  // for half the bytes, each rank's gradients rounded to bf16 and their sum
  // rounded again (Communicator's bf16 wire). Nothing is rounded at dp 1.
  DType grad_reduce_dtype = DType::kF32;
  // Gradient buckets over dp (Megatron's --ddp-bucket-size, PyTorch DDP's
  // bucket_cap_mb): whole parameters, gathered from the end of the list
  // (where backward starts) until a bucket holds at least this many elements;
  // each bucket is reduced by its own collective and, under ZeRO-1, split
  // over the dp ranks on its own. 0: one bucket of everything.
  int64_t bucket_size = 0;
  // --overlap-grad-reduce: each bucket's dp collective starts as soon as
  // backward has reported its parameters' gradients final
  // (AdamW::grads_ready), while backward goes on, as Megatron and llm.c do.
  // Off: every bucket is reduced in step().
  bool overlap_grad_reduce = false;
  // Which parameters weight decay applies to.
  std::function<bool(const Parameter&)> decays = decays_matrices;
};

// Pure check, identical on every rank: betas in [0, 1), eps > 0,
// weight_decay >= 0, zero in {0, 1}, bucket_size >= 0. ConfigError naming the field otherwise.
void validate(const AdamWConfig& config);

}  // namespace colrow
