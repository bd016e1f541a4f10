// Host-staged MPI collectives for GPU tensors (see dist/staged_communicator.h).
// Per collective: device -> host copy into the staging buffer, the MPI
// collective on it, host -> device copy back. Tensor::copy_from queues the
// copies on the device's compute stream and returns when the host side is
// done, so the staging buffer is free again when a collective returns. Uses
// only Tensor, so it builds (and its tests skip) without CUDA.
#include "colrow/dist/staged_communicator.h"

#include <cstdlib>
#include <initializer_list>
#include <utility>

#include "colrow/core/error.h"

namespace colrow {
namespace {

// Same message as the MPI backend's.
void require_contiguous(const Tensor& t, const char* what, const std::string& group) {
  if (!t.is_contiguous()) {
    throw InternalError("[dist] " + std::string(what) + " over " + group +
                        " needs a contiguous tensor, got strides of shape " +
                        shape_to_string(t.shape()));
  }
}

// True when every operand is a host tensor (MPI takes them as they are), false
// when every one lives on `device` (they are staged); InternalError for a mix
// or another GPU.
bool all_on_host(const char* what, const std::string& group, Device device,
                 std::initializer_list<const Tensor*> operands) {
  bool host = true, staged = true;
  std::string places;
  for (const Tensor* t : operands) {
    host = host && t->device().is_cpu();
    staged = staged && t->device() == device;
    places += (places.empty() ? "" : " and ") + t->device().str();
  }
  if (host) return true;
  if (staged) return false;
  throw InternalError("[dist] " + std::string(what) + " over " + group +
                      " takes its tensors all on the host or all on " + device.str() +
                      ", got them on " + places);
}

}  // namespace

StagedCommunicator::StagedCommunicator(std::unique_ptr<Communicator> host, Device device)
    : host_(std::move(host)), device_(device) {
  COLROW_CHECK(host_ != nullptr, "StagedCommunicator needs the group's MPI communicator");
  COLROW_CHECK(device_.is_cuda(), "StagedCommunicator stages GPU tensors, not " + device_.str());
}

void StagedCommunicator::reserve(int64_t count) {
  // A default Tensor is a 0-d scalar (numel 1) with no storage: capacity 0.
  const int64_t capacity = staging_.owns_storage() ? staging_.numel() : 0;
  if (capacity >= count) return;
  // Grows to the largest collective so far; a step repeats the same sizes, so
  // this happens during the first step only.
  staging_ = Tensor::empty({count});
  ++staging_allocations_;
}

Tensor StagedCommunicator::staging(int64_t offset, const Shape& shape) {
  const int64_t count = shape_numel(shape);
  COLROW_CHECK(staging_.owns_storage() && offset + count <= staging_.numel(),
               "staging view past the reserved buffer");
  return staging_.slice(0, offset, count).view(shape);
}

template <typename Fn>
void StagedCommunicator::all_reduce(Tensor& x, const char* what, Fn&& reduce) {
  if (all_on_host(what, name(), device_, {&x})) {
    reduce(x);
    return;
  }
  require_contiguous(x, what, name());  // at every size, as the MPI backend does
  if (size() == 1 || x.numel() == 0) return;
  reserve(x.numel());
  Tensor h = staging(0, x.shape());
  h.copy_from(x);  // waits for the kernels that wrote x
  reduce(h);
  x.copy_from(h);
}

void StagedCommunicator::all_reduce_sum(Tensor& x) {
  all_reduce(x, "all_reduce_sum", [this](Tensor& t) { host_->all_reduce_sum(t); });
}

void StagedCommunicator::all_reduce_max(Tensor& x) {
  all_reduce(x, "all_reduce_max", [this](Tensor& t) { host_->all_reduce_max(t); });
}

void StagedCommunicator::all_gather(const Tensor& in, Tensor& out) {
  if (all_on_host("all_gather", name(), device_, {&in, &out})) {
    host_->all_gather(in, out);
    return;
  }
  require_contiguous(in, "all_gather", name());
  require_contiguous(out, "all_gather", name());
  if (out.numel() != in.numel() * size()) {
    throw InternalError("[dist] all_gather over " + name() + ": output " +
                        shape_to_string(out.shape()) + " must hold " + std::to_string(size()) +
                        " x input " + shape_to_string(in.shape()));
  }
  if (size() == 1) {
    if (in.data() != out.data()) out.copy_from(in.view(out.shape()));
    return;
  }
  if (in.numel() == 0) return;
  // in: [n, ...] at [0, n), out: [size*n, ...] at [n, (size+1)*n)
  reserve(in.numel() + out.numel());
  Tensor h_in = staging(0, in.shape());
  Tensor h_out = staging(in.numel(), out.shape());
  h_in.copy_from(in);
  host_->all_gather(h_in, h_out);
  out.copy_from(h_out);
}

void StagedCommunicator::reduce_scatter_sum(const Tensor& in, Tensor& out) {
  if (all_on_host("reduce_scatter_sum", name(), device_, {&in, &out})) {
    host_->reduce_scatter_sum(in, out);
    return;
  }
  require_contiguous(in, "reduce_scatter_sum", name());
  require_contiguous(out, "reduce_scatter_sum", name());
  if (in.numel() != out.numel() * size()) {
    throw InternalError("[dist] reduce_scatter_sum over " + name() + ": input " +
                        shape_to_string(in.shape()) + " must hold " + std::to_string(size()) +
                        " x output " + shape_to_string(out.shape()));
  }
  if (size() == 1) {
    if (in.data() != out.data()) out.copy_from(in.view(out.shape()));
    return;
  }
  if (out.numel() == 0) return;
  // in: [size*n, ...] at [0, size*n), out: [n, ...] after it
  reserve(in.numel() + out.numel());
  Tensor h_in = staging(0, in.shape());
  Tensor h_out = staging(in.numel(), out.shape());
  h_in.copy_from(in);
  host_->reduce_scatter_sum(h_in, h_out);
  out.copy_from(h_out);
}

void StagedCommunicator::broadcast(Tensor& x, int root) {
  if (all_on_host("broadcast", name(), device_, {&x})) {
    host_->broadcast(x, root);
    return;
  }
  require_contiguous(x, "broadcast", name());
  if (root < 0 || root >= size()) {
    throw InternalError("[dist] broadcast root (" + std::to_string(root) + ") must be a rank of " +
                        name() + " (size " + std::to_string(size()) + ")");
  }
  if (size() == 1 || x.numel() == 0) return;
  reserve(x.numel());
  Tensor h = staging(0, x.shape());
  if (rank() == root) h.copy_from(x);  // the others' values are overwritten anyway
  host_->broadcast(h, root);
  x.copy_from(h);
}

void StagedCommunicator::barrier() {
  host_->barrier();
}

std::unique_ptr<Communicator> StagedCommunicator::split(int color, int key,
                                                        const std::string& name) {
  return std::make_unique<StagedCommunicator>(host_->split(color, key, name), device_);
}

bool StagedCommunicator::all_ranks_failing(double timeout_seconds) {
  return host_->all_ranks_failing(timeout_seconds);
}

void StagedCommunicator::abort(int exit_code) {
  host_->abort(exit_code);
  std::_Exit(exit_code);  // not reached
}

}  // namespace colrow
