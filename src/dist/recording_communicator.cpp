// Forwards each collective and appends what it did to the event list.
#include "colrow/dist/recording_communicator.h"

#include <chrono>
#include <cstdlib>

namespace colrow {

template <typename Fn>
void RecordingCommunicator::record(const char* op, int64_t count, Fn&& fn) {
  const auto start = std::chrono::steady_clock::now();
  fn();
  const std::chrono::duration<double> elapsed = std::chrono::steady_clock::now() - start;
  events_.push_back({op, count, elapsed.count()});
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
