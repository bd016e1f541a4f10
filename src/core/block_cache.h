// BlockCache: the free lists behind colrow's caching allocators (host and
// CUDA). A training step frees and allocates the same sizes every step; giving
// a freed block back out, instead of returning it to the system, saves the
// system call and, on the host, the page faults that zero every new page:
// 8192 faults per 32 MiB activation, which contend on the process's memory
// map lock and stopped the MLP from scaling past a few threads. Sizes are
// rounded so that near sizes share blocks. Not thread-safe: its allocator
// holds the lock.
#pragma once

#include <algorithm>
#include <cstddef>
#include <iterator>
#include <map>

namespace colrow {

class BlockCache {
 public:
  static constexpr size_t kSmallRound = 512;              // bytes
  static constexpr size_t kLargeBlock = size_t{1} << 20;  // above this ...
  static constexpr size_t kLargeRound = size_t{2} << 20;  // ... round to 2 MiB (a huge page)

  // The size a request of `bytes` is served with: what the allocator holds.
  static size_t rounded(size_t bytes) {
    const size_t unit = bytes > kLargeBlock ? kLargeRound : kSmallRound;
    return (std::max<size_t>(bytes, 1) + unit - 1) / unit * unit;
  }

  // A cached block of exactly `size` (a rounded size), or nullptr: the one
  // freed last (emplace puts it at the end of its size's range), whose pages
  // are the likeliest to be in cache and mapped.
  void* take(size_t size) {
    const auto range = free_.equal_range(size);
    if (range.first == range.second) return nullptr;
    const auto cached = std::prev(range.second);
    void* p = cached->second;
    free_.erase(cached);
    return p;
  }

  void put(size_t size, void* p) { free_.emplace(size, p); }

  // Hands every cached block to release(p, size) and forgets it.
  template <typename Release>
  void release_all(Release release) {
    for (auto& [size, p] : free_) release(p, size);
    free_.clear();
  }

 private:
  std::multimap<size_t, void*> free_;  // rounded size -> block
};

}  // namespace colrow
