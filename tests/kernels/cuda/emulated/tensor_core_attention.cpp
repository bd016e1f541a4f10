// The launches of kernels/cuda/tensor_core_attention.cu, on the host through
// the warp emulation: every block a set of fibers with the kernel's dynamic
// shared memory; backward's row dots first, as on the GPU.
#include "support/warp_emulation.h"
// After the emulation, which the kernels' header then uses.
#include "kernels/cuda/tensor_core_attention_kernels.cuh"

#include <algorithm>

#include "kernels/cuda/emulated/attention_tiles.h"
#include "kernels/cuda/emulated/tensor_core_attention.h"

namespace colrow::testing::emulated {

namespace tc = kernels::cuda::tensor_cores;
using kernels::cuda::key_tiles;
using kernels::cuda::operands;

bool tensor_core_attention_supports(int64_t head_dim, int /*device*/) {
  return tc::takes_head_dim(head_dim);
}

void tensor_core_attention_forward(const Tensor& q, const Tensor& k, const Tensor& v,
                                   const kernels::AttentionDims& d, int64_t window, Tensor& lse,
                                   Tensor& out) {
  const tc::Bf16Operands a = operands<uint16_t>(q, k, v, d, window);
  auto* o = static_cast<uint16_t*>(out.raw_data());
  tc::with_head_dim(d.head_dim, [&](auto hs) {
    constexpr int HS = decltype(hs)::value;
    emulation::launch(
        dim3(static_cast<unsigned>(d.batch * a.n_head), static_cast<unsigned>(key_tiles(a.seq))),
        tc::kThreads, tc::forward_bytes(HS),
        [&] { tc::tc_forward<HS>(a, o, out.row_stride(), lse.data()); });
  });
}

int64_t tensor_core_attention_scratch_floats(const kernels::AttentionSize& size,
                                             kernels::AttentionBackward how) {
  return tc::scratch_layout(size.batch, size.n_head, size.seq, size.head_dim,
                            how == kernels::AttentionBackward::kOrdered)
      .floats;
}

void tensor_core_attention_backward(const Tensor& q, const Tensor& k, const Tensor& v,
                                    const Tensor& out, const Tensor& lse, const Tensor& dout,
                                    const kernels::AttentionDims& d, int64_t window, Tensor& dq,
                                    Tensor& dk, Tensor& dv, float* scratch,
                                    kernels::AttentionBackward how) {
  const auto* o = static_cast<const uint16_t*>(out.raw_data());
  const auto* g = static_cast<const uint16_t*>(dout.raw_data());
  launch_rows_dot(g, dout.row_stride(), o, out.row_stride(), d.batch * d.seq, d.seq, d.n_head,
                  d.head_dim, scratch);
  tc::Bf16Operands a = operands<uint16_t>(q, k, v, d, window);
  a.aligned = a.aligned && kernels::cuda::aligned_rows(dout);
  const tc::Gradients gr = tc::gradients(dout, lse, dq, dk, dv, d, scratch, how);
  tc::with_head_dim(d.head_dim, [&](auto hs) {
    constexpr int HS = decltype(hs)::value;
    const unsigned tiles = static_cast<unsigned>(key_tiles(a.seq));
    const dim3 key_grid(static_cast<unsigned>(d.batch * (a.n_head / a.group)), tiles);
    if (how == kernels::AttentionBackward::kOrdered) {
      std::fill_n(gr.dq_turns, d.batch * a.n_head * tiles, 0);
      emulation::launch(key_grid, tc::kThreads, tc::key_bytes(HS),
                        [&] { tc::tc_backward_kv<HS, true>(a, gr); });
      return;
    }
    emulation::launch(key_grid, tc::kThreads, tc::key_bytes(HS),
                      [&] { tc::tc_backward_kv<HS, false>(a, gr); });
    emulation::launch(dim3(static_cast<unsigned>(d.batch * a.n_head), tiles), tc::kThreads,
                      tc::query_bytes(HS), [&] { tc::tc_backward_q<HS>(a, gr); });
  });
}

}  // namespace colrow::testing::emulated
