// `colrow generate`: text from a checkpoint at any tp x dp, one new token per
// whole-sequence forward (no KV cache yet), the prompt and the output in the
// byte-level tokenizer (token id = byte value).
#pragma once

#include <cstdint>
#include <string>

#include "colrow/runtime/placement.h"

namespace colrow::apps {

struct GenerateOptions {
  std::string model;   // checkpoint directory: config.json + model.safetensors
  std::string prompt;  // text, tokenized byte by byte
  int64_t max_new_tokens = 64;
  float temperature = 1.0f;  // 0: greedy
  int64_t top_k = 0;         // 0: off
  float top_p = 1.0f;        // 1: off
  uint64_t seed = 0;
  int tp = 0;       // 0: world size / dp
  int dp = 1;       // every dp replica generates the same text; rank 0 prints it
  int threads = 0;  // per rank; 0: cores / ranks on the node
  bool json = false;
  DeviceOptions device;  // --device, --comm, --tf32
};

// Returns the process exit status.
int run_generate(const GenerateOptions& options, const Launch& launch);

}  // namespace colrow::apps
