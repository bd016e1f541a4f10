// Time per kernel operation, for `colrow train --profile N`. Every call
// through kernels/ops.h opens an OpScope: on a GPU it queues two CUDA events
// around the call on the compute stream (no synchronization, so the step runs
// as it would unprofiled); on the CPU, which computes synchronously, it reads
// the wall clock. Off by default, when a scope costs one branch. Operations
// are issued from one thread, as everywhere in colrow.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "colrow/core/device.h"

namespace colrow::kernels {

// What one call does, for a rate: the floating-point operations of its
// products (GEMMs and attention: 2 per multiply-add, the causal triangle only),
// and the bytes of its operands, each read or written once (a lower bound on
// its memory traffic, as achieved-bandwidth figures count it).
struct OpWork {
  double flops = 0.0;
  double bytes = 0.0;
};

// One operation's total since the last take_op_times().
struct OpTime {
  std::string op;  // the kernels/ops.h function
  int64_t calls = 0;
  double ms = 0.0;
  OpWork work;  // summed over the calls
};

void set_op_profiling(bool on);
bool op_profiling();

// Times one operation from construction to destruction while profiling is on.
class OpScope {
 public:
  OpScope(const char* op, Device device, OpWork work = {});
  ~OpScope();
  OpScope(const OpScope&) = delete;
  OpScope& operator=(const OpScope&) = delete;

 private:
  const char* op_ = nullptr;  // null: profiling is off
  Device device_;
  OpWork work_;
  double cpu_start_ms_ = 0.0;
  void* start_ = nullptr;  // GPU: the event before the call
};

// Waits for the GPU work timed since the last call, and returns each
// operation's calls and time, largest time first. Starts counting again.
std::vector<OpTime> take_op_times();

// The phase an operation belongs to: gemm (with the linear layers' fused
// bias epilogues), attention, norms and elementwise, loss, optimizer,
// communication (the mesh's collectives and messages), or other.
std::string op_phase(const std::string& op);

}  // namespace colrow::kernels
