// --device, --comm and --tf32 resolved up front (see placement.h).
#include "colrow/runtime/placement.h"

#include "colrow/core/error.h"
#include "core/host_wait.h"
#include "kernels/backend.h"

namespace colrow {

namespace {

kernels::AttentionKernel parse_attention_kernel(const std::string& text) {
  if (text == "auto") return kernels::AttentionKernel::kAuto;
  if (text == "fused") return kernels::AttentionKernel::kFused;
  if (text == "plain") return kernels::AttentionKernel::kPlain;
  throw ConfigError("[attention] attention (" + text +
                    ") must be auto, fused or plain. Use --attention auto (the fused kernel "
                    "where it applies).");
}

kernels::AttentionBackward parse_attention_backward(const std::string& text) {
  if (text == "recompute") return kernels::AttentionBackward::kRecompute;
  if (text == "ordered") return kernels::AttentionBackward::kOrdered;
  throw ConfigError("[attention] attention-backward (" + text +
                    ") must be recompute or ordered. Use --attention-backward recompute (dQ in a "
                    "kernel of its own).");
}

bool parse_epilogues(const std::string& text) {
  if (text == "fused") return true;
  if (text == "separate") return false;
  throw ConfigError("[device] epilogues (" + text +
                    ") must be fused or separate. Use --epilogues fused (the bias and GELU in "
                    "the GEMM where the GPU can).");
}

}  // namespace

Placement resolve_placement(const DeviceOptions& options, int local_rank) {
  Placement p;
  const Device asked = parse_device(options.device);
  p.comm = parse_comm_kind(options.comm);
  if (asked.is_cuda()) {
    const Device gpu = cuda_device_for(local_rank);  // ConfigError when there is none
    // An explicit cuda:N pins the device; plain "cuda" spreads ranks over GPUs.
    p.device = options.device == "cuda" ? gpu : asked;
    if (p.device.index >= cuda_device_count()) {
      throw ConfigError("[device] device (" + options.device +
                        ") does not exist: " + std::to_string(cuda_device_count()) +
                        " GPU(s) are visible. Use --device cuda to spread ranks over them.");
    }
  } else {
    p.device = asked;
  }
  check_comm_kind(p.comm, p.device);
  set_host_wait_timeout(options.comm_timeout);
  p.tf32 = options.tf32;
  p.dtype = parse_dtype("--dtype", options.dtype);
  kernels::backend_for(p.device).set_allow_tf32(p.tf32);
  kernels::backend_for(p.device).set_deterministic(options.deterministic);
  kernels::backend_for(p.device).set_attention_kernel(parse_attention_kernel(options.attention));
  kernels::backend_for(p.device).set_attention_backward(
      parse_attention_backward(options.attention_backward));
  kernels::backend_for(p.device).set_fused_epilogues(parse_epilogues(options.epilogues));
  return p;
}

double peak_flops(const Placement& placement) {
  return kernels::backend_for(placement.device).peak_flops(placement.device, placement.dtype);
}

}  // namespace colrow
