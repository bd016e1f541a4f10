// Devices and the CPU allocator; GPU ones come from core/*/device_runtime.
#include <sys/mman.h>

#include <algorithm>
#include <cstdlib>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/asan_interface.h>
#endif

#include "colrow/core/allocator.h"
#include "colrow/core/error.h"
#include "core/block_cache.h"
#include "core/device_runtime.h"

namespace colrow {
namespace {

constexpr size_t kAlignment = 64;              // one cache line; what AVX-512 loads like
constexpr size_t kHugePage = size_t{2} << 20;  // x86-64's transparent huge page

// Under AddressSanitizer, the bytes a block holds past what its tensor asked
// for (the rounding) and a cached block's whole extent are poisoned, so that a
// kernel reading past its tensor, or into a freed one the cache keeps, fails
// there as it would past a malloc of the exact size. Elsewhere these are no-ops.
void make_addressable(void* p, size_t bytes, size_t held) {
#if defined(__SANITIZE_ADDRESS__)
  ASAN_UNPOISON_MEMORY_REGION(p, bytes);
  ASAN_POISON_MEMORY_REGION(static_cast<char*>(p) + bytes, held - bytes);
#else
  (void)p, (void)bytes, (void)held;
#endif
}
void make_unaddressable(void* p, size_t held) {
#if defined(__SANITIZE_ADDRESS__)
  ASAN_POISON_MEMORY_REGION(p, held);
#else
  (void)p, (void)held;
#endif
}
void release(void* p, size_t held) {
#if defined(__SANITIZE_ADDRESS__)
  ASAN_UNPOISON_MEMORY_REGION(p, held);  // free() is the sanitizer's to check
#else
  (void)held;
#endif
  std::free(p);
}

// Host memory. Blocks above BlockCache::kLargeBlock are huge-page aligned,
// advised to be backed by huge pages (fewer faults and TLB misses in the GEMMs
// that stream them) and cached when freed (see core/block_cache.h); smaller
// ones go to malloc, whose arenas already reuse them.
class CpuAllocator final : public Allocator {
 public:
  // The cached blocks go back at exit too: nothing then still points to them,
  // so LeakSanitizer would count them as leaks (and they are not).
  ~CpuAllocator() override { cache_.release_all(release); }

  Device device() const override { return Device::cpu(); }

  void* allocate(size_t bytes) override {
    if (bytes > BlockCache::kLargeBlock) return allocate_large(bytes);
    const size_t size = aligned_size(bytes);
    void* p = std::aligned_alloc(kAlignment, size);
    if (p == nullptr) throw out_of_memory(bytes);
    make_addressable(p, bytes, size);
    counter_.allocated(size);
    return p;
  }

  void deallocate(void* p, size_t bytes) override {
    if (bytes > BlockCache::kLargeBlock) {
      const size_t size = BlockCache::rounded(bytes);
      std::lock_guard<std::mutex> lock(mutex_);
      make_unaddressable(p, size);
      cache_.put(size, p);
      counter_.freed(size);
      return;
    }
    release(p, aligned_size(bytes));
    counter_.freed(aligned_size(bytes));
  }

  size_t bytes_in_use() const override { return counter_.in_use(); }
  size_t peak_bytes_in_use() const override { return counter_.peak(); }
  size_t allocation_count() const override { return counter_.allocations(); }

 private:
  static size_t aligned_size(size_t bytes) {
    return (std::max<size_t>(bytes, 1) + kAlignment - 1) / kAlignment * kAlignment;
  }

  static BackendError out_of_memory(size_t bytes) {
    return BackendError("[tensor] allocation of " + std::to_string(bytes) +
                        " bytes failed on the cpu" + MemoryPhase::describe_current() +
                        ". Reduce the model or batch size, or add ranks.");
  }

  void* allocate_large(size_t bytes) {
    const size_t size = BlockCache::rounded(bytes);
    std::lock_guard<std::mutex> lock(mutex_);
    void* p = cache_.take(size);
    if (p == nullptr) {
      p = std::aligned_alloc(kHugePage, size);
      if (p == nullptr) {  // the cache may hold what is missing
        cache_.release_all(release);
        p = std::aligned_alloc(kHugePage, size);
        if (p == nullptr) throw out_of_memory(bytes);
      }
      madvise(p, size, MADV_HUGEPAGE);  // advice only: without THP it is ignored
    }
    make_addressable(p, bytes, size);
    counter_.allocated(size);
    return p;
  }

  std::mutex mutex_;  // guards cache_
  BlockCache cache_;
  AllocationCounter counter_;  // bytes held by tensors, as rounded
};

thread_local std::vector<std::string> t_phases;

}  // namespace

MemoryPhase::MemoryPhase(std::string name) {
  t_phases.push_back(std::move(name));
}
MemoryPhase::~MemoryPhase() {
  t_phases.pop_back();
}

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
