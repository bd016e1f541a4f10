// The entry of a tensor-parallel region (see tp_region_input.h).
#include "colrow/nn/tp_region_input.h"

#include <atomic>
#include <map>
#include <tuple>
#include <utility>

#include "colrow/core/error.h"
#include "colrow/dist/mappings.h"
#include "colrow/nn/shared_buffer.h"

namespace colrow {

// A shared buffer for gathered inputs (nn/shared_buffer.h), and the region
// whose gather it holds now.
struct SharedGatherBuffer {
  Tensor& data;
  uint64_t holder = 0;
};

namespace {

// One per shape, device and dtype, for the life of the program (map nodes never move).
SharedGatherBuffer& shared_gather(const Shape& shape, Device device, DType dtype) {
  static std::map<std::tuple<Shape, std::string, DType>, SharedGatherBuffer> buffers;
  const auto key = std::make_tuple(shape, device.str(), dtype);
  auto found = buffers.find(key);
  if (found == buffers.end()) {
    found = buffers
                .emplace(key, SharedGatherBuffer{shared_buffer("tp_region.gathered_input", shape,
                                                               device, dtype)})
                .first;
  }
  return found->second;
}

uint64_t next_region_id() {
  static std::atomic<uint64_t> next{1};
  return next++;
}

}  // namespace

TpRegionInput::TpRegionInput(Communicator& tp, bool sequence_parallel, bool overlap)
    : tp_(tp), sequence_parallel_(sequence_parallel), overlap_(overlap), id_(next_region_id()) {}

const Tensor& TpRegionInput::forward(const Tensor& x) {
  x_ = x;
  if (!sequence_parallel_) return x;  // [f fwd] identity: x is replicated over tp
  gathered_ = &shared_gather({x.size(0) * tp_.size(), x.size(1)}, x.device(), x.dtype());
  gathered_->holder = id_;
  gather_from_sp_forward(x, gathered_->data, tp_);  // all-gather the token blocks
  return gathered_->data;
}

void TpRegionInput::start_gather() {
  if (gathered_->holder == id_) return;  // nobody used it since this region's forward
  gathered_->holder = id_;
  gathering_ = tp_.start_all_gather(x_, gathered_->data);
  if (!overlap_) finish(gathering_);
}

void TpRegionInput::finish(std::unique_ptr<PendingCollective>& pending) {
  if (!pending) return;
  std::unique_ptr<PendingCollective> done = std::move(pending);
  done->wait();
}

Tensor& TpRegionInput::partial_grad() {
  COLROW_CHECK(x_.ndim() == 2, "TpRegionInput::partial_grad before forward");
  if (!sequence_parallel_) {
    return layer_buffer(dx_, shared_buffers_, "tp_region.dx", x_.shape(), x_.device(), x_.dtype());
  }
  start_gather();  // runs during the input-gradient GEMMs
  // Reduce-scattered before the next region's backward starts: one buffer for all.
  dx_ = shared_buffer("tp_region.partial_grad", {x_.size(0) * tp_.size(), x_.size(1)}, x_.device(),
                      x_.dtype());
  return dx_;
}

void TpRegionInput::reduce_partial_grad() {
  finish(gathering_);  // one collective at a time on tp
  if (sequence_parallel_) {
    layer_buffer(dx_local_, shared_buffers_, "tp_region.dx_block", x_.shape(), x_.device(),
                 x_.dtype());
    // reduce-scatter to my token block (gather_from_sp's backward)
    reducing_ = tp_.start_reduce_scatter_sum(dx_, dx_local_);
  } else {
    reducing_ = tp_.start_all_reduce_sum(dx_);  // [f bwd] all-reduce over tp
  }
  if (!overlap_) finish(reducing_);
}

const Tensor& TpRegionInput::input() {
  if (!sequence_parallel_) return x_;
  COLROW_CHECK(gathered_->holder == id_ && !gathering_,
               "TpRegionInput::input before reduce_partial_grad finished the gather");
  return gathered_->data;
}

const Tensor& TpRegionInput::grad() {
  finish(reducing_);
  return sequence_parallel_ ? dx_local_ : dx_;
}

void require_tokens_divisible(int64_t tokens, int tp, const char* what) {
  if (tokens % tp != 0) {
    throw InvalidInputError(std::string("[") + what + "] tokens (" + std::to_string(tokens) +
                            ") must be divisible by tp (" + std::to_string(tp) +
                            ") with sequence parallelism: each rank holds tokens / tp of them. "
                            "Choose --batch x --seq-len divisible by --tp.");
  }
}

}  // namespace colrow
