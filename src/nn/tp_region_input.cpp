// The entry of a tensor-parallel region (see tp_region_input.h).
#include "colrow/nn/tp_region_input.h"

#include "colrow/core/error.h"
#include "colrow/dist/mappings.h"

namespace colrow {

TpRegionInput::TpRegionInput(Communicator& tp, bool sequence_parallel)
    : tp_(tp), sequence_parallel_(sequence_parallel) {}

const Tensor& TpRegionInput::forward(const Tensor& x) {
  device_ = x.device();
  if (!sequence_parallel_) {
    shape_ = x.shape();
    return x;  // [f fwd] identity: x is replicated over tp
  }
  shape_ = {x.size(0) * tp_.size(), x.size(1)};
  ensure_shape(gathered_, shape_, x.device());
  gather_from_sp_forward(x, gathered_, tp_);  // all-gather the token blocks
  return gathered_;
}

Tensor& TpRegionInput::partial_grad() {
  COLROW_CHECK(!shape_.empty(), "TpRegionInput::partial_grad before forward");
  ensure_shape(dx_, shape_, device_);
  return dx_;
}

const Tensor& TpRegionInput::backward() {
  if (!sequence_parallel_) {
    copy_to_tp_backward(dx_, tp_);  // [f bwd] all-reduce partial input gradients over tp
    return dx_;
  }
  ensure_shape(dx_local_, {shape_[0] / tp_.size(), shape_[1]}, device_);
  gather_from_sp_backward(dx_, dx_local_, tp_);  // reduce-scatter to my token block
  return dx_local_;
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
