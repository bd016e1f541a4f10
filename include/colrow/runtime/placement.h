// Where a run computes: the device (--device cpu|cuda), how tensors travel
// between ranks (--comm auto|mpi|shm on the CPU, auto|nccl|staged on a GPU), whether fp32 GEMMs
// may use TF32 (--tf32) and which attention kernel trains (--attention auto|fused|plain). Resolved
// once, before anything is allocated, identically on every rank, so a bad choice fails everywhere
// with one line.
#pragma once

#include <string>

#include "colrow/core/device.h"
#include "colrow/dist/communicator.h"
#include "colrow/dist/device_communicator.h"

namespace colrow {

// What the user asked for, as given on the command line.
struct DeviceOptions {
  std::string device = "cpu";      // cpu | cuda | cuda:N
  std::string comm = "auto";       // auto | mpi | shm (CPU) | nccl | staged (GPU)
  bool tf32 = false;               // allow TF32 in fp32 GEMMs (GPUs only)
  bool deterministic = false;      // the same bits at any thread count (CPU only)
  std::string attention = "auto";  // auto | fused | plain: the causal attention kernel
  std::string attention_backward = "recompute";  // recompute | ordered: the fused bf16 dQ (GPUs)
  std::string epilogues = "fused";               // fused | separate: GEMM epilogues (GPUs)
  std::string dtype = "fp32";   // fp32 | bf16: the layers' compute dtype (mixed precision)
  double comm_timeout = 600.0;  // seconds a host wait for a GPU may last (core/host_wait.h)
};

// The resolved choice.
struct Placement {
  Device device;
  CommKind comm = CommKind::kAuto;
  bool tf32 = false;
  DType dtype = DType::kF32;  // GptModel::set_compute_dtype
};

// This process in the job: the world, and its place among the ranks of its node.
struct Launch {
  Communicator& world;
  int local_rank = 0;
  int local_ranks = 1;
};

// Parses and checks `options`; "cuda" picks GPU local_rank mod the GPUs
// visible. ConfigError (never a silent CPU run) when a GPU is asked for and
// none can be used, --tf32 is given for the CPU, or --attention names no
// kernel the device has, or --comm-timeout is not a positive number of seconds.
// Applies the TF32, attention and timeout choices.
Placement resolve_placement(const DeviceOptions& options, int local_rank);

// Peak dense FLOP/s of `device` for GEMMs in the placement's dtype (fp32:
// TF32 when allowed), the denominator of MFU; 0 when unknown (the CPU).
double peak_flops(const Placement& placement);

}  // namespace colrow
