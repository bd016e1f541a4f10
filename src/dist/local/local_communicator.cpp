// The size-1 communicator: collectives over one rank are copies or nothing.
#include "colrow/dist/local_communicator.h"

#include <cstdlib>

#include "colrow/core/error.h"

namespace colrow {

void LocalCommunicator::all_gather(const Tensor& in, Tensor& out) {
  if (in.data() != out.data()) out.copy_from(in);
}

void LocalCommunicator::reduce_scatter_sum(const Tensor& in, Tensor& out) {
  if (in.data() != out.data()) out.copy_from(in);
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

void LocalCommunicator::abort(int exit_code) { std::_Exit(exit_code); }

}  // namespace colrow
