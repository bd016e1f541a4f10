// BlockCache (core/block_cache.h), the free lists behind the host and CUDA
// caching allocators: sizes rounded to 512 bytes, and to 2 MiB above 1 MiB;
// a block is taken back only at its exact rounded size, the one freed last
// first; release_all hands every cached block over once and forgets them.
#include "core/block_cache.h"

#include <gtest/gtest.h>

#include <cstddef>
#include <cstdint>
#include <set>
#include <utility>

namespace colrow {
namespace {

void* address(uintptr_t a) {
  return reinterpret_cast<void*>(a);
}

TEST(BlockCacheTest, RoundsSmallSizesTo512BytesAndLargeOnesTo2MiB) {
  EXPECT_EQ(BlockCache::rounded(0), 512u);
  EXPECT_EQ(BlockCache::rounded(1), 512u);
  EXPECT_EQ(BlockCache::rounded(512), 512u);
  EXPECT_EQ(BlockCache::rounded(513), 1024u);
  EXPECT_EQ(BlockCache::rounded(size_t{1} << 20), size_t{1} << 20);  // still small
  EXPECT_EQ(BlockCache::rounded((size_t{1} << 20) + 1), size_t{2} << 20);
  EXPECT_EQ(BlockCache::rounded((size_t{2} << 20) + 1), size_t{4} << 20);
}

TEST(BlockCacheTest, TakesTheBlockFreedLastOfExactlyItsSize) {
  BlockCache cache;
  EXPECT_EQ(cache.take(512), nullptr);
  cache.put(512, address(0x1000));
  cache.put(1024, address(0x2000));
  cache.put(512, address(0x3000));
  EXPECT_EQ(cache.take(1536), nullptr);  // no other size serves it
  EXPECT_EQ(cache.take(512), address(0x3000));
  EXPECT_EQ(cache.take(512), address(0x1000));
  EXPECT_EQ(cache.take(512), nullptr);
  EXPECT_EQ(cache.take(1024), address(0x2000));
}

TEST(BlockCacheTest, ReleaseAllHandsEachBlockOverOnceAndForgetsThem) {
  BlockCache cache;
  cache.put(512, address(0x1000));
  cache.put(512, address(0x3000));
  cache.put(size_t{2} << 20, address(0x5000));
  std::set<std::pair<void*, size_t>> released;
  cache.release_all([&](void* p, size_t size) { EXPECT_TRUE(released.insert({p, size}).second); });
  EXPECT_EQ(released, (std::set<std::pair<void*, size_t>>{{address(0x1000), 512},
                                                          {address(0x3000), 512},
                                                          {address(0x5000), size_t{2} << 20}}));
  EXPECT_EQ(cache.take(512), nullptr);
  EXPECT_EQ(cache.take(size_t{2} << 20), nullptr);
}

}  // namespace
}  // namespace colrow
