// `colrow bench mlp`: verify the tensor-parallel MLP against the unsharded one,
// then time forward and forward+backward and compare the achieved rate with
// the same GEMMs as plain ops::gemm calls (sgemm, or cuBLAS/cuBLASLt on a GPU)
// of the same shapes, device and dtype on the same rank.
#pragma once

#include <cstdint>
#include <string>

#include "colrow/nn/mlp_config.h"
#include "colrow/runtime/placement.h"

namespace colrow::apps {

struct MlpBenchOptions {
  int64_t d_model = 1024;
  int64_t tokens = 2048;
  int64_t ffn_hidden_size = 0;  // 0: 4 * d_model
  std::string activation = "gelu";
  bool bias = true;
  int tp = 0;  // 0: world size / dp
  int dp = 1;
  int threads = 0;  // per rank; 0: cores / ranks on the node
  double min_seconds = 2.0;
  int min_iterations = 5;
  int verify_tokens = 64;
  uint64_t seed = 1234;
  bool json = false;
  DeviceOptions device;  // --device, --comm, --dtype and the kernel flags (apps/device_flags.h)
};

// The layer the flags describe.
inline MlpConfig mlp_config(const MlpBenchOptions& o) {
  MlpConfig config;
  config.d_model = o.d_model;
  config.ffn_hidden_size = o.ffn_hidden_size > 0 ? o.ffn_hidden_size : 4 * o.d_model;
  config.activation = parse_activation(o.activation);
  config.bias = o.bias;
  config.seed = o.seed;
  return config;
}

// Returns the process exit status.
int run_mlp_bench(const MlpBenchOptions& options, const Launch& launch);

}  // namespace colrow::apps
