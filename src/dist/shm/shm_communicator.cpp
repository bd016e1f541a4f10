// Shared-memory collectives for one node (see shm_communicator.h).
#include "dist/shm/shm_communicator.h"

#include <immintrin.h>
#include <omp.h>
#include <sched.h>

#include <algorithm>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <future>
#include <mutex>
#include <thread>
#include <utility>
#include <vector>

#include "colrow/core/bfloat16.h"
#include "colrow/core/error.h"
#include "dist/collective_checks.h"
#include "dist/fp32_wire.h"
#include "kernels/cpu/parallel.h"

namespace colrow {
namespace {

constexpr size_t kPage = SharedSegment::kPage;
constexpr size_t kFlagBytes = 128;  // one flag per rank, two cache lines apart (no false sharing)
constexpr int64_t kLineBytes = 64;  // slices start on cache lines
// Up to this many bytes read per rank (chunk x ranks), an all-reduce sums the
// whole chunk on every rank: one barrier instead of two, which is what small
// messages (decoding's [batch, d_model]) pay for.
constexpr int64_t kWholeReduceBytes = int64_t{128} << 10;
constexpr int kSpinsBeforeYield = 200;  // a few microseconds of pause, then yield
// A chunk's R copies take about this much in all (at least kMinChunkBytes per
// rank, where barriers would start to cost more than memory saves). Measured
// at 2 ranks, 4 and 16 MiB all-reduces (docs/performance.md): whole 4 MiB
// slots 810-860 us and 3.26-3.28 ms, 1 MiB chunks in all 640-740 us and
// 2.59-2.60 ms; 512 KiB and 2 MiB in all lie between.
constexpr size_t kChunkBytesAllRanks = size_t{1} << 20;
constexpr size_t kMinChunkBytes = size_t{128} << 10;

size_t flag_region_bytes(int ranks) {
  return SharedSegment::round_up(static_cast<size_t>(ranks) * kFlagBytes, kPage);
}

uint64_t* flag_of(std::byte* segment, int rank) {
  return reinterpret_cast<uint64_t*>(segment + static_cast<size_t>(rank) * kFlagBytes);
}

using kernels::cpu::for_each_element_block;
using kernels::cpu::kElementBlock;

// The slots hold fp32 elements, or bf16 bits (uint16_t) for the bf16 wire,
// whose sums add in fp32 and round once (widen, narrow: core/bfloat16.h).

// dst = src, n elements, in parallel blocks when large.
template <typename E>
void copy_elements(E* dst, const E* src, int64_t n) {
  for_each_element_block(
      n, [&](int64_t lo, int64_t hi) { std::memcpy(dst + lo, src + lo, sizeof(E) * (hi - lo)); });
}

// max that keeps a NaN from either side, as a sum would.
inline float max_keeping_nan(float a, float b) {
  return (b > a || b != b) ? b : a;
}

// out[i] = sources[0][i] (+ or max) sources[1][i] ... in rank order, for
// i < n, in fp32 (rounded once into a bf16 out). `out` may be one of the
// sources: each block is combined in a local accumulator and written once.
template <typename E, bool kMax>
void combine(E* out, const std::vector<const E*>& sources, int64_t n) {
  for_each_element_block(n, [&](int64_t lo, int64_t hi) {
    const int64_t len = hi - lo;
    alignas(64) float acc[kElementBlock];
    for (int64_t i = 0; i < len; ++i) acc[i] = widen(sources[0][lo + i]);
    for (size_t q = 1; q < sources.size(); ++q) {
      const E* s = sources[q] + lo;
      if constexpr (kMax) {
        for (int64_t i = 0; i < len; ++i) acc[i] = max_keeping_nan(acc[i], widen(s[i]));
      } else {
#pragma omp simd
        for (int64_t i = 0; i < len; ++i) acc[i] += widen(s[i]);
      }
    }
    for (int64_t i = 0; i < len; ++i) out[lo + i] = narrow<E>(acc[i]);
  });
}

// Rank r's slice [begin, end) of a chunk of n elements of `bytes` each: equal
// parts of whole cache lines, so no two ranks write one line.
struct Slice {
  int64_t begin, end;
};
Slice slice_of(int rank, int ranks, int64_t n, size_t bytes) {
  const int64_t per = static_cast<int64_t>(SharedSegment::round_up(
      static_cast<size_t>((n + ranks - 1) / ranks), static_cast<size_t>(kLineBytes) / bytes));
  const int64_t begin = std::min(n, rank * per);
  return {begin, std::min(n, begin + per)};
}

using collective_checks::require_host_contiguous;

}  // namespace

bool group_on_one_node(MPI_Comm comm) {
  MPI_Comm node;
  COLROW_MPI_CHECK(MPI_Comm_split_type(comm, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node));
  int node_size = 0, group_size = 0;
  COLROW_MPI_CHECK(MPI_Comm_size(node, &node_size));
  COLROW_MPI_CHECK(MPI_Comm_free(&node));
  COLROW_MPI_CHECK(MPI_Comm_size(comm, &group_size));
  // The node pieces partition the group, so every rank reaches the same answer.
  return node_size == group_size;
}

ShmCommunicator::ShmCommunicator(std::unique_ptr<MpiCommunicator>&& host, size_t slot_bytes,
                                 int mailbox_slots)
    : slot_bytes_(SharedSegment::round_up(std::max<size_t>(slot_bytes, kPage), kPage)),
      segment_(host->handle(), flag_region_bytes(host->size()) + 2 * slot_bytes_ * host->size(),
               host->name()),
      mailbox_slots_(mailbox_slots),
      // The MpiCommunicator itself stays where it is when host_ takes it.
      mailboxes_(mailbox_slots > 0
                     ? std::make_unique<ShmMailboxes>(*host, slot_bytes_, mailbox_slots)
                     : nullptr),
      host_(std::move(host)) {}

template <typename E>
E* ShmCommunicator::slot(int rank, int set) const {
  std::byte* slots = segment_.data() + flag_region_bytes(size());
  return reinterpret_cast<E*>(slots + (static_cast<size_t>(rank) * 2 + set) * slot_bytes_);
}

int64_t ShmCommunicator::chunk_bytes() const {
  return static_cast<int64_t>(
      std::min(slot_bytes_, std::max(kMinChunkBytes, kChunkBytesAllRanks / size())));
}

void ShmCommunicator::arrive_and_wait() {
  ++arrivals_;
  // Release: this rank's writes to its slot are visible to whoever sees the flag.
  __atomic_store_n(flag_of(segment_.data(), rank()), arrivals_, __ATOMIC_RELEASE);
  for (int q = 0; q < size(); ++q) {
    const uint64_t* flag = flag_of(segment_.data(), q);
    for (int spins = 0; __atomic_load_n(flag, __ATOMIC_ACQUIRE) < arrivals_; ++spins) {
      // Ranks may outnumber cores (tests oversubscribe): give the core away
      // after a short spin, or the rank we wait for may never run.
      if (spins < kSpinsBeforeYield) {
        _mm_pause();
      } else {
        sched_yield();
      }
    }
  }
}

template <typename E>
void ShmCommunicator::all_reduce(E* data, int64_t n, Reduction reduction) {
  const int ranks = size(), me = rank();
  if (ranks == 1) return;
  std::vector<const E*> sources(ranks);
  const int64_t chunk = chunk_bytes() / static_cast<int64_t>(sizeof(E));
  for (int64_t offset = 0; offset < n; offset += chunk) {
    const int64_t count = std::min(chunk, n - offset);
    const int set = next_set();
    copy_elements(slot<E>(me, set), data + offset, count);
    arrive_and_wait();
    if (count * ranks * static_cast<int64_t>(sizeof(E)) <= kWholeReduceBytes) {
      // Small: every rank sums the whole chunk itself, in the same rank
      // order (so the same bits everywhere), and needs no second barrier.
      for (int q = 0; q < ranks; ++q) sources[q] = slot<E>(q, set);
      if (reduction == Reduction::kMax) {
        combine<E, true>(data + offset, sources, count);
      } else {
        combine<E, false>(data + offset, sources, count);
      }
      continue;
    }
    const Slice mine = slice_of(me, ranks, count, sizeof(E));
    for (int q = 0; q < ranks; ++q) sources[q] = slot<E>(q, set) + mine.begin;
    E* reduced = slot<E>(me, set) + mine.begin;
    if (reduction == Reduction::kMax) {
      combine<E, true>(reduced, sources, mine.end - mine.begin);
    } else {
      combine<E, false>(reduced, sources, mine.end - mine.begin);
    }
    arrive_and_wait();
    for (int q = 0; q < ranks; ++q) {
      const Slice s = slice_of(q, ranks, count, sizeof(E));
      copy_elements(data + offset + s.begin, slot<E>(q, set) + s.begin, s.end - s.begin);
    }
  }
}

void ShmCommunicator::all_reduce_sum(Tensor& x) {
  require_idle("all_reduce_sum");
  reduce_all(x, Reduction::kSum, "all_reduce_sum");
}

void ShmCommunicator::all_reduce_max(Tensor& x) {
  require_idle("all_reduce_max");
  reduce_all(x, Reduction::kMax, "all_reduce_max");
}

void ShmCommunicator::reduce_all(Tensor& x, Reduction reduction, const char* what) {
  if (dist::on_fp32_wire(x, [&](Tensor& w) { reduce_all(w, reduction, what); })) return;
  require_host_contiguous(x, what, name());
  all_reduce(x.data(), x.numel(), reduction);
}

void ShmCommunicator::all_reduce_sum_bf16_wire(Tensor& x) {
  require_idle("all_reduce_sum_bf16_wire");
  require_host_contiguous(x, "all_reduce_sum_bf16_wire", name());
  collective_checks::require_bf16({&x}, "all_reduce_sum_bf16_wire", name());
  all_reduce(x.bf16_data(), x.numel(), Reduction::kSum);
}

void ShmCommunicator::reduce_scatter_sum_bf16_wire(const Tensor& in, Tensor& out) {
  require_idle("reduce_scatter_sum_bf16_wire");
  check_scatter(in, out, "reduce_scatter_sum_bf16_wire");
  collective_checks::require_bf16({&in, &out}, "reduce_scatter_sum_bf16_wire", name());
  scatter(in, out);
}

void ShmCommunicator::all_gather(const Tensor& in, Tensor& out) {
  require_idle("all_gather");
  gather_any(in, out);
}

void ShmCommunicator::gather_any(const Tensor& in, Tensor& out) {
  if (dist::on_fp32_wire(in, out, [this](const Tensor& i, Tensor& o) { gather_any(i, o); })) return;
  check_gather(in, out);
  gather(in, out);
}

void ShmCommunicator::reduce_scatter_sum(const Tensor& in, Tensor& out) {
  require_idle("reduce_scatter_sum");
  scatter_any(in, out, "reduce_scatter_sum");
}

void ShmCommunicator::scatter_any(const Tensor& in, Tensor& out, const char* what) {
  if (dist::on_fp32_wire(in, out, [&](const Tensor& i, Tensor& o) { scatter_any(i, o, what); })) {
    return;
  }
  check_scatter(in, out, what);
  scatter(in, out);
}

void ShmCommunicator::scatter(const Tensor& in, Tensor& out) {
  if (size() == 1) {
    if (in.raw_data() != out.raw_data()) out.copy_from(in.view(out.shape()));
  } else if (in.dtype() == DType::kBF16) {
    scatter(in.bf16_data(), out.bf16_data(), out.numel());
  } else {
    scatter(in.data(), out.data(), out.numel());
  }
}

void ShmCommunicator::check_gather(const Tensor& in, const Tensor& out) const {
  require_host_contiguous(in, "all_gather", name());
  require_host_contiguous(out, "all_gather", name());
  collective_checks::require_gather_sizes(in, out, size(), name());
}

void ShmCommunicator::check_scatter(const Tensor& in, const Tensor& out, const char* what) const {
  require_host_contiguous(in, what, name());
  require_host_contiguous(out, what, name());
  collective_checks::require_scatter_sizes(in, out, size(), name());
}

void ShmCommunicator::gather(const Tensor& in, Tensor& out) {
  const int ranks = size(), me = rank();
  const int64_t n = in.numel();
  if (ranks == 1) {
    if (in.data() != out.data()) out.copy_from(in.view(out.shape()));
    return;
  }
  const int64_t chunk = chunk_bytes() / static_cast<int64_t>(sizeof(float));
  for (int64_t offset = 0; offset < n; offset += chunk) {
    const int64_t count = std::min(chunk, n - offset);
    const int set = next_set();
    copy_elements(slot<float>(me, set), in.data() + offset, count);
    arrive_and_wait();
    for (int q = 0; q < ranks; ++q) {
      copy_elements(out.data() + q * n + offset, slot<float>(q, set), count);
    }
  }
}

template <typename E>
void ShmCommunicator::scatter(const E* in, E* out, int64_t n) {
  const int ranks = size(), me = rank();
  // A chunk holds `per_rank` elements of each rank's block: ranks x per_rank fit a chunk.
  const int64_t per_rank =
      std::max<int64_t>(1, chunk_bytes() / static_cast<int64_t>(sizeof(E)) / ranks);
  std::vector<const E*> sources(ranks);
  for (int64_t offset = 0; offset < n; offset += per_rank) {
    const int64_t count = std::min(per_rank, n - offset);
    const int set = next_set();
    for (int q = 0; q < ranks; ++q) {
      copy_elements(slot<E>(me, set) + q * count, in + q * n + offset, count);
    }
    arrive_and_wait();
    for (int q = 0; q < ranks; ++q) sources[q] = slot<E>(q, set) + me * count;
    combine<E, false>(out + offset, sources, count);
  }
}

void ShmCommunicator::broadcast(Tensor& x, int root) {
  require_idle("broadcast");
  host_->broadcast(x, root);
}

void ShmCommunicator::barrier() {
  require_idle("barrier");
  host_->barrier();
}

// The background thread never calls MPI, so messages may flow while a
// started collective runs: a pipeline stage can send while it reduces.
std::unique_ptr<PendingCollective> ShmCommunicator::start_send(const Tensor& x, int dst, int tag) {
  if (mailboxes_) return mailboxes_->start_send(x, dst, tag);
  return host_->start_send(x, dst, tag);
}

void ShmCommunicator::recv(Tensor& x, int src, int tag) {
  if (mailboxes_) return mailboxes_->recv(x, src, tag);
  host_->recv(x, src, tag);
}

// One thread that runs the collectives handed to it, in the order handed,
// one at a time: several may wait in its queue.
class ShmCommunicator::Background {
 public:
  Background() : thread_([this] { loop(); }) {}
  ~Background() {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      stop_ = true;
    }
    wake_.notify_all();
    thread_.join();
  }

  std::future<void> run(std::function<void()> collective) {
    std::packaged_task<void()> task(std::move(collective));
    std::future<void> done = task.get_future();
    {
      std::lock_guard<std::mutex> lock(mutex_);
      queue_.push_back(std::move(task));
    }
    wake_.notify_all();
    return done;
  }

 private:
  void loop() {
    omp_set_num_threads(1);  // this thread's loops: one core, beside the computation
    for (;;) {
      std::packaged_task<void()> task;
      {
        std::unique_lock<std::mutex> lock(mutex_);
        wake_.wait(lock, [this] { return stop_ || !queue_.empty(); });
        if (queue_.empty()) return;  // stopped, and every handle has waited
        task = std::move(queue_.front());
        queue_.pop_front();
      }
      task();  // an exception goes to the future
    }
  }

  std::mutex mutex_;
  std::condition_variable wake_;
  std::deque<std::packaged_task<void()>> queue_;
  bool stop_ = false;
  std::thread thread_;  // last: starts once the members above exist
};

namespace {

// A collective running on the background thread.
class BackgroundCollective final : public PendingCollective {
 public:
  BackgroundCollective(std::future<void> done, std::shared_ptr<std::atomic<int>> pending)
      : done_(std::move(done)), pending_(std::move(pending)) {}
  ~BackgroundCollective() override {
    if (!done_.valid()) return;
    done_.wait();
    pending_->fetch_sub(1);
  }
  void wait() override {
    if (!done_.valid()) return;
    std::future<void> done = std::move(done_);
    done.wait();
    pending_->fetch_sub(1);
    done.get();  // rethrows the collective's error
  }

 private:
  std::future<void> done_;
  std::shared_ptr<std::atomic<int>> pending_;  // the communicator's count of started ones
};

}  // namespace

ShmCommunicator::~ShmCommunicator() = default;

void ShmCommunicator::require_idle(const char* what) const {
  if (pending_->load() > 0) {
    throw InternalError("[dist] " + std::string(what) + " over " + name() +
                        " while a started collective is not waited for: wait() first");
  }
}

std::unique_ptr<PendingCollective> ShmCommunicator::start(std::function<void()> collective) {
  pending_->fetch_add(1);
  if (!background_) background_ = std::make_unique<Background>();
  return std::make_unique<BackgroundCollective>(background_->run(std::move(collective)), pending_);
}

// Operands are checked here, on the caller's thread, so that a bad call
// throws at once; bf16 ones are widened and rounded back inside the queued
// collective, whose copy then lives until it is done.
std::unique_ptr<PendingCollective> ShmCommunicator::start_all_reduce_sum(Tensor& x) {
  require_host_contiguous(x, "all_reduce_sum", name());
  if (size() == 1) return Communicator::start_all_reduce_sum(x);
  return start([this, &x] { reduce_all(x, Reduction::kSum, "all_reduce_sum"); });
}

std::unique_ptr<PendingCollective> ShmCommunicator::start_all_gather(const Tensor& in,
                                                                     Tensor& out) {
  check_gather(in, out);
  if (size() == 1) return Communicator::start_all_gather(in, out);
  return start([this, &in, &out] { gather_any(in, out); });
}

std::unique_ptr<PendingCollective> ShmCommunicator::start_reduce_scatter_sum(const Tensor& in,
                                                                             Tensor& out) {
  check_scatter(in, out, "start_reduce_scatter_sum");
  if (size() == 1) return Communicator::start_reduce_scatter_sum(in, out);
  return start([this, &in, &out] { scatter_any(in, out, "start_reduce_scatter_sum"); });
}

std::unique_ptr<PendingCollective> ShmCommunicator::start_all_reduce_sum_bf16_wire(Tensor& x) {
  require_host_contiguous(x, "all_reduce_sum_bf16_wire", name());
  collective_checks::require_bf16({&x}, "all_reduce_sum_bf16_wire", name());
  if (size() == 1) return Communicator::start_all_reduce_sum_bf16_wire(x);
  return start([this, &x] { all_reduce(x.bf16_data(), x.numel(), Reduction::kSum); });
}

std::unique_ptr<PendingCollective> ShmCommunicator::start_reduce_scatter_sum_bf16_wire(
    const Tensor& in, Tensor& out) {
  check_scatter(in, out, "reduce_scatter_sum_bf16_wire");
  collective_checks::require_bf16({&in, &out}, "reduce_scatter_sum_bf16_wire", name());
  if (size() == 1) return Communicator::start_reduce_scatter_sum_bf16_wire(in, out);
  return start([this, &in, &out] { scatter(in, out); });
}

std::unique_ptr<Communicator> ShmCommunicator::split(int color, int key, const std::string& name) {
  // The sub-group is on this node too: its collectives stay in shared memory.
  std::unique_ptr<MpiCommunicator> sub = host_->split_group(color, key, name);
  if (sub->size() == 1) return sub;
  return std::make_unique<ShmCommunicator>(std::move(sub), slot_bytes_, mailbox_slots_);
}

bool ShmCommunicator::all_ranks_failing(double timeout_seconds) {
  return host_->all_ranks_failing(timeout_seconds);
}

void ShmCommunicator::abort(int exit_code) {
  host_->abort(exit_code);
}

}  // namespace colrow
