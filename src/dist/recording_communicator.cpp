// Forwards each collective and appends what it did to the event list.
#include "colrow/dist/recording_communicator.h"

#include <chrono>
#include <cstdlib>
#include <utility>

namespace colrow {

template <typename Fn>
void RecordingCommunicator::record(const char* op, int64_t count, Fn&& fn) {
  const auto start = std::chrono::steady_clock::now();
  fn();
  const std::chrono::duration<double> elapsed = std::chrono::steady_clock::now() - start;
  events_.push_back({op, count, elapsed.count()});
}

namespace {

using Clock = std::chrono::steady_clock;

// Adds the time spent in wait() to the event recorded when it started.
class RecordedPending final : public PendingCollective {
 public:
  RecordedPending(std::unique_ptr<PendingCollective> inner, std::vector<CollectiveEvent>& events,
                  size_t event)
      : inner_(std::move(inner)), events_(events), event_(event) {}
  ~RecordedPending() override {
    if (inner_) wait_quietly();
  }
  void wait() override {
    const auto start = Clock::now();
    std::unique_ptr<PendingCollective> inner = std::move(inner_);
    if (inner) inner->wait();
    add_since(start);
  }

 private:
  void wait_quietly() {
    try {
      wait();
    } catch (...) {  // a destructor must not throw; the error surfaced elsewhere
    }
  }
  void add_since(Clock::time_point start) {
    const std::chrono::duration<double> elapsed = Clock::now() - start;
    if (event_ < events_.size()) events_[event_].seconds += elapsed.count();
  }

  std::unique_ptr<PendingCollective> inner_;
  std::vector<CollectiveEvent>& events_;
  size_t event_;
};

}  // namespace

template <typename Start>
std::unique_ptr<PendingCollective> RecordingCommunicator::record_started(const char* op,
                                                                         int64_t count,
                                                                         Start&& start) {
  std::unique_ptr<PendingCollective> inner;
  record(op, count, [&] { inner = start(); });
  return std::make_unique<RecordedPending>(std::move(inner), events_, events_.size() - 1);
}

std::unique_ptr<PendingCollective> RecordingCommunicator::start_all_reduce_sum(Tensor& x) {
  return record_started("all_reduce_sum", x.numel(),
                        [&] { return inner_.start_all_reduce_sum(x); });
}

std::unique_ptr<PendingCollective> RecordingCommunicator::start_all_gather(const Tensor& in,
                                                                           Tensor& out) {
  return record_started("all_gather", in.numel(), [&] { return inner_.start_all_gather(in, out); });
}

std::unique_ptr<PendingCollective> RecordingCommunicator::start_reduce_scatter_sum(const Tensor& in,
                                                                                   Tensor& out) {
  return record_started("reduce_scatter_sum", in.numel(),
                        [&] { return inner_.start_reduce_scatter_sum(in, out); });
}

std::unique_ptr<PendingCollective> RecordingCommunicator::start_all_reduce_sum_bf16_wire(
    Tensor& x) {
  return record_started("all_reduce_sum_bf16_wire", x.numel(),
                        [&] { return inner_.start_all_reduce_sum_bf16_wire(x); });
}

std::unique_ptr<PendingCollective> RecordingCommunicator::start_reduce_scatter_sum_bf16_wire(
    const Tensor& in, Tensor& out) {
  return record_started("reduce_scatter_sum_bf16_wire", in.numel(),
                        [&] { return inner_.start_reduce_scatter_sum_bf16_wire(in, out); });
}

std::unique_ptr<PendingCollective> RecordingCommunicator::start_send(const Tensor& x, int dst,
                                                                     int tag) {
  std::unique_ptr<PendingCollective> sent =
      record_started("send", x.numel(), [&] { return inner_.start_send(x, dst, tag); });
  events_.back().peer = dst;
  return sent;
}

void RecordingCommunicator::recv(Tensor& x, int src, int tag) {
  record("recv", x.numel(), [&] { inner_.recv(x, src, tag); });
  events_.back().peer = src;
}

void RecordingCommunicator::all_reduce_sum(Tensor& x) {
  record("all_reduce_sum", x.numel(), [&] { inner_.all_reduce_sum(x); });
}

void RecordingCommunicator::all_reduce_max(Tensor& x) {
  record("all_reduce_max", x.numel(), [&] { inner_.all_reduce_max(x); });
}

void RecordingCommunicator::all_gather(const Tensor& in, Tensor& out) {
  record("all_gather", in.numel(), [&] { inner_.all_gather(in, out); });
}

void RecordingCommunicator::reduce_scatter_sum(const Tensor& in, Tensor& out) {
  record("reduce_scatter_sum", in.numel(), [&] { inner_.reduce_scatter_sum(in, out); });
}

void RecordingCommunicator::all_reduce_sum_bf16_wire(Tensor& x) {
  record("all_reduce_sum_bf16_wire", x.numel(), [&] { inner_.all_reduce_sum_bf16_wire(x); });
}

void RecordingCommunicator::reduce_scatter_sum_bf16_wire(const Tensor& in, Tensor& out) {
  record("reduce_scatter_sum_bf16_wire", in.numel(),
         [&] { inner_.reduce_scatter_sum_bf16_wire(in, out); });
}

void RecordingCommunicator::broadcast(Tensor& x, int root) {
  record("broadcast", x.numel(), [&] { inner_.broadcast(x, root); });
}

void RecordingCommunicator::barrier() {
  record("barrier", 0, [&] { inner_.barrier(); });
}

std::unique_ptr<Communicator> RecordingCommunicator::split(int color, int key,
                                                           const std::string& name) {
  std::unique_ptr<Communicator> inner = inner_.split(color, key, name);
  auto wrapped = std::make_unique<RecordingCommunicator>(*inner);
  wrapped->owned_ = std::move(inner);
  return wrapped;
}

bool RecordingCommunicator::all_ranks_failing(double timeout_seconds) {
  return inner_.all_ranks_failing(timeout_seconds);
}

void RecordingCommunicator::abort(int exit_code) {
  inner_.abort(exit_code);
  std::_Exit(exit_code);  // not reached
}

double RecordingCommunicator::total_seconds() const {
  double total = 0.0;
  for (const CollectiveEvent& e : events_) total += e.seconds;
  return total;
}

}  // namespace colrow
