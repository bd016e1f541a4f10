// Megatron's region mappings (mappings.py): one collective each, or none.
// Collectives concatenate along dim 0, so last-dim gathers go through a
// [tp, tokens, h/tp] staging buffer and are rearranged here.
#include "colrow/dist/mappings.h"

#include <map>
#include <tuple>

#include "colrow/core/error.h"

namespace colrow {
namespace {

// A growth-only staging buffer per device and dtype, on the shard's device
// (a collective takes its tensors on one device), so repeated steps do not
// allocate.
Tensor staging(const Shape& shape, Device device, DType dtype) {
  thread_local std::map<std::tuple<Device::Kind, int, DType>, Tensor> buffers;
  Tensor& buffer = buffers[{device.kind, device.index, dtype}];
  if (buffer.numel() < shape_numel(shape)) {
    buffer = Tensor::empty({shape_numel(shape)}, device, dtype);
  }
  return buffer.slice(0, 0, shape_numel(shape)).view(shape);
}

void require_shape(const Tensor& t, const Shape& expected, const char* what) {
  if (t.shape() != expected) {
    throw InternalError(std::string("[mappings] ") + what + " has shape " +
                        shape_to_string(t.shape()) + ", expected " + shape_to_string(expected));
  }
}

// Shape of `full` with its dim `dim` divided by tp (which must divide it).
Shape split_shape(const Tensor& full, int dim, int tp, const char* what) {
  Shape s = full.shape();
  const int d = dim < 0 ? dim + full.ndim() : dim;
  if (s[d] % tp != 0) {
    throw InternalError(std::string("[mappings] ") + what + ": dim of size " +
                        std::to_string(s[d]) + " is not divisible by tp (" + std::to_string(tp) +
                        ")");
  }
  s[d] /= tp;
  return s;
}

// All-gather last-dim shards: local [tokens, h/tp] -> full [tokens, h].
void all_gather_last_dim(const Tensor& local, Tensor& full, Communicator& tp) {
  require_shape(local, split_shape(full, -1, tp.size(), "all-gather last dim"), "local shard");
  Shape stacked = local.shape();
  stacked.insert(stacked.begin(), tp.size());
  Tensor buffer = staging(stacked, local.device(), local.dtype());
  const Tensor send = local.is_contiguous() ? local : local.clone();
  tp.all_gather(send, buffer);  // [tp, tokens, h/tp]: rank r's block at r
  for (int r = 0; r < tp.size(); ++r) {
    full.shard(-1, r, tp.size()).copy_from(buffer.slice(0, r, 1).view(local.shape()));
  }
}

}  // namespace

void copy_to_tp_forward(Tensor&, Communicator&) {}  // [f fwd] identity

void copy_to_tp_backward(Tensor& dx, Communicator& tp) {
  tp.all_reduce_sum(dx);  // [f bwd] all-reduce partial input gradients over tp
}

void reduce_from_tp_forward(Tensor& y, Communicator& tp) {
  tp.all_reduce_sum(y);  // [g fwd] all-reduce partial outputs over tp
}

void reduce_from_tp_backward(Tensor&, Communicator&) {}  // [g bwd] identity: dy is replicated

void scatter_to_tp_forward(const Tensor& x, Tensor& x_local, Communicator& tp) {
  require_shape(x_local, split_shape(x, -1, tp.size(), "scatter_to_tp"), "x_local");
  x_local.copy_from(x.shard(-1, tp.rank(), tp.size()));  // no communication: keep my slice
}

void scatter_to_tp_backward(const Tensor& dx_local, Tensor& dx, Communicator& tp) {
  all_gather_last_dim(dx_local, dx, tp);
}

void gather_from_tp_forward(const Tensor& x_local, Tensor& x, Communicator& tp) {
  all_gather_last_dim(x_local, x, tp);
}

void gather_from_tp_backward(const Tensor& dx, Tensor& dx_local, Communicator& tp) {
  require_shape(dx_local, split_shape(dx, -1, tp.size(), "gather_from_tp"), "dx_local");
  dx_local.copy_from(dx.shard(-1, tp.rank(), tp.size()));  // no communication: keep my slice
}

void gather_from_sp_forward(const Tensor& x_local, Tensor& x, Communicator& tp) {
  require_shape(x_local, split_shape(x, 0, tp.size(), "gather_from_sp"), "x_local");
  tp.all_gather(x_local, x);  // [sp fwd] all-gather token blocks
}

void gather_from_sp_backward(const Tensor& dx, Tensor& dx_local, Communicator& tp) {
  require_shape(dx_local, split_shape(dx, 0, tp.size(), "gather_from_sp"), "dx_local");
  tp.reduce_scatter_sum(dx, dx_local);  // [sp bwd] reduce-scatter token blocks
}

void reduce_scatter_to_sp_forward(const Tensor& x, Tensor& x_local, Communicator& tp) {
  require_shape(x_local, split_shape(x, 0, tp.size(), "reduce_scatter_to_sp"), "x_local");
  tp.reduce_scatter_sum(x, x_local);  // [sp fwd] reduce-scatter token blocks
}

void reduce_scatter_to_sp_backward(const Tensor& dx_local, Tensor& dx, Communicator& tp) {
  require_shape(dx_local, split_shape(dx, 0, tp.size(), "reduce_scatter_to_sp"), "dx_local");
  tp.all_gather(dx_local, dx);  // [sp bwd] all-gather token blocks
}

}  // namespace colrow
