// Devices and the CPU allocator; GPU ones come from core/*/device_runtime.
#include <algorithm>
#include <cstdlib>
#include <string>
#include <utility>
#include <vector>

#include "colrow/core/allocator.h"
#include "colrow/core/error.h"
#include "core/device_runtime.h"

namespace colrow {
namespace {

constexpr size_t kAlignment = 64;  // one cache line; what AVX-512 loads like

class CpuAllocator final : public Allocator {
 public:
  Device device() const override { return Device::cpu(); }

  void* allocate(size_t bytes) override {
    const size_t rounded = (std::max<size_t>(bytes, 1) + kAlignment - 1) / kAlignment * kAlignment;
    void* p = std::aligned_alloc(kAlignment, rounded);
    if (p == nullptr) {
      throw BackendError("[tensor] allocation of " + std::to_string(bytes) +
                         " bytes failed on the cpu" + MemoryPhase::describe_current() +
                         ". Reduce the model or batch size, or add ranks.");
    }
    counter_.allocated(bytes);
    return p;
  }

  void deallocate(void* p, size_t bytes) override {
    std::free(p);
    counter_.freed(bytes);
  }

  size_t bytes_in_use() const override { return counter_.in_use(); }
  size_t peak_bytes_in_use() const override { return counter_.peak(); }

 private:
  AllocationCounter counter_;
};

thread_local std::vector<std::string> t_phases;

}  // namespace

MemoryPhase::MemoryPhase(std::string name) { t_phases.push_back(std::move(name)); }
MemoryPhase::~MemoryPhase() { t_phases.pop_back(); }

std::string MemoryPhase::describe_current() {
  if (t_phases.empty()) return "";
  std::string text = " while allocating for ";
  for (size_t i = 0; i < t_phases.size(); ++i) text += (i > 0 ? " > " : "") + t_phases[i];
  return text;
}

std::string Device::str() const {
  return is_cpu() ? std::string("cpu") : "cuda:" + std::to_string(index);
}

Device parse_device(const std::string& text) {
  if (text == "cpu") return Device::cpu();
  if (text == "cuda") return Device::cuda(0);
  if (text.rfind("cuda:", 0) == 0 && text.size() > 5 &&
      text.find_first_not_of("0123456789", 5) == std::string::npos && text.size() < 10) {
    return Device::cuda(std::stoi(text.substr(5)));
  }
  throw ConfigError("[device] device (" + text + ") must be cpu, cuda or cuda:N.");
}

bool cuda_built() {
  return device_runtime::built();
}

int cuda_device_count() {
  return device_runtime::device_count();
}

Device cuda_device_for(int local_rank) {
  const int count = device_runtime::device_count();
  if (count == 0) {
    throw ConfigError("[device] device (cuda) needs a GPU, but " +
                      device_runtime::unavailable_reason() +
                      ". Run on a machine with an NVIDIA GPU, or use --device cpu.");
  }
  return Device::cuda(local_rank % count);
}

void synchronize(Device device) {
  if (device.is_cuda()) device_runtime::synchronize(device.index);
}

Allocator& allocator_for(Device device) {
  static CpuAllocator cpu;
  if (device.is_cpu()) return cpu;
  return device_runtime::allocator(device.index);
}

}  // namespace colrow
