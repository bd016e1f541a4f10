// The size-1 communicator: collectives over one rank are copies or nothing.
#include "colrow/dist/local_communicator.h"

#include <cstdlib>

#include "colrow/core/error.h"
#include "dist/collective_checks.h"

namespace colrow {

namespace {

// A group of one gathers or scatters by copying; element counts must agree,
// shapes may differ as they may under MPI (dim-0 concatenation).
void copy_whole(const Tensor& in, Tensor& out, const char* what) {
  if (!in.is_contiguous() || !out.is_contiguous() || in.numel() != out.numel()) {
    throw InternalError(std::string("[dist] ") + what + " over a group of one needs contiguous " +
                        "tensors of one element count, got " + shape_to_string(in.shape()) +
                        " and " + shape_to_string(out.shape()));
  }
  if (in.raw_data() != out.raw_data()) out.copy_from(in.view(out.shape()));
}

[[noreturn]] void no_peer(const char* what, const char* role, int peer, const std::string& group) {
  throw InternalError("[dist] " + std::string(what) + " over " + group + ": " + role + " (" +
                      std::to_string(peer) + ") must be another rank, but " + group +
                      " is a group of one, which has no peer.");
}

}  // namespace

std::unique_ptr<PendingCollective> LocalCommunicator::start_send(const Tensor&, int dst, int) {
  no_peer("send", "dst", dst, name_);
}

void LocalCommunicator::recv(Tensor&, int src, int) {
  no_peer("recv", "src", src, name_);
}

void LocalCommunicator::all_gather(const Tensor& in, Tensor& out) {
  copy_whole(in, out, "all_gather");
}

void LocalCommunicator::reduce_scatter_sum(const Tensor& in, Tensor& out) {
  copy_whole(in, out, "reduce_scatter_sum");
}

void LocalCommunicator::all_reduce_sum_bf16_wire(Tensor& x) {
  collective_checks::require_bf16({&x}, "all_reduce_sum_bf16_wire", name_);
}

void LocalCommunicator::reduce_scatter_sum_bf16_wire(const Tensor& in, Tensor& out) {
  collective_checks::require_bf16({&in, &out}, "reduce_scatter_sum_bf16_wire", name_);
  copy_whole(in, out, "reduce_scatter_sum_bf16_wire");
}

void LocalCommunicator::broadcast(Tensor&, int root) {
  if (root != 0) {
    throw InternalError("[dist] broadcast root (" + std::to_string(root) +
                        ") must be 0 in a group of size 1");
  }
}

std::unique_ptr<Communicator> LocalCommunicator::split(int, int, const std::string& name) {
  return std::make_unique<LocalCommunicator>(name);
}

void LocalCommunicator::abort(int exit_code) {
  std::_Exit(exit_code);
}

}  // namespace colrow
