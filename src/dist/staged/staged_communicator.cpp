// Host-staged MPI collectives for GPU tensors (see staged_communicator.h).
// Per collective: device -> host copy into the staging buffer, the MPI
// collective on it, host -> device copy back; messages likewise (a send
// through a host copy of its own). Tensor::copy_from queues the
// copies on the device's compute stream and returns when the host side is
// done, so the staging buffer is free again when a collective returns.
#include "dist/staged/staged_communicator.h"

#include <algorithm>
#include <utility>

#include "colrow/core/error.h"

namespace colrow {

StagedCommunicator::StagedCommunicator(std::unique_ptr<Communicator> host, Device device)
    : DeviceGroupCommunicator(std::move(host), device, "StagedCommunicator") {}

void StagedCommunicator::reserve(int64_t count, DType dtype) {
  Tensor& buffer = staging(dtype);
  // A default Tensor is a 0-d scalar (numel 1) with no storage: capacity 0.
  const int64_t capacity = buffer.owns_storage() ? buffer.numel() : 0;
  if (capacity >= count) return;
  // Grows to the largest collective so far; a step repeats the same sizes, so
  // this happens during the first step only.
  buffer = Tensor::empty({count}, Device::cpu(), dtype);
  ++staging_allocations_;
}

Tensor StagedCommunicator::staged(const Shape& shape, int64_t offset, DType dtype) {
  const Tensor& buffer = staging(dtype);
  const int64_t count = shape_numel(shape);
  COLROW_CHECK(buffer.owns_storage() && offset + count <= buffer.numel(),
               "staging view past the reserved buffer");
  return buffer.slice(0, offset, count).view(shape);
}

// bf16 operands come from the bf16 wire's sums only, and go to the host's.
void StagedCommunicator::device_all_reduce(Tensor& x, Reduction reduction) {
  reserve(x.numel(), x.dtype());
  Tensor h = staged(x.shape(), 0, x.dtype());
  h.copy_from(x);  // waits for the kernels that wrote x
  if (x.dtype() == DType::kBF16) {
    host().all_reduce_sum_bf16_wire(h);
  } else if (reduction == Reduction::kSum) {
    host().all_reduce_sum(h);
  } else {
    host().all_reduce_max(h);
  }
  x.copy_from(h);
}

void StagedCommunicator::device_all_gather(const Tensor& in, Tensor& out) {
  // in: [n, ...] at [0, n), out: [size*n, ...] at [n, (size+1)*n)
  reserve(in.numel() + out.numel());
  Tensor h_in = staged(in.shape()), h_out = staged(out.shape(), in.numel());
  h_in.copy_from(in);
  host().all_gather(h_in, h_out);
  out.copy_from(h_out);
}

void StagedCommunicator::device_reduce_scatter_sum(const Tensor& in, Tensor& out) {
  // in: [size*n, ...] at [0, size*n), out: [n, ...] after it
  const DType dtype = in.dtype();
  reserve(in.numel() + out.numel(), dtype);
  Tensor h_in = staged(in.shape(), 0, dtype), h_out = staged(out.shape(), in.numel(), dtype);
  h_in.copy_from(in);
  if (dtype == DType::kBF16) {
    host().reduce_scatter_sum_bf16_wire(h_in, h_out);
  } else {
    host().reduce_scatter_sum(h_in, h_out);
  }
  out.copy_from(h_out);
}

void StagedCommunicator::device_broadcast(Tensor& x, int root) {
  reserve(x.numel());
  Tensor h = staged(x.shape());
  if (rank() == root) h.copy_from(x);  // the others' values are overwritten anyway
  host().broadcast(h, root);
  x.copy_from(h);
}

namespace {

// An MPI send from a host copy: the copy outlives the send, since members are
// destroyed in reverse order and the send's destructor waits.
class StagedSend final : public PendingCollective {
 public:
  StagedSend(Tensor host_copy, std::unique_ptr<PendingCollective> send)
      : host_copy_(std::move(host_copy)), send_(std::move(send)) {}
  void wait() override { send_->wait(); }

 private:
  Tensor host_copy_;
  std::unique_ptr<PendingCollective> send_;
};

}  // namespace

std::unique_ptr<PendingCollective> StagedCommunicator::device_start_send(const Tensor& x, int dst,
                                                                         int tag) {
  Tensor h = Tensor::empty(x.shape(), Device::cpu(), x.dtype());
  h.copy_from(x);  // waits for the kernels that wrote x
  std::unique_ptr<PendingCollective> send = host().start_send(h, dst, tag);
  return std::make_unique<StagedSend>(std::move(h), std::move(send));
}

void StagedCommunicator::device_recv(Tensor& x, int src, int tag) {
  // An empty message still pairs with its send.
  reserve(std::max<int64_t>(x.numel(), 1), x.dtype());
  Tensor h = staged(x.shape(), 0, x.dtype());
  host().recv(h, src, tag);
  x.copy_from(h);
}

std::unique_ptr<Communicator> StagedCommunicator::over(std::unique_ptr<Communicator> host) {
  return std::make_unique<StagedCommunicator>(std::move(host), device());
}

}  // namespace colrow
