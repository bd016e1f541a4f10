// RecordingCommunicator: wraps another communicator and records every
// collective and message it forwards (kind, element count, peer, seconds spent). Tests assert a
// layer's exact collective sequence with it (torchtitan's comm-debug mode);
// the benchmark reads the time spent communicating from it.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "colrow/dist/communicator.h"

namespace colrow {

struct CollectiveEvent {
  std::string op;  // "all_reduce_sum", "all_gather", ..., "send", "recv" (the method's name)
  int64_t count;   // elements this rank contributes (sends or receives)
  double seconds;  // wall time inside the call, waiting for other ranks included
  int peer = -1;   // send's dst, recv's src (group ranks); -1 for collectives

  bool operator==(const CollectiveEvent& other) const {
    // time is not part of identity
    return op == other.op && count == other.count && peer == other.peer;
  }
};

class RecordingCommunicator final : public Communicator {
 public:
  explicit RecordingCommunicator(Communicator& inner) : inner_(inner) {}

  int rank() const override { return inner_.rank(); }
  int size() const override { return inner_.size(); }
  const std::string& name() const override { return inner_.name(); }

  void all_reduce_sum(Tensor& x) override;
  void all_reduce_max(Tensor& x) override;
  void all_gather(const Tensor& in, Tensor& out) override;
  void reduce_scatter_sum(const Tensor& in, Tensor& out) override;
  void broadcast(Tensor& x, int root) override;
  void barrier() override;
  void all_reduce_sum_bf16_wire(Tensor& x) override;
  void reduce_scatter_sum_bf16_wire(const Tensor& in, Tensor& out) override;
  // Recorded when started, under the blocking op's name; the event's seconds
  // are those spent starting and waiting (the communication not hidden).
  std::unique_ptr<PendingCollective> start_all_reduce_sum(Tensor& x) override;
  std::unique_ptr<PendingCollective> start_all_reduce_sum_bf16_wire(Tensor& x) override;
  std::unique_ptr<PendingCollective> start_reduce_scatter_sum_bf16_wire(const Tensor& in,
                                                                        Tensor& out) override;
  std::unique_ptr<PendingCollective> start_all_gather(const Tensor& in, Tensor& out) override;
  std::unique_ptr<PendingCollective> start_reduce_scatter_sum(const Tensor& in,
                                                              Tensor& out) override;
  // "send" is recorded like the start_* above; "recv" when it returns.
  std::unique_ptr<PendingCollective> start_send(const Tensor& x, int dst, int tag) override;
  void recv(Tensor& x, int src, int tag) override;
  std::unique_ptr<Communicator> split(int color, int key, const std::string& name) override;
  bool all_ranks_failing(double timeout_seconds) override;
  [[noreturn]] void abort(int exit_code) override;

  const std::vector<CollectiveEvent>& events() const { return events_; }
  double total_seconds() const;
  void clear() { events_.clear(); }

 private:
  template <typename Fn>
  void record(const char* op, int64_t count, Fn&& fn);
  template <typename Start>
  std::unique_ptr<PendingCollective> record_started(const char* op, int64_t count, Start&& start);

  Communicator& inner_;
  std::unique_ptr<Communicator> owned_;  // set when this wraps a split of another
  std::vector<CollectiveEvent> events_;
};

}  // namespace colrow
