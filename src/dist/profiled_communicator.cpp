// Collectives timed as operations (profiled_communicator.h).
#include "colrow/dist/profiled_communicator.h"

#include <cstdlib>
#include <optional>
#include <utility>

#include "kernels/op_profile.h"

namespace colrow {
namespace {

// The bytes a rank hands the collective and gets back, each once: an
// achieved rate like nccl-tests' algorithm bandwidth.
kernels::OpWork moved(const Tensor& a, const Tensor* b = nullptr) {
  const int64_t bytes = a.bytes() + (b != nullptr ? b->bytes() : 0);
  return {0.0, static_cast<double>(bytes)};
}

// fn() inside an operation scope, unless the group is one rank (whose
// collectives return at once: a row of nothing at every tp 1).
template <typename Fn>
auto timed(const Communicator& c, const char* op, Device device, kernels::OpWork work, Fn&& fn) {
  std::optional<kernels::OpScope> scope;
  if (c.size() > 1) scope.emplace(op, device, work);
  return fn();
}

// Times the first wait() of a started collective (later ones return at once).
class ProfiledPending final : public PendingCollective {
 public:
  ProfiledPending(std::unique_ptr<PendingCollective> inner, const char* op, Device device,
                  kernels::OpWork work)
      : inner_(std::move(inner)), op_(op), device_(device), work_(work) {}
  void wait() override {
    if (waited_) {
      inner_->wait();
      return;
    }
    waited_ = true;
    const kernels::OpScope scope(op_, device_, work_);
    inner_->wait();
  }

 private:
  std::unique_ptr<PendingCollective> inner_;
  const char* op_;
  Device device_;
  kernels::OpWork work_;
  bool waited_ = false;
};

// start(): the collective started inside a "<op> (start)" scope, its handle
// timed at wait() as "<op> (wait)".
template <typename Start>
std::unique_ptr<PendingCollective> started(const Communicator& c, const char* start_op,
                                           const char* wait_op, Device device, kernels::OpWork work,
                                           Start&& start) {
  std::unique_ptr<PendingCollective> inner = timed(c, start_op, device, work, start);
  // Nothing to time at its wait: a group of one, or profiling off (a handle
  // started before --profile's steps keeps its wait untimed).
  if (c.size() == 1 || !kernels::op_profiling()) return inner;
  return std::make_unique<ProfiledPending>(std::move(inner), wait_op, device, work);
}

}  // namespace

ProfiledCommunicator::ProfiledCommunicator(std::unique_ptr<Communicator> inner)
    : inner_(std::move(inner)) {}

void ProfiledCommunicator::all_reduce_sum(Tensor& x) {
  timed(*this, "all_reduce_sum", x.device(), moved(x), [&] { inner_->all_reduce_sum(x); });
}

void ProfiledCommunicator::all_reduce_max(Tensor& x) {
  timed(*this, "all_reduce_max", x.device(), moved(x), [&] { inner_->all_reduce_max(x); });
}

void ProfiledCommunicator::all_gather(const Tensor& in, Tensor& out) {
  timed(*this, "all_gather", out.device(), moved(in, &out), [&] { inner_->all_gather(in, out); });
}

void ProfiledCommunicator::reduce_scatter_sum(const Tensor& in, Tensor& out) {
  timed(*this, "reduce_scatter_sum", out.device(), moved(in, &out),
        [&] { inner_->reduce_scatter_sum(in, out); });
}

void ProfiledCommunicator::broadcast(Tensor& x, int root) {
  timed(*this, "broadcast", x.device(), moved(x), [&] { inner_->broadcast(x, root); });
}

void ProfiledCommunicator::all_reduce_sum_bf16_wire(Tensor& x) {
  timed(*this, "all_reduce_sum_bf16_wire", x.device(), moved(x),
        [&] { inner_->all_reduce_sum_bf16_wire(x); });
}

void ProfiledCommunicator::reduce_scatter_sum_bf16_wire(const Tensor& in, Tensor& out) {
  timed(*this, "reduce_scatter_sum_bf16_wire", out.device(), moved(in, &out),
        [&] { inner_->reduce_scatter_sum_bf16_wire(in, out); });
}

std::unique_ptr<PendingCollective> ProfiledCommunicator::start_all_reduce_sum(Tensor& x) {
  return started(*this, "all_reduce_sum (start)", "all_reduce_sum (wait)", x.device(), moved(x),
                 [&] { return inner_->start_all_reduce_sum(x); });
}

std::unique_ptr<PendingCollective> ProfiledCommunicator::start_all_gather(const Tensor& in,
                                                                          Tensor& out) {
  return started(*this, "all_gather (start)", "all_gather (wait)", out.device(), moved(in, &out),
                 [&] { return inner_->start_all_gather(in, out); });
}

std::unique_ptr<PendingCollective> ProfiledCommunicator::start_reduce_scatter_sum(const Tensor& in,
                                                                                  Tensor& out) {
  return started(*this, "reduce_scatter_sum (start)", "reduce_scatter_sum (wait)", out.device(),
                 moved(in, &out), [&] { return inner_->start_reduce_scatter_sum(in, out); });
}

std::unique_ptr<PendingCollective> ProfiledCommunicator::start_all_reduce_sum_bf16_wire(Tensor& x) {
  return started(*this, "all_reduce_sum_bf16_wire (start)", "all_reduce_sum_bf16_wire (wait)",
                 x.device(), moved(x), [&] { return inner_->start_all_reduce_sum_bf16_wire(x); });
}

std::unique_ptr<PendingCollective> ProfiledCommunicator::start_reduce_scatter_sum_bf16_wire(
    const Tensor& in, Tensor& out) {
  return started(*this, "reduce_scatter_sum_bf16_wire (start)",
                 "reduce_scatter_sum_bf16_wire (wait)", out.device(), moved(in, &out),
                 [&] { return inner_->start_reduce_scatter_sum_bf16_wire(in, out); });
}

std::unique_ptr<PendingCollective> ProfiledCommunicator::start_send(const Tensor& x, int dst,
                                                                    int tag) {
  return started(*this, "send (start)", "send (wait)", x.device(), moved(x),
                 [&] { return inner_->start_send(x, dst, tag); });
}

void ProfiledCommunicator::recv(Tensor& x, int src, int tag) {
  timed(*this, "recv", x.device(), moved(x), [&] { inner_->recv(x, src, tag); });
}

std::unique_ptr<Communicator> ProfiledCommunicator::split(int color, int key,
                                                          const std::string& name) {
  return std::make_unique<ProfiledCommunicator>(inner_->split(color, key, name));
}

void ProfiledCommunicator::abort(int exit_code) {
  inner_->abort(exit_code);
  std::_Exit(exit_code);  // not reached
}

}  // namespace colrow
