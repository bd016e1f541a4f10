// The fibers and warp instructions of warp_emulation.h. One block at a time:
// its threads are fibers that a scheduler resumes in thread order; a fiber
// runs until it waits at a barrier (its block's, or its warp's for an
// exchange) or ends. A barrier opens when all its threads have arrived; a
// pass over the fibers in which none arrives anywhere or ends is a deadlock.
// launch_independent has no fibers: each thread is a plain call, and
// anything that would make threads meet refuses to run there.
#include "support/warp_emulation.h"

#include <ucontext.h>

#include <algorithm>
#include <array>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "colrow/core/error.h"

#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/common_interface_defs.h>
#define COLROW_FIBERS_UNDER_ASAN 1
#endif

namespace colrow::testing::emulation {
namespace {

constexpr int kWarp = 32;
constexpr size_t kStackBytes = 256 * 1024;

struct Barrier {
  int arrived = 0;
  uint64_t generation = 0;
};

// What the lanes of one warp hand each other at an exchange.
struct WarpSlots {
  Barrier barrier;
  std::array<uint64_t, kWarp> bits{};
  std::array<std::array<uint32_t, 4>, kWarp> a{};
  std::array<std::array<uint32_t, 2>, kWarp> b{};
  std::array<const uint16_t*, kWarp> rows{};
};

struct Fiber {
  ucontext_t context{};
  std::unique_ptr<char[]> stack;
  ThreadIndices indices{};
  int linear = 0;  // x + y bx + z bx by: warps are 32 consecutive of these
  bool done = false;
};

struct Block {
  const std::function<void()>* kernel = nullptr;
  std::vector<Fiber> fibers;
  std::vector<WarpSlots> warps;
  Barrier barrier;
  std::vector<char> shared;  // 128 bytes of slack for the alignment
  char* shared_base = nullptr;
  // Static shared arrays by their declaration's place, made afresh per block.
  std::map<std::pair<std::string, int>, std::vector<double>> statics;
  int running = -1;
  uint64_t progress = 0;  // arrivals and ends
  ucontext_t scheduler{};
  // AddressSanitizer's view of the stacks it switches between.
  const void* scheduler_stack = nullptr;
  size_t scheduler_stack_bytes = 0;
};

Block* g_block = nullptr;  // the block being run (one host thread runs it)
// The thread being run by launch_independent, or null.
const ThreadIndices* g_independent = nullptr;

// The block of the running thread, which must have been started by launch():
// `what` makes threads meet, which launch_independent cannot do.
Block& meeting_block(const char* what) {
  if (g_block == nullptr) {
    throw InternalError(std::string("[warp emulation] ") + what +
                        (g_independent != nullptr
                             ? " in a kernel run by launch_independent, whose threads never meet: "
                               "launch it with launch()"
                             : " outside a launch"));
  }
  return *g_block;
}

Fiber& running_fiber() {
  return g_block->fibers[g_block->running];
}

// Back to the scheduler, to be resumed later.
void yield() {
  Fiber& f = running_fiber();
#ifdef COLROW_FIBERS_UNDER_ASAN
  void* fake = nullptr;
  __sanitizer_start_switch_fiber(&fake, g_block->scheduler_stack, g_block->scheduler_stack_bytes);
#endif
  swapcontext(&f.context, &g_block->scheduler);
#ifdef COLROW_FIBERS_UNDER_ASAN
  __sanitizer_finish_switch_fiber(fake, &g_block->scheduler_stack, &g_block->scheduler_stack_bytes);
#endif
}

void wait_at(Barrier& barrier, int threads) {
  const uint64_t generation = barrier.generation;
  ++g_block->progress;
  if (++barrier.arrived == threads) {
    barrier.arrived = 0;
    ++barrier.generation;
    return;
  }
  while (barrier.generation == generation) yield();
}

WarpSlots& my_warp() {
  return meeting_block("a warp instruction").warps[running_fiber().linear / kWarp];
}
int my_lane() {
  return running_fiber().linear % kWarp;
}
void sync_warp() {
  wait_at(my_warp().barrier, kWarp);
}

void fiber_main() {
#ifdef COLROW_FIBERS_UNDER_ASAN
  __sanitizer_finish_switch_fiber(nullptr, &g_block->scheduler_stack,
                                  &g_block->scheduler_stack_bytes);
#endif
  (*g_block->kernel)();
  running_fiber().done = true;
  ++g_block->progress;
#ifdef COLROW_FIBERS_UNDER_ASAN
  __sanitizer_start_switch_fiber(nullptr, g_block->scheduler_stack, g_block->scheduler_stack_bytes);
#endif
  // Returning resumes uc_link, the scheduler.
}

void run_block(Block& block, unsigned threads) {
  for (unsigned t = 0; t < threads; ++t) {
    Fiber& f = block.fibers[t];
    f.done = false;
    getcontext(&f.context);
    f.context.uc_stack.ss_sp = f.stack.get();
    f.context.uc_stack.ss_size = kStackBytes;
    f.context.uc_link = &block.scheduler;
    makecontext(&f.context, fiber_main, 0);
  }
  int left = static_cast<int>(threads);
  while (left > 0) {
    const uint64_t before = block.progress;
    for (unsigned t = 0; t < threads; ++t) {
      Fiber& f = block.fibers[t];
      if (f.done) continue;
      block.running = static_cast<int>(t);
#ifdef COLROW_FIBERS_UNDER_ASAN
      void* fake = nullptr;
      __sanitizer_start_switch_fiber(&fake, f.stack.get(), kStackBytes);
#endif
      swapcontext(&block.scheduler, &f.context);
#ifdef COLROW_FIBERS_UNDER_ASAN
      __sanitizer_finish_switch_fiber(fake, nullptr, nullptr);
#endif
      if (f.done) --left;
    }
    if (left > 0 && block.progress == before) {
      throw InternalError(
          "[warp emulation] deadlock in block (" + std::to_string(block.fibers[0].indices.block.x) +
          ", " + std::to_string(block.fibers[0].indices.block.y) + "): " + std::to_string(left) +
          " threads wait at a barrier that the others never reach");
    }
  }
  block.running = -1;
}

// The bf16 bits `half` (0: low) of a 32-bit register, as a float.
float bf16_half(uint32_t reg, int half) {
  const uint32_t bits = ((reg >> (16 * half)) & 0xffffu) << 16;
  float value;
  std::memcpy(&value, &bits, sizeof value);
  return value;
}
uint32_t pack(uint16_t lo, uint16_t hi) {
  return static_cast<uint32_t>(lo) | (static_cast<uint32_t>(hi) << 16);
}

}  // namespace

const ThreadIndices& current() {
  if (g_independent != nullptr) return *g_independent;
  return running_fiber().indices;
}

int lane_of_current() {
  meeting_block("a warp shuffle");
  return my_lane();
}

char* dynamic_shared() {
  return meeting_block("shared memory").shared_base;
}

void* static_shared(const char* file, int line, size_t bytes) {
  std::vector<double>& array =
      meeting_block("shared memory").statics[{file, line}];  // doubles: aligned for any
  if (array.empty()) {
    array.resize((bytes + sizeof(double) - 1) / sizeof(double) + 1);
    std::memset(array.data(), 0x5a, array.size() * sizeof(double));  // not zeros, as a GPU's
  }
  return array.data();
}

void sync_block() {
  Block& block = meeting_block("__syncthreads()");
  wait_at(block.barrier, static_cast<int>(block.fibers.size()));
}

uint64_t exchange_in_warp(uint64_t bits, int from_lane) {
  WarpSlots& w = my_warp();
  w.bits[my_lane()] = bits;
  sync_warp();
  const uint64_t got = w.bits[from_lane];
  sync_warp();  // nobody writes again before every lane has read
  return got;
}

namespace {

unsigned threads_in(dim3 block) {
  return block.x * block.y * block.z;
}

// Every (block, thread) index of the grid in launch order: blocks x-fastest,
// and within a block threads x-fastest (so warps are consecutive x).
template <typename Visit>
void for_each_block(dim3 grid, Visit&& visit) {
  for (unsigned z = 0; z < grid.z; ++z) {
    for (unsigned y = 0; y < grid.y; ++y) {
      for (unsigned x = 0; x < grid.x; ++x) visit(uint3{x, y, z});
    }
  }
}
uint3 thread_at(dim3 block, unsigned linear) {
  return uint3{linear % block.x, linear / block.x % block.y, linear / (block.x * block.y)};
}

}  // namespace

void launch(dim3 grid, dim3 block_dim, int64_t shared_bytes, const std::function<void()>& kernel) {
  const unsigned threads = threads_in(block_dim);
  if (threads == 0 || threads % kWarp != 0) {
    throw InternalError("[warp emulation] blocks of whole warps only; got " +
                        std::to_string(threads) + " threads");
  }
  Block block;
  block.kernel = &kernel;
  block.fibers.resize(threads);
  for (Fiber& f : block.fibers) f.stack = std::make_unique<char[]>(kStackBytes);
  block.warps.resize(threads / kWarp);
  block.shared.resize(static_cast<size_t>(shared_bytes) + 128);
  const auto base = reinterpret_cast<uintptr_t>(block.shared.data());
  block.shared_base = block.shared.data() + ((128 - base % 128) % 128);
  g_block = &block;
  struct Clear {
    ~Clear() { g_block = nullptr; }
  } clear;
  for_each_block(grid, [&](uint3 at) {
    for (unsigned t = 0; t < threads; ++t) {
      block.fibers[t].indices = {thread_at(block_dim, t), at, block_dim, grid};
      block.fibers[t].linear = static_cast<int>(t);
    }
    // Every block starts from the pattern, not from the last block's data.
    std::fill(block.shared.begin(), block.shared.end(), static_cast<char>(0x5a));
    block.statics.clear();
    run_block(block, threads);
  });
}

void launch_independent(dim3 grid, dim3 block_dim, const std::function<void()>& kernel) {
  const unsigned threads = threads_in(block_dim);
  ThreadIndices indices{};
  g_independent = &indices;
  struct Clear {
    ~Clear() { g_independent = nullptr; }
  } clear;
  for_each_block(grid, [&](uint3 at) {
    for (unsigned t = 0; t < threads; ++t) {
      indices = {thread_at(block_dim, t), at, block_dim, grid};
      kernel();
    }
  });
}

}  // namespace colrow::testing::emulation

namespace colrow::kernels::cuda {

using testing::emulation::WarpSlots;

void mma(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  WarpSlots& w = testing::emulation::my_warp();
  const int lane = testing::emulation::my_lane();
  w.a[lane] = {a[0], a[1], a[2], a[3]};
  w.b[lane] = {b0, b1};
  testing::emulation::sync_warp();
  // A [16][16]: element (r, k) sits in lane (r % 8) * 4 + (k % 8) / 2,
  // register (r >= 8) + 2 (k >= 8), half k % 2. B [16][8]: (k, n) in lane
  // n * 4 + (k % 8) / 2, register k >= 8, half k % 2.
  auto a_at = [&](int r, int k) {
    return testing::emulation::bf16_half(w.a[(r % 8) * 4 + (k % 8) / 2][(r >= 8) + 2 * (k >= 8)],
                                         k % 2);
  };
  auto b_at = [&](int k, int n) {
    return testing::emulation::bf16_half(w.b[n * 4 + (k % 8) / 2][k >= 8], k % 2);
  };
  const int g = lane / 4, t = lane % 4;
  const int rows[4] = {g, g, g + 8, g + 8}, cols[4] = {2 * t, 2 * t + 1, 2 * t, 2 * t + 1};
  float out[4];
  for (int i = 0; i < 4; ++i) {
    double sum = 0.0;  // bf16 products are exact; the sum rounded once
    for (int k = 0; k < 16; ++k) sum += double{a_at(rows[i], k)} * b_at(k, cols[i]);
    out[i] = static_cast<float>(double{d[i]} + sum);
  }
  testing::emulation::sync_warp();  // every lane has read the others' operands
  for (int i = 0; i < 4; ++i) d[i] = out[i];
}

namespace {
// ldmatrix .x4: lanes 8m..8m+7 give the 8 rows (8 bf16 each) of matrix m.
void load_matrices(uint32_t (&r)[4], const uint16_t* row, bool transposed) {
  WarpSlots& w = testing::emulation::my_warp();
  const int lane = testing::emulation::my_lane();
  w.rows[lane] = row;
  testing::emulation::sync_warp();
  const int g = lane / 4, t = lane % 4;
  for (int m = 0; m < 4; ++m) {
    // Without .trans, row g's columns 2t, 2t + 1; with it, column g of rows 2t, 2t + 1.
    r[m] = transposed
               ? testing::emulation::pack(w.rows[8 * m + 2 * t][g], w.rows[8 * m + 2 * t + 1][g])
               : testing::emulation::pack(w.rows[8 * m + g][2 * t], w.rows[8 * m + g][2 * t + 1]);
  }
  testing::emulation::sync_warp();
}
}  // namespace

void ldmatrix_x4(uint32_t (&r)[4], const uint16_t* row) {
  load_matrices(r, row, false);
}
void ldmatrix_x4_trans(uint32_t (&r)[4], const uint16_t* row) {
  load_matrices(r, row, true);
}

// cp.async with a source size of 0 reads nothing and fills zeros.
void cp_async_16(uint16_t* dst, const uint16_t* src, bool fill) {
  if (fill) {
    std::memcpy(dst, src, 16);
  } else {
    std::memset(dst, 0, 16);
  }
}
void cp_async_4(float* dst, const float* src, bool fill) {
  *dst = fill ? *src : 0.0f;
}

}  // namespace colrow::kernels::cuda
