// bf16 tensors cross ranks as fp32: a collective on bf16 operands runs on
// their fp32 widenings (exact) and each bf16 result is rounded once from its
// fp32 value (kernels/mixed_precision.h), so a sum over ranks rounds once, not
// at every hop, and gathers and broadcasts move the values unchanged. The wire
// carries twice the bytes a bf16 collective would; the *_bf16_wire sums of
// Communicator halve them where that is worth a rounding (gradients under
// --grad-reduce-dtype bf16). The host and device backends call these first in
// every collective.
#pragma once

#include <algorithm>
#include <array>

#include "colrow/core/tensor.h"
#include "kernels/mixed_precision.h"  // header only: dist links no kernels

namespace colrow::dist {

// The fp32 widenings of one communicator's bf16 operands. A communicator that
// keeps one (the GPU groups') reuses its buffers, grown to the largest
// operand and never shrunk, so a warm training step's bf16 collectives take
// nothing from the allocator, as a CUDA graph of the step needs
// (train/step_graph.h); its collectives run one after another in stream
// order, which is all the reuse needs. A host communicator makes one per call.
class Fp32Wire {
 public:
  // In place (all-reduce, broadcast): false, having done nothing, when x is fp32.
  template <typename Collective>
  bool run(Tensor& x, Collective&& collective) {
    if (x.dtype() == DType::kF32) return false;
    Tensor wide = buffer(0, x);
    wide.convert_from(x);  // exact
    collective(wide);
    kernels::store_rounded(wide, x);
    return true;
  }

  // in -> out (all-gather, reduce-scatter): false when both are fp32.
  template <typename Collective>
  bool run(const Tensor& in, Tensor& out, Collective&& collective) {
    if (in.dtype() == DType::kF32 && out.dtype() == DType::kF32) return false;
    Tensor wide_in = in;
    if (in.dtype() != DType::kF32) {
      wide_in = buffer(0, in);
      wide_in.convert_from(in);
    }
    Tensor wide_out = out.dtype() == DType::kF32 ? out : buffer(1, out);
    collective(static_cast<const Tensor&>(wide_in), wide_out);
    if (out.dtype() != DType::kF32) kernels::store_rounded(wide_out, out);
    return true;
  }

 private:
  // An fp32 tensor shaped like `like`, on its device, in buffer `slot`.
  Tensor buffer(int slot, const Tensor& like) {
    const int64_t n = like.numel();
    Tensor& b = buffers_[slot];
    if (!b.owns_storage() || b.numel() < n || b.device() != like.device()) {
      b = Tensor::empty({std::max<int64_t>(n, 1)}, like.device());
    }
    return b.slice(0, 0, n).view(like.shape());
  }

  std::array<Tensor, 2> buffers_;
};

// With a wire made for this call (host communicators).
template <typename Collective>
bool on_fp32_wire(Tensor& x, Collective&& collective) {
  return Fp32Wire().run(x, collective);
}

template <typename Collective>
bool on_fp32_wire(const Tensor& in, Tensor& out, Collective&& collective) {
  return Fp32Wire().run(in, out, collective);
}

}  // namespace colrow::dist
