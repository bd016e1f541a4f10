// The flags of the verbs that compute (train, eval, generate, bench mlp,
// bench decode), for where and how they run: --device, --comm,
// --comm-timeout, --tf32, --attention, --attention-backward, --epilogues,
// --deterministic, --dtype.
#pragma once

#include <CLI/CLI.hpp>

#include "colrow/runtime/placement.h"

namespace colrow::apps {

inline void add_device_flags(CLI::App& verb, DeviceOptions& o) {
  verb.add_option("--device", o.device,
                  "Where to compute: cpu, cuda (GPU = local rank mod GPUs) "
                  "or cuda:N")
      ->capture_default_str();
  verb.add_option("--comm", o.comm,
                  "How tensors cross ranks. CPU: auto (shared memory among ranks on one node, "
                  "Open MPI across nodes), shm or mpi. GPU: auto (NCCL when each rank has "
                  "its own GPU, host-staged MPI otherwise), nccl or staged")
      ->capture_default_str();
  verb.add_option("--comm-timeout", o.comm_timeout,
                  "Seconds a wait for the GPU may last before the run stops with an error "
                  "instead of hanging (a collective whose other ranks never came: a rank that "
                  "stopped, a network fault); NCCL's asynchronous errors end it at once")
      ->capture_default_str();
  verb.add_flag("--tf32", o.tf32, "Allow TF32 tensor cores in fp32 GEMMs (GPU; off by default)");
  verb.add_option("--attention", o.attention,
                  "Causal attention kernel: auto (the fused one where it applies: GPU, head_dim "
                  "up to 128; else the plain one, which stores the probabilities), fused or plain")
      ->capture_default_str();
  verb.add_option("--attention-backward", o.attention_backward,
                  "dQ in the fused bf16 attention's backward (GPU, tensor cores): recompute (a "
                  "kernel of its own over query tiles, which computes S and dP again) or ordered "
                  "(the dK, dV kernel adds each key tile's share into fp32 sums, in key-tile "
                  "order: two products fewer, a [batch, heads, seq, head_dim] fp32 scratch). "
                  "Both give the same bits run after run")
      ->capture_default_str();
  verb.add_option("--epilogues", o.epilogues,
                  "GEMM epilogues: fused (the bias, its gradient, GELU and its derivative "
                  "inside cuBLASLt's GEMMs, where the GPU can) or separate (the GEMM, then "
                  "element-wise kernels; the CPU always works this way)")
      ->capture_default_str();
  verb.add_flag("--deterministic", o.deterministic,
                "The same bits at any number of threads per rank: GEMMs in fixed blocks, one "
                "thread each (CPU; a few percent slower). Without it, runs are bitwise "
                "repeatable at a fixed thread count");
  verb.add_option("--dtype", o.dtype,
                  "Compute dtype: fp32, or bf16 (mixed precision: the layers compute with bf16 "
                  "copies of the fp32 weights and keep bf16 activations; norm statistics, "
                  "softmax, the loss, gradients and AdamW stay fp32)")
      ->capture_default_str();
}

}  // namespace colrow::apps
