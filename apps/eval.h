// `colrow eval`: the mean cross-entropy and perplexity of a checkpoint over the
// consecutive, non-overlapping windows of a token file, at any tp x pp x dp.
#pragma once

#include <cstdint>
#include <string>

#include "colrow/runtime/placement.h"

namespace colrow::apps {

struct EvalOptions {
  std::string model;   // checkpoint directory: config.json + model.safetensors
  std::string tokens;  // token file (raw uint16, or llm.c's header)
  int64_t seq_len = 0;
  int64_t batch = 4;  // windows per forward pass, per dp rank
  int tp = 0;         // 0: world size / (pp x dp)
  int pp = 1;         // pipeline stages, layers split evenly
  int dp = 1;
  int threads = 0;  // per rank; 0: cores / ranks on the node
  bool json = false;
  DeviceOptions device;  // --device, --comm, --dtype and the kernel flags (apps/device_flags.h)
};

// Returns the process exit status.
int run_eval(const EvalOptions& options, const Launch& launch);

}  // namespace colrow::apps
