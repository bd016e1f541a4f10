// `colrow bench decode`: incremental decoding with the KV cache at any tp.
// Prefills `batch` random prompts of prompt_len tokens, then decodes
// new_tokens steps (greedy, one token per sequence per step) and reports
// prefill tokens/s, the median ms per step, the ms per step at the start and
// at the end of the context, and the memory-bandwidth floor: the bytes of
// weights and KV cache a step reads, over a read bandwidth measured in the
// same run with every rank reading at once.
#pragma once

#include <cstdint>
#include <string>

#include "colrow/runtime/placement.h"

namespace colrow::apps {

struct DecodeBenchOptions {
  std::string model = "gpt2-124m";  // a preset (random weights) or a checkpoint directory
  int64_t prompt_len = 128;
  int64_t new_tokens = 128;
  int64_t batch = 1;
  int tp = 0;       // 0: world size
  int threads = 0;  // per rank; 0: cores / ranks on the node
  uint64_t seed = 1234;
  bool json = false;
  DeviceOptions device;  // --device, --comm, --dtype and the kernel flags (apps/device_flags.h)
};

// Returns the process exit status.
int run_decode_bench(const DecodeBenchOptions& options, const Launch& launch);

}  // namespace colrow::apps
