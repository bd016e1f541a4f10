// ShmCommunicator: collectives for ranks on one node through shared memory,
// as vLLM's CPU backend and DeepSpeed's shm all-reduce do for CPU tensor
// parallelism. Every rank owns two slots in one SharedSegment (two, so that a
// collective may start writing while ranks still read the previous one).
//   all_reduce: each rank copies its chunk into its slot; barrier; rank r sums
//     slice r of every slot, in rank order, into slice r of its own slot;
//     barrier; every rank copies the R reduced slices out. Small chunks
//     (chunk x R <= 32K floats): every rank sums the whole chunk in rank
//     order after the first barrier, and there is no second.
//   all_gather: copy in; barrier; copy every rank's slot out.
//   reduce_scatter: copy in; barrier; rank r sums block r of every slot.
// Each element's sum runs over ranks 0, 1, ..., R-1 whatever the threads or
// the timing, so results are the same bits on every run and every rank. The
// bf16 wire's sums put bf16 in the slots and add in fp32, rounding once.
// Messages go in chunks sized for the caches, not the slot: the R copies of a
// chunk (one per rank) take about 1 MiB in all, at least 128 KiB per rank,
// so the sums and the copies out read what the copies in just wrote from
// cache rather than from memory (chunk_bytes). The barrier is a flag
// per rank in the segment; waiting ranks spin briefly, then yield their core.
// Broadcast, barrier, split, failure agreement and abort go to the group's
// MPI communicator, which stays the channel for control messages. Point to
// point (start_send, recv) goes through ShmMailboxes when the group was made
// with mailbox slots (pipeline groups: a send then arrives without its
// sender's help), else through the MPI communicator: the collective slots are
// shared by the whole group and stepped through by barriers, while a message
// involves two ranks only.
// start_* runs the same collective on a background thread of this
// communicator (one thread, collectives queued and run one at a time in the
// order started, single-threaded copies so that it takes one core from the
// computation it overlaps). A blocking collective waits for none of them:
// it is refused while any is not waited for.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "colrow/dist/mpi_communicator.h"
#include "dist/shm/shared_segment.h"
#include "dist/shm/shm_mailboxes.h"

namespace colrow {

class ShmCommunicator final : public Communicator {
 public:
  static constexpr size_t kDefaultSlotBytes = size_t{4} << 20;

  // Collective over `host`, whose ranks must all be on one node. BackendError
  // on every rank when the segment cannot be made; `host` is then still the
  // caller's, to fall back on. `slot_bytes` is rounded up to a whole page;
  // tests make it small to exercise chunking.
  // `mailbox_slots` > 0: point to point through that many slots of
  // `slot_bytes` per rank (ShmMailboxes), in a second segment; BackendError
  // alike when that cannot be made either.
  explicit ShmCommunicator(std::unique_ptr<MpiCommunicator>&& host,
                           size_t slot_bytes = kDefaultSlotBytes, int mailbox_slots = 0);

  int rank() const override { return host_->rank(); }
  int size() const override { return host_->size(); }
  const std::string& name() const override { return host_->name(); }

  void all_reduce_sum(Tensor& x) override;
  void all_reduce_max(Tensor& x) override;
  void all_gather(const Tensor& in, Tensor& out) override;
  void reduce_scatter_sum(const Tensor& in, Tensor& out) override;
  void broadcast(Tensor& x, int root) override;
  void barrier() override;
  // bf16 in the slots, each element summed in fp32 over ranks 0..R-1 and
  // rounded once: half the bytes, and the fp32 wire's result.
  void all_reduce_sum_bf16_wire(Tensor& x) override;
  void reduce_scatter_sum_bf16_wire(const Tensor& in, Tensor& out) override;
  std::unique_ptr<PendingCollective> start_all_reduce_sum(Tensor& x) override;
  std::unique_ptr<PendingCollective> start_all_reduce_sum_bf16_wire(Tensor& x) override;
  std::unique_ptr<PendingCollective> start_reduce_scatter_sum_bf16_wire(const Tensor& in,
                                                                        Tensor& out) override;
  std::unique_ptr<PendingCollective> start_all_gather(const Tensor& in, Tensor& out) override;
  std::unique_ptr<PendingCollective> start_reduce_scatter_sum(const Tensor& in,
                                                              Tensor& out) override;
  std::unique_ptr<PendingCollective> start_send(const Tensor& x, int dst, int tag) override;
  void recv(Tensor& x, int src, int tag) override;
  std::unique_ptr<Communicator> split(int color, int key, const std::string& name) override;
  bool all_ranks_failing(double timeout_seconds) override;
  [[noreturn]] void abort(int exit_code) override;

  ~ShmCommunicator() override;

 private:
  class Background;  // the thread behind start_*
  // Queues `collective` on the background thread.
  std::unique_ptr<PendingCollective> start(std::function<void()> collective);
  // InternalError naming `what` while a started collective is not waited for
  // (the blocking collectives: they would share the slots with it).
  void require_idle(const char* what) const;
  // The operand checks, and the collectives' bodies after them.
  void check_gather(const Tensor& in, const Tensor& out) const;
  void check_scatter(const Tensor& in, const Tensor& out, const char* what) const;
  void gather(const Tensor& in, Tensor& out);
  // The reductions over E = float or bf16 bits (uint16_t), on checked
  // operands of a group of two or more: n elements reduced, or per rank.
  enum class Reduction { kSum, kMax };
  // The collectives' bodies on tensors of either dtype (bf16 on the fp32
  // wire), without the idle check: the blocking calls and the queued ones.
  void reduce_all(Tensor& x, Reduction reduction, const char* what);
  void gather_any(const Tensor& in, Tensor& out);
  void scatter_any(const Tensor& in, Tensor& out, const char* what);
  template <typename E>
  void all_reduce(E* data, int64_t n, Reduction reduction);
  template <typename E>
  void scatter(const E* in, E* out, int64_t n);
  // in -> out, checked, of one dtype: a copy in a group of one, else the above.
  void scatter(const Tensor& in, Tensor& out);
  // Slot `set` of `rank`, as elements E.
  template <typename E>
  E* slot(int rank, int set) const;
  // Waits until every rank of the group has arrived here as often as this one.
  void arrive_and_wait();
  // The slot set the next chunk uses (alternating).
  int next_set() { return set_ ^= 1; }
  // Bytes of one rank's part of a chunk: see the top of this file.
  int64_t chunk_bytes() const;

  size_t slot_bytes_;
  SharedSegment segment_;  // made before host_ is taken from the caller
  int mailbox_slots_;
  std::unique_ptr<ShmMailboxes> mailboxes_;  // point to point, when asked for; also before host_
  std::unique_ptr<MpiCommunicator> host_;
  uint64_t arrivals_ = 0;  // barriers passed so far, the same count on every rank
  int set_ = 0;
  std::unique_ptr<Background> background_;  // started by the first start_*
  // Started collectives not yet waited for, shared with their handles.
  std::shared_ptr<std::atomic<int>> pending_ = std::make_shared<std::atomic<int>>(0);
};

// Whether every rank of `comm`'s group is on this rank's node. Collective.
bool group_on_one_node(MPI_Comm comm);

}  // namespace colrow
