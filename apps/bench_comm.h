// `colrow bench comm`: the collectives tensor parallelism runs (all_reduce,
// all_gather, reduce_scatter; fp32 sum) over every rank launched, at sizes
// from --min-bytes to --max-bytes, in the form of nccl-tests: time, algbw
// (bytes / time) and busbw (algbw x the ring's traffic factor, 2(R-1)/R for
// all_reduce and (R-1)/R for the others, comparable across rank counts), and
// #wrong, the elements that differ from the exact answer of a checking run on
// small-integer data. Shared memory and Open MPI run side by side in the same
// job, with the speedup of the first over the second. --dtype bf16 times the
// bf16 wire's sums (all_reduce, reduce_scatter: Communicator's *_bf16_wire,
// what --grad-reduce-dtype bf16 runs), 2-byte elements.
#pragma once

#include <cstdint>
#include <string>

#include "colrow/runtime/placement.h"

namespace colrow::apps {

struct CommBenchOptions {
  int64_t min_bytes = 1024;
  int64_t max_bytes = int64_t{64} << 20;
  int step_factor = 2;
  std::string ops;             // comma-separated; "" = every collective of the dtype
  std::string dtype = "fp32";  // fp32, or bf16: the bf16 wire's sums
  std::string comm = "auto";   // auto: shm and mpi side by side; shm or mpi: that one only
  int iterations = 20;
  int warmup = 5;
  int threads = 0;  // per rank; 0: cores / ranks on the node
  bool json = false;
};

// Returns the process exit status: 1 when any result was wrong.
int run_comm_bench(const CommBenchOptions& options, const Launch& launch);

}  // namespace colrow::apps
