// `colrow generate`: text from a checkpoint at any tp x pp x dp with a per-rank KV
// cache (infer/generator.h); one prompt, or a file of prompts decoded
// together. The prompt and the output in the byte-level tokenizer (token id =
// byte value), or GPT-2's BPE when the checkpoint directory has its files.
#pragma once

#include <cstdint>
#include <string>

#include "colrow/infer/sampling.h"
#include "colrow/runtime/placement.h"

namespace colrow::apps {

struct GenerateOptions {
  std::string model;    // checkpoint directory: config.json + model.safetensors
  std::string prompt;   // text, tokenized with the checkpoint's tokenizer (else bytes)
  std::string prompts;  // or a file: one prompt per line (empty lines skipped), decoded together
  int64_t max_new_tokens = 64;
  float temperature = 1.0f;  // 0: greedy
  int64_t top_k = 0;         // 0: off
  float top_p = 1.0f;        // 1: off
  uint64_t seed = 0;
  bool ignore_eos = false;  // keep going past config.json's eos_token_id
  int tp = 0;               // 0: world size / (pp x dp)
  int pp = 1;               // pipeline stages (layers split evenly), the token passed along
  int dp = 1;               // every dp replica generates the same text; rank 0 prints it
  int threads = 0;          // per rank; 0: cores / ranks on the node
  bool json = false;
  DeviceOptions device;  // --device, --comm, --dtype and the kernel flags (apps/device_flags.h)
};

// The sampling the flags ask for.
inline SamplingOptions sampling_options(const GenerateOptions& o) {
  SamplingOptions sampling;
  sampling.temperature = o.temperature;
  sampling.top_k = o.top_k;
  sampling.top_p = o.top_p;
  return sampling;
}

// Returns the process exit status.
int run_generate(const GenerateOptions& options, const Launch& launch);

}  // namespace colrow::apps
