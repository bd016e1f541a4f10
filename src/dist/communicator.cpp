// The blocking defaults of Communicator's start_* collectives (see communicator.h).
#include "colrow/dist/communicator.h"

namespace colrow {
namespace {

// The collective already ran when this was made.
class FinishedCollective final : public PendingCollective {
 public:
  void wait() override {}
};

}  // namespace

std::unique_ptr<PendingCollective> Communicator::start_all_reduce_sum(Tensor& x) {
  all_reduce_sum(x);
  return std::make_unique<FinishedCollective>();
}

std::unique_ptr<PendingCollective> Communicator::start_all_gather(const Tensor& in, Tensor& out) {
  all_gather(in, out);
  return std::make_unique<FinishedCollective>();
}

std::unique_ptr<PendingCollective> Communicator::start_reduce_scatter_sum(const Tensor& in,
                                                                          Tensor& out) {
  reduce_scatter_sum(in, out);
  return std::make_unique<FinishedCollective>();
}

std::unique_ptr<PendingCollective> Communicator::start_all_reduce_sum_bf16_wire(Tensor& x) {
  all_reduce_sum_bf16_wire(x);
  return std::make_unique<FinishedCollective>();
}

std::unique_ptr<PendingCollective> Communicator::start_reduce_scatter_sum_bf16_wire(
    const Tensor& in, Tensor& out) {
  reduce_scatter_sum_bf16_wire(in, out);
  return std::make_unique<FinishedCollective>();
}

}  // namespace colrow
