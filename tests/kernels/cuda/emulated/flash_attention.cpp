// The launches of kernels/cuda/flash_attention.cu, on the host through the
// warp emulation: the same checks and dispatch (bf16 at the tensor cores'
// head dims to tensor_core_attention.h here), every block a set of fibers
// with the kernel's dynamic shared memory.
#include "support/warp_emulation.h"
// After the emulation, which the kernels' header then uses.
#include "kernels/cuda/flash_attention_kernels.cuh"

#include <climits>
#include <string>

#include "kernels/checks/attention.h"
#include "kernels/cuda/emulated/attention_tiles.h"
#include "kernels/cuda/emulated/flash_attention.h"
#include "kernels/cuda/emulated/launches.h"
#include "kernels/cuda/emulated/tensor_core_attention.h"
#include "kernels/elements.h"

namespace colrow::testing::emulated {
namespace {

namespace flash = kernels::cuda::flash;
using kernels::AttentionDims;
using kernels::elements;
using kernels::cuda::key_tiles;
using kernels::cuda::Operands;
using kernels::cuda::operands;

constexpr int64_t kFloatBytes = sizeof(float);  // the layouts count floats

void check_supported(const AttentionDims& d, const char* what) {
  if (!flash_attention_supports(d.head_dim, 0)) {
    kernels::attention_fail(what, "head_dim " + std::to_string(d.head_dim) +
                                      " is not supported by the fused kernels (up to " +
                                      std::to_string(flash::kMaxHeadDim) + ")");
  }
  if (key_tiles(d.seq) > kernels::cuda::kMaxTiles || d.batch * d.n_head > INT_MAX) {
    kernels::attention_fail(what, "seq " + std::to_string(d.seq) + " or batch x heads " +
                                      std::to_string(d.batch * d.n_head) +
                                      " exceeds the launch grid");
  }
}

}  // namespace

bool flash_attention_supports(int64_t head_dim, int /*device*/) {
  return head_dim >= 1 && head_dim <= flash::kMaxHeadDim;
}

bool flash_attention_uses_tensor_cores(DType dtype, int64_t head_dim, int device) {
  return dtype == DType::kBF16 && tensor_core_attention_supports(head_dim, device);
}

Shape flash_attention_backward_scratch_shape(const kernels::AttentionSize& size, int device,
                                             kernels::AttentionBackward how) {
  if (flash_attention_uses_tensor_cores(size.dtype, size.head_dim, device)) {
    return {tensor_core_attention_scratch_floats(size, how)};
  }
  return {size.batch * size.n_head * size.seq};
}

void flash_attention_forward(const Tensor& q, const Tensor& k, const Tensor& v, int64_t window,
                             Tensor& lse, Tensor& out) {
  const char* what = "flash_attention_forward";
  const AttentionDims d = kernels::check_attention_lse(q, k, v, lse, out, what);
  kernels::check_window(window, what);
  require_host(what, {&lse, &q, &k, &v, &out});
  check_supported(d, what);
  if (flash_attention_uses_tensor_cores(kernels::shared_dtype(what, {&q, &k, &v, &out}), d.head_dim,
                                        0)) {
    tensor_core_attention_forward(q, k, v, d, window, lse, out);
    return;
  }
  kernels::with_element_type(what, {&q, &k, &v, &out}, [&](auto e) {
    using E = decltype(e);
    const Operands<E> a = operands<E>(q, k, v, d, window);
    E* o = elements<E>(out);
    flash::with_columns_per_thread(d.head_dim, [&](auto te) {
      constexpr int TE = decltype(te)::value;
      const int64_t floats = flash::ForwardLayout(TE * flash::kSide).floats;
      emulation::launch(
          dim3(static_cast<unsigned>(d.batch * a.n_head), static_cast<unsigned>(key_tiles(a.seq))),
          flash::kThreads, floats * kFloatBytes,
          [&] { flash::flash_forward<TE, E>(a, o, out.row_stride(), lse.data()); });
    });
  });
}

void flash_attention_backward(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out,
                              const Tensor& lse, const Tensor& dout, int64_t window, Tensor& dq,
                              Tensor& dk, Tensor& dv, Tensor& scratch,
                              kernels::AttentionBackward how) {
  const char* what = "flash_attention_backward";
  const AttentionDims d = kernels::check_attention_lse(q, k, v, lse, dout, what);
  kernels::check_attention_operands({d.batch, d.seq, d.n_head, 0, 0, 0}, q, k, v, lse, out, what);
  kernels::check_attention_grads(q, k, d, dq, dk, dv, what);
  kernels::check_window(window, what);
  require_host(what, {&lse, &q, &k, &v, &out, &dout, &dq, &dk, &dv, &scratch});
  const DType dtype = kernels::shared_dtype(what, {&q, &k, &v, &out, &dout, &dq, &dk, &dv});
  const bool tensor_cores = flash_attention_uses_tensor_cores(dtype, d.head_dim, 0);
  const Shape need =
      flash_attention_backward_scratch_shape({d.batch, d.n_head, d.seq, d.head_dim, dtype}, 0, how);
  if (!scratch.is_contiguous() || scratch.numel() < need[0]) {
    kernels::attention_fail(what, "scratch " + shape_to_string(scratch.shape()) +
                                      " must be contiguous and hold at least " +
                                      shape_to_string(need));
  }
  check_supported(d, what);
  if (tensor_cores) {
    tensor_core_attention_backward(q, k, v, out, lse, dout, d, window, dq, dk, dv, scratch.data(),
                                   how);
    return;
  }
  float* row_dots = scratch.data();  // [B, NH, T]
  kernels::with_element_type(what, {&q, &k, &v, &out, &dout, &dq, &dk, &dv}, [&](auto e) {
    using E = decltype(e);
    launch_rows_dot(elements<E>(dout), dout.row_stride(), elements<E>(out), out.row_stride(),
                    d.batch * d.seq, d.seq, d.n_head, d.head_dim, row_dots);
    const Operands<E> a = operands<E>(q, k, v, d, window);
    const flash::Gradients<E> gr{
        elements<E>(dout), dout.row_stride(), lse.data(),      row_dots,        elements<E>(dq),
        dq.row_stride(),   elements<E>(dk),   dk.row_stride(), elements<E>(dv), dv.row_stride()};
    flash::with_columns_per_thread(d.head_dim, [&](auto te) {
      constexpr int TE = decltype(te)::value;
      const unsigned tiles = static_cast<unsigned>(key_tiles(a.seq));
      const int64_t kv_bytes = flash::BackwardKvLayout(TE * flash::kSide).floats * kFloatBytes;
      const int64_t q_bytes = flash::BackwardQLayout(TE * flash::kSide).floats * kFloatBytes;
      emulation::launch(dim3(static_cast<unsigned>(d.batch * (a.n_head / a.group)), tiles),
                        flash::kThreads, kv_bytes, [&] { flash::flash_backward_kv<TE, E>(a, gr); });
      emulation::launch(dim3(static_cast<unsigned>(d.batch * a.n_head), tiles), flash::kThreads,
                        q_bytes, [&] { flash::flash_backward_q<TE, E>(a, gr); });
    });
  });
}

}  // namespace colrow::testing::emulated
