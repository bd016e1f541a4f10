// The checks and host routing shared by the GPU communicators (see
// device_group_communicator.h); the backends only move GPU data.
#include "dist/device_group_communicator.h"

#include <cstdlib>
#include <utility>

#include "colrow/core/error.h"
#include "dist/collective_checks.h"
#include "dist/fp32_wire.h"

namespace colrow {

using collective_checks::require_contiguous;

DeviceGroupCommunicator::DeviceGroupCommunicator(std::unique_ptr<Communicator> host, Device device,
                                                 const char* kind)
    : host_(std::move(host)), device_(device) {
  COLROW_CHECK(host_ != nullptr, std::string(kind) + " needs the group's MPI communicator");
  COLROW_CHECK(device_.is_cuda(), std::string(kind) + " runs on a GPU, not " + device_.str());
}

bool DeviceGroupCommunicator::all_on_host(const char* what,
                                          std::initializer_list<const Tensor*> operands) const {
  bool host = true, here = true;
  std::string places;
  for (const Tensor* t : operands) {
    host = host && t->device().is_cpu();
    here = here && t->device() == device_;
    places += (places.empty() ? "" : " and ") + t->device().str();
  }
  if (host) return true;
  if (here) return false;
  throw InternalError("[dist] " + std::string(what) + " over " + name() +
                      " takes its tensors all on the host or all on " + device_.str() +
                      ", got them on " + places);
}

// One body for the fp32-wire collectives (bf16 tensors cross as fp32,
// dist/fp32_wire.h) and the bf16 wire's (bf16 handed to the backend as is).
void DeviceGroupCommunicator::all_reduce(Tensor& x, Reduction reduction, Wire wire) {
  const bool bf16_wire = wire == Wire::kBf16;
  const char* what = bf16_wire                      ? "all_reduce_sum_bf16_wire"
                     : reduction == Reduction::kSum ? "all_reduce_sum"
                                                    : "all_reduce_max";
  if (all_on_host(what, {&x})) {
    if (bf16_wire) {
      host_->all_reduce_sum_bf16_wire(x);
    } else if (reduction == Reduction::kSum) {
      host_->all_reduce_sum(x);
    } else {
      host_->all_reduce_max(x);
    }
    return;
  }
  require_contiguous(x, what, name());
  if (bf16_wire) collective_checks::require_bf16({&x}, what, name());
  if (size() == 1 || x.numel() == 0) return;
  if (!bf16_wire && wire_.run(x, [&](Tensor& w) { device_all_reduce(w, reduction); })) {
    return;
  }
  device_all_reduce(x, reduction);
}

void DeviceGroupCommunicator::all_reduce_sum(Tensor& x) {
  all_reduce(x, Reduction::kSum, Wire::kFp32);
}

void DeviceGroupCommunicator::all_reduce_max(Tensor& x) {
  all_reduce(x, Reduction::kMax, Wire::kFp32);
}

void DeviceGroupCommunicator::all_reduce_sum_bf16_wire(Tensor& x) {
  all_reduce(x, Reduction::kSum, Wire::kBf16);
}

void DeviceGroupCommunicator::all_gather(const Tensor& in, Tensor& out) {
  if (all_on_host("all_gather", {&in, &out})) {
    host_->all_gather(in, out);
    return;
  }
  require_contiguous(in, "all_gather", name());
  require_contiguous(out, "all_gather", name());
  collective_checks::require_gather_sizes(in, out, size(), name());
  if (size() == 1) {
    if (in.raw_data() != out.raw_data()) out.copy_from(in.view(out.shape()));  // queued, on the GPU
    return;
  }
  if (in.numel() == 0) return;
  if (wire_.run(in, out,
                         [this](const Tensor& i, Tensor& o) { device_all_gather(i, o); })) {
    return;
  }
  device_all_gather(in, out);
}

void DeviceGroupCommunicator::reduce_scatter(const Tensor& in, Tensor& out, Wire wire) {
  const bool bf16_wire = wire == Wire::kBf16;
  const char* what = bf16_wire ? "reduce_scatter_sum_bf16_wire" : "reduce_scatter_sum";
  if (all_on_host(what, {&in, &out})) {
    if (bf16_wire) {
      host_->reduce_scatter_sum_bf16_wire(in, out);
    } else {
      host_->reduce_scatter_sum(in, out);
    }
    return;
  }
  require_contiguous(in, what, name());
  require_contiguous(out, what, name());
  if (bf16_wire) collective_checks::require_bf16({&in, &out}, what, name());
  collective_checks::require_scatter_sizes(in, out, size(), name());
  if (size() == 1) {
    if (in.raw_data() != out.raw_data()) out.copy_from(in.view(out.shape()));  // queued, on the GPU
    return;
  }
  if (out.numel() == 0) return;
  if (!bf16_wire && wire_.run(in, out, [this](const Tensor& i, Tensor& o) {
        device_reduce_scatter_sum(i, o);
      })) {
    return;
  }
  device_reduce_scatter_sum(in, out);
}

void DeviceGroupCommunicator::reduce_scatter_sum(const Tensor& in, Tensor& out) {
  reduce_scatter(in, out, Wire::kFp32);
}

void DeviceGroupCommunicator::reduce_scatter_sum_bf16_wire(const Tensor& in, Tensor& out) {
  reduce_scatter(in, out, Wire::kBf16);
}

namespace {

class FinishedOnDevice final : public PendingCollective {
 public:
  void wait() override {}
};

}  // namespace

std::unique_ptr<PendingCollective> DeviceGroupCommunicator::device_start(
    const std::function<void()>& collective) {
  collective();
  return std::make_unique<FinishedOnDevice>();
}

std::unique_ptr<PendingCollective> DeviceGroupCommunicator::start_all_reduce_sum(Tensor& x) {
  if (all_on_host("start_all_reduce_sum", {&x})) return host_->start_all_reduce_sum(x);
  if (x.dtype() != DType::kF32) return Communicator::start_all_reduce_sum(x);
  return device_start([this, &x] { all_reduce_sum(x); });
}

std::unique_ptr<PendingCollective> DeviceGroupCommunicator::start_all_gather(const Tensor& in,
                                                                             Tensor& out) {
  if (all_on_host("start_all_gather", {&in, &out})) return host_->start_all_gather(in, out);
  if (in.dtype() != DType::kF32 || out.dtype() != DType::kF32) {
    return Communicator::start_all_gather(in, out);
  }
  return device_start([this, &in, &out] { all_gather(in, out); });
}

std::unique_ptr<PendingCollective> DeviceGroupCommunicator::start_reduce_scatter_sum(
    const Tensor& in, Tensor& out) {
  if (all_on_host("start_reduce_scatter_sum", {&in, &out})) {
    return host_->start_reduce_scatter_sum(in, out);
  }
  if (in.dtype() != DType::kF32 || out.dtype() != DType::kF32) {
    return Communicator::start_reduce_scatter_sum(in, out);
  }
  return device_start([this, &in, &out] { reduce_scatter_sum(in, out); });
}

std::unique_ptr<PendingCollective> DeviceGroupCommunicator::start_all_reduce_sum_bf16_wire(
    Tensor& x) {
  if (all_on_host("start_all_reduce_sum_bf16_wire", {&x})) {
    return host_->start_all_reduce_sum_bf16_wire(x);
  }
  return device_start([this, &x] { all_reduce_sum_bf16_wire(x); });
}

std::unique_ptr<PendingCollective> DeviceGroupCommunicator::start_reduce_scatter_sum_bf16_wire(
    const Tensor& in, Tensor& out) {
  if (all_on_host("start_reduce_scatter_sum_bf16_wire", {&in, &out})) {
    return host_->start_reduce_scatter_sum_bf16_wire(in, out);
  }
  return device_start([this, &in, &out] { reduce_scatter_sum_bf16_wire(in, out); });
}

void DeviceGroupCommunicator::broadcast(Tensor& x, int root) {
  if (all_on_host("broadcast", {&x})) {
    host_->broadcast(x, root);
    return;
  }
  require_contiguous(x, "broadcast", name());
  collective_checks::require_root(root, size(), name());
  if (size() == 1 || x.numel() == 0) return;
  if (wire_.run(x, [&](Tensor& w) { device_broadcast(w, root); })) return;
  device_broadcast(x, root);
}

std::unique_ptr<PendingCollective> DeviceGroupCommunicator::start_send(const Tensor& x, int dst,
                                                                       int tag) {
  if (all_on_host("send", {&x})) return host_->start_send(x, dst, tag);
  require_contiguous(x, "send", name());
  collective_checks::require_peer_and_tag(dst, "dst", tag, rank(), size(), "send", name());
  return device_start_send(x, dst, tag);
}

void DeviceGroupCommunicator::recv(Tensor& x, int src, int tag) {
  if (all_on_host("recv", {&x})) {
    host_->recv(x, src, tag);
    return;
  }
  require_contiguous(x, "recv", name());
  collective_checks::require_peer_and_tag(src, "src", tag, rank(), size(), "recv", name());
  device_recv(x, src, tag);
}

void DeviceGroupCommunicator::barrier() {
  host_->barrier();
}

std::unique_ptr<Communicator> DeviceGroupCommunicator::split(int color, int key,
                                                             const std::string& name) {
  return over(host_->split(color, key, name));
}

bool DeviceGroupCommunicator::all_ranks_failing(double timeout_seconds) {
  return host_->all_ranks_failing(timeout_seconds);
}

void DeviceGroupCommunicator::abort(int exit_code) {
  host_->abort(exit_code);
  std::_Exit(exit_code);  // not reached
}

}  // namespace colrow
