// Device: where a tensor's storage lives, the CPU or one CUDA GPU ("cuda:N").
// A CPU-only build knows the name "cuda" but has no GPU behind it: asking for
// one is a ConfigError that says how to rebuild, never a silent CPU run.
#pragma once

#include <string>

namespace colrow {

struct Device {
  enum class Kind { kCpu, kCuda };
  Kind kind = Kind::kCpu;
  int index = 0;  // the GPU's ordinal for kCuda; 0 for the CPU

  static Device cpu() { return {Kind::kCpu, 0}; }
  static Device cuda(int index = 0) { return {Kind::kCuda, index}; }
  bool is_cpu() const { return kind == Kind::kCpu; }
  bool is_cuda() const { return kind == Kind::kCuda; }
  // "cpu" or "cuda:N".
  std::string str() const;
  bool operator==(const Device& other) const { return kind == other.kind && index == other.index; }
  bool operator!=(const Device& other) const { return !(*this == other); }
};

// "cpu" | "cuda" | "cuda:N". ConfigError naming the text otherwise.
Device parse_device(const std::string& text);

// Whether this build has the CUDA backend (configured with COLROW_CUDA=ON).
bool cuda_built();
// GPUs visible to this process; 0 without the CUDA backend, a driver or a GPU.
int cuda_device_count();
// The GPU for one of `local_ranks` ranks on this node: local_rank mod count.
// ConfigError, before anything is allocated, when there is none; the message
// says why (not built with CUDA, no driver, no GPU) and how to fix it.
Device cuda_device_for(int local_rank);
// Waits for every queued operation on `device` (no-op on the CPU).
void synchronize(Device device);

}  // namespace colrow
