// The fibers and warp instructions of warp_emulation.h. One block at a time:
// its threads are fibers that a scheduler resumes warp by warp (run_block);
// a fiber runs until it waits at a barrier (its block's, or its warp's for
// an exchange) or ends. A barrier opens when all its threads have arrived; a
// pass over the fibers in which none arrives anywhere or ends is a deadlock.
// launch_independent has no fibers: each thread is a plain call, and
// anything that would make threads meet refuses to run there.
//
// A switch between fibers on x86-64 swaps stacks by hand: the callee-saved
// registers pushed on the stack left, the stack pointer swapped. glibc's
// swapcontext, used elsewhere, also saves and restores the signal mask, a
// system call per switch that the fibers never need; it was two thirds of an
// emulated test's time.
#include "support/warp_emulation.h"

#if !defined(__x86_64__)
#include <ucontext.h>
#endif

#include <algorithm>
#include <array>
#include <cstdio>
#include <cstdlib>
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

#if defined(__x86_64__)
// Where a switch left a stack: its stack pointer, with the callee-saved
// registers (System V: rbp, rbx, r12-r15) and the return address on top.
struct Context {
  void* sp = nullptr;
};

}  // namespace
}  // namespace colrow::testing::emulation

// colrow_emulation_switch(save_sp, load_sp): pushes the callee-saved
// registers, stores the stack pointer at *save_sp, takes load_sp and pops
// that stack's registers, returning where it last switched away.
extern "C" void colrow_emulation_switch(void** save_sp, void* load_sp);
asm(R"(
  .text
  .p2align 4
  .globl colrow_emulation_switch
  .type colrow_emulation_switch, @function
colrow_emulation_switch:
  pushq %rbp
  pushq %rbx
  pushq %r12
  pushq %r13
  pushq %r14
  pushq %r15
  movq %rsp, (%rdi)
  movq %rsi, %rsp
  popq %r15
  popq %r14
  popq %r13
  popq %r12
  popq %rbx
  popq %rbp
  ret
  .size colrow_emulation_switch, .-colrow_emulation_switch
)");

namespace colrow::testing::emulation {
namespace {

// Makes `c` start entry() on [stack, stack + bytes) at the first switch to
// it: six zero registers for the switch to pop, then entry as the address
// its ret takes, over a null return address that leaves the stack as a call
// would (rsp + 8 a multiple of 16 at entry). entry must never return.
void prepare(Context& c, char* stack, size_t bytes, void (*entry)()) {
  auto** sp = reinterpret_cast<void**>(reinterpret_cast<uintptr_t>(stack + bytes) & ~uintptr_t{15});
  *--sp = nullptr;
  *--sp = reinterpret_cast<void*>(entry);
  for (int i = 0; i < 6; ++i) *--sp = nullptr;
  c.sp = sp;
}

void switch_context(Context& from, Context& to) {
  colrow_emulation_switch(&from.sp, to.sp);
}
#else
struct Context {
  ucontext_t uc{};
};

void prepare(Context& c, char* stack, size_t bytes, void (*entry)()) {
  getcontext(&c.uc);
  c.uc.uc_stack.ss_sp = stack;
  c.uc.uc_stack.ss_size = bytes;
  c.uc.uc_link = nullptr;  // entry never returns
  makecontext(&c.uc, entry, 0);
}

void switch_context(Context& from, Context& to) {
  swapcontext(&from.uc, &to.uc);
}
#endif

struct Barrier {
  int arrived = 0;
  uint64_t generation = 0;
};

// What the lanes of one warp hand each other at an exchange.
struct Exchange {
  std::array<uint64_t, kWarp> bits{};
  std::array<std::array<uint32_t, 4>, kWarp> a{};
  std::array<std::array<uint32_t, 2>, kWarp> b{};
  std::array<const uint16_t*, kWarp> rows{};
};

// Two exchanges' slots, used in turn: a lane writes a set again only at the
// exchange after next, which it reaches past that next exchange's barrier,
// and every lane arrives there only after reading this one. So each exchange
// needs one barrier, not one to write and one more before anybody rewrites.
struct WarpSlots {
  Barrier barrier;
  std::array<Exchange, 2> exchanges;
};

// A fiber's stack and where it was left, kept from launch to launch:
// allocating (and faulting in) 256 KiB per thread per launch cost more than
// the kernels, and a fiber started afresh per block made AddressSanitizer map
// and unmap a fake stack for it each time (6x the time of a test under ASan).
// A fiber that ends its kernel parks in fiber_main's loop and runs the next
// block's kernel from there. The stack is not zeroed, as a new thread's is not.
struct ParkedFiber {
  std::unique_ptr<char[]> stack{new char[kStackBytes]};
  Context context;
  bool parked = false;  // at the end of a kernel, ready to run another
};

ParkedFiber& parked_fiber(unsigned t) {
  static std::vector<std::unique_ptr<ParkedFiber>> fibers;
  while (fibers.size() <= t) fibers.push_back(std::make_unique<ParkedFiber>());
  return *fibers[t];
}

// A cp.async in flight: `bytes` from src to dst, or zeros (a source size of 0).
struct PendingCopy {
  void* dst;
  const void* src;
  size_t bytes;
  bool fill;
};

struct Fiber {
  ParkedFiber* home = nullptr;  // parked_fiber(its index)
  ThreadIndices indices{};
  uint64_t exchanges = 0;  // this lane's exchanges with its warp so far
  bool done = false;
  uint64_t block_barriers = 0;  // arrivals at the block's barrier so far
  // Its cp.async copies not yet waited for (cp_async_wait_all lands them).
  std::vector<PendingCopy> copies;
};

struct Block {
  const std::function<void()>* kernel = nullptr;
  std::vector<Fiber> fibers;
  std::vector<WarpSlots> warps;
  Barrier barrier;
  std::vector<char> shared;  // 128 bytes of slack for the alignment
  char* shared_base = nullptr;
  // Static shared arrays by their declaration's place (__FILE__'s literal
  // and __LINE__: no string built per thread), made afresh per block.
  std::map<std::pair<const char*, int>, std::vector<double>> statics;
  // The running fiber: its index is the thread's linear one, x + y bx +
  // z bx by, and warps are 32 consecutive of those.
  int running = -1;
  uint64_t progress = 0;  // arrivals and ends
  Context scheduler;
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
  switch_context(f.home->context, g_block->scheduler);
  // g_block may be another block now: a parked fiber resumes in the next.
#ifdef COLROW_FIBERS_UNDER_ASAN
  __sanitizer_finish_switch_fiber(fake, &g_block->scheduler_stack, &g_block->scheduler_stack_bytes);
#endif
}

// The last of `threads` to arrive opens the barrier and goes on at once, or
// with `last_waits` (the block's barrier) goes back to the scheduler too, for
// its next pass (run_block), instead of running on past the barrier.
void wait_at(Barrier& barrier, int threads, bool last_waits = false) {
  const uint64_t generation = barrier.generation;
  ++g_block->progress;
  if (++barrier.arrived == threads) {
    barrier.arrived = 0;
    ++barrier.generation;
    if (last_waits) yield();
    return;
  }
  while (barrier.generation == generation) yield();
}

WarpSlots& my_warp() {
  return meeting_block("a warp instruction").warps[g_block->running / kWarp];
}
int my_lane() {
  return g_block->running % kWarp;
}
void sync_warp() {
  wait_at(my_warp().barrier, kWarp);
}

// A cp.async of the running thread, and its wait: shared memory, which only
// a launch() block has.
void defer_copy(void* dst, const void* src, size_t bytes, bool fill) {
  meeting_block("cp.async");
  running_fiber().copies.push_back({dst, src, bytes, fill});
}
void land_copies() {
  meeting_block("cp.async.wait_group");
  for (const PendingCopy& c : running_fiber().copies) {
    if (c.fill) {
      std::memcpy(c.dst, c.src, c.bytes);
    } else {
      std::memset(c.dst, 0, c.bytes);
    }
  }
  running_fiber().copies.clear();
}

// The slots of this lane's next exchange: write its share, sync_warp(), read
// the others', then exchanged().
Exchange& next_exchange() {
  return my_warp().exchanges[running_fiber().exchanges % 2];
}
void exchanged() {
  ++running_fiber().exchanges;
}

// A fiber's life: a kernel per block it is given, parked in between.
void fiber_main() {
#ifdef COLROW_FIBERS_UNDER_ASAN
  __sanitizer_finish_switch_fiber(nullptr, &g_block->scheduler_stack,
                                  &g_block->scheduler_stack_bytes);
#endif
  for (;;) {
    (*g_block->kernel)();
    running_fiber().done = true;
    ++g_block->progress;
    yield();
  }
}

// Resumes fiber t until it waits or ends.
void resume(Block& block, unsigned t) {
  Fiber& f = block.fibers[t];
  block.running = static_cast<int>(t);
#ifdef COLROW_FIBERS_UNDER_ASAN
  void* fake = nullptr;
  __sanitizer_start_switch_fiber(&fake, f.home->stack.get(), kStackBytes);
#endif
  switch_context(block.scheduler, f.home->context);
#ifdef COLROW_FIBERS_UNDER_ASAN
  __sanitizer_finish_switch_fiber(fake, nullptr, nullptr);
#endif
}

// A pass runs the block from one barrier to the next: warp by warp, each as
// far as it goes before the block's next barrier (its lanes in step at the
// warp's exchanges), in order in blocks of even linear index and in reverse
// in odd ones. So a warp's write to shared memory that another warp reads
// with no barrier between them lands before the read in one block and after
// it in the next, and the results show it; warps run in step, as a pass over
// all fibers would run them, hide it.
void run_block(Block& block, unsigned threads, bool warps_reversed) {
  for (unsigned t = 0; t < threads; ++t) {
    Fiber& f = block.fibers[t];
    f.done = false;
    f.block_barriers = 0;
    f.copies.clear();  // a thread's copies end with its block
    if (!f.home->parked) prepare(f.home->context, f.home->stack.get(), kStackBytes, fiber_main);
    // Until the block ends: one left in a kernel (a deadlock) starts afresh.
    f.home->parked = false;
  }
  const unsigned warps = threads / kWarp;
  int left = static_cast<int>(threads);
  while (left > 0) {
    const uint64_t before = block.progress;
    uint64_t passed = UINT64_MAX;  // the barrier this pass starts from
    for (unsigned t = 0; t < threads; ++t) {
      if (!block.fibers[t].done) passed = std::min(passed, block.fibers[t].block_barriers);
    }
    for (unsigned i = 0; i < warps; ++i) {
      const unsigned w = warps_reversed ? warps - 1 - i : i;
      for (bool moved = true; moved;) {
        const uint64_t warp_before = block.progress;
        bool resumed = false;
        for (unsigned t = w * kWarp; t < (w + 1) * kWarp; ++t) {
          const Fiber& f = block.fibers[t];
          if (f.done || f.block_barriers != passed) continue;
          resume(block, t);
          resumed = true;
          if (block.fibers[t].done) --left;
        }
        moved = resumed && block.progress != warp_before;
      }
    }
    if (left > 0 && block.progress == before) {
      throw InternalError(
          "[warp emulation] deadlock in block (" + std::to_string(block.fibers[0].indices.block.x) +
          ", " + std::to_string(block.fibers[0].indices.block.y) + "): " + std::to_string(left) +
          " threads wait at a barrier that the others never reach");
    }
  }
  block.running = -1;
  for (unsigned t = 0; t < threads; ++t) block.fibers[t].home->parked = true;
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
  ++running_fiber().block_barriers;
  wait_at(block.barrier, static_cast<int>(block.fibers.size()), /*last_waits=*/true);
}

uint64_t exchange_in_warp(uint64_t bits, int from_lane) {
  Exchange& x = next_exchange();
  x.bits[my_lane()] = bits;
  sync_warp();
  const uint64_t got = x.bits[from_lane];
  exchanged();
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
  for (unsigned t = 0; t < threads; ++t) block.fibers[t].home = &parked_fiber(t);
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
      block.fibers[t].exchanges = 0;
    }
    // Every block starts from the pattern, not from the last block's data.
    std::fill(block.shared.begin(), block.shared.end(), static_cast<char>(0x5a));
    block.statics.clear();
    run_block(block, threads, (at.x + grid.x * (at.y + grid.y * at.z)) % 2 == 1);
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

using testing::emulation::Exchange;

void wait_for_turn(const int* turn, int mine) {
  if (*turn == mine) return;
  const testing::emulation::ThreadIndices& at = testing::emulation::current();
  std::fprintf(stderr,
               "[warp emulation] block (%u, %u, %u) waits for turn %d of a sum that blocks before "
               "it left at %d: no block after it can pass it the turn (blocks run in order)\n",
               at.block.x, at.block.y, at.block.z, mine, *turn);
  std::abort();
}

void mma(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  Exchange& w = testing::emulation::next_exchange();
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
  testing::emulation::exchanged();
  for (int i = 0; i < 4; ++i) d[i] = out[i];
}

namespace {
// ldmatrix .x4: lanes 8m..8m+7 give the 8 rows (8 bf16 each) of matrix m.
void load_matrices(uint32_t (&r)[4], const uint16_t* row, bool transposed) {
  Exchange& w = testing::emulation::next_exchange();
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
  testing::emulation::exchanged();
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
  testing::emulation::defer_copy(dst, src, 16, fill);
}
void cp_async_4(float* dst, const float* src, bool fill) {
  testing::emulation::defer_copy(dst, src, 4, fill);
}
void cp_async_wait_all() {
  testing::emulation::land_copies();
}

}  // namespace colrow::kernels::cuda
