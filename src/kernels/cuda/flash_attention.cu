// Launches of fused causal attention (flash_attention.h): bf16 at the head
// dims the tensor cores take goes to tensor_core_attention.h; everything
// else runs the kernels of flash_attention_kernels.cuh, which say what each
// computes.
#include "kernels/cuda/flash_attention.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <climits>
#include <cmath>

#include "colrow/core/bfloat16.h"
#include "core/cuda/cuda_check.h"
#include "core/cuda/cuda_context.h"
#include "kernels/checks/attention.h"
#include "kernels/cuda/attention_tiles.cuh"
#include "kernels/cuda/flash_attention_kernels.cuh"
#include "kernels/cuda/operands.h"
#include "kernels/cuda/tensor_core_attention.h"
#include "kernels/elements.h"

namespace colrow::kernels::cuda {
namespace {

using flash::BackwardKvLayout;
using flash::BackwardQLayout;
using flash::columns_per_thread;
using flash::ForwardLayout;
using flash::Gradients;
using flash::kMaxHeadDim;
using flash::kSide;
using flash::kThreads;

void check_supported(const AttentionDims& d, int device, const char* what) {
  if (!flash_attention_supports(d.head_dim, device)) {
    attention_fail(what, "head_dim " + std::to_string(d.head_dim) +
                             " is not supported by the fused kernels (up to " +
                             std::to_string(kMaxHeadDim) + ", within the GPU's shared memory)");
  }
  if (key_tiles(d.seq) > kMaxTiles || d.batch * d.n_head > INT_MAX) {
    attention_fail(what, "seq " + std::to_string(d.seq) + " or batch x heads " +
                             std::to_string(d.batch * d.n_head) + " exceeds the launch grid");
  }
}

template <int TE, typename E>
void launch_forward(const Operands<E>& a, int64_t batch, E* out, int64_t ldo, float* lse,
                    cudaStream_t stream) {
  const int64_t floats = ForwardLayout(TE * kSide).floats;
  allow_shared_bytes(flash::flash_forward<TE, E>, floats * sizeof(float));
  const dim3 grid(static_cast<unsigned>(batch * a.n_head), static_cast<unsigned>(key_tiles(a.seq)));
  flash::flash_forward<TE, E><<<grid, kThreads, floats * sizeof(float), stream>>>(a, out, ldo, lse);
  COLROW_CUDA_CHECK_LAUNCH();
}

// dK and dV over key tiles, then dQ over query tiles.
template <int TE, typename E>
void launch_backward(const Operands<E>& a, int64_t batch, const Gradients<E>& gr,
                     cudaStream_t stream) {
  const auto tiles = static_cast<unsigned>(key_tiles(a.seq));
  const int64_t kv_floats = BackwardKvLayout(TE * kSide).floats;
  allow_shared_bytes(flash::flash_backward_kv<TE, E>, kv_floats * sizeof(float));
  const dim3 kv_grid(static_cast<unsigned>(batch * (a.n_head / a.group)), tiles);
  flash::flash_backward_kv<TE, E><<<kv_grid, kThreads, kv_floats * sizeof(float), stream>>>(a, gr);
  COLROW_CUDA_CHECK_LAUNCH();
  const int64_t q_floats = BackwardQLayout(TE * kSide).floats;
  allow_shared_bytes(flash::flash_backward_q<TE, E>, q_floats * sizeof(float));
  const dim3 q_grid(static_cast<unsigned>(batch * a.n_head), tiles);
  flash::flash_backward_q<TE, E><<<q_grid, kThreads, q_floats * sizeof(float), stream>>>(a, gr);
  COLROW_CUDA_CHECK_LAUNCH();
}

}  // namespace

bool flash_attention_supports(int64_t head_dim, int device) {
  if (head_dim < 1 || head_dim > kMaxHeadDim) return false;
  const int hsp = columns_per_thread(head_dim) * kSide;
  int optin = 0;
  COLROW_CUDA_CHECK(
      cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, device));
  const int64_t floats = std::max(
      {ForwardLayout(hsp).floats, BackwardKvLayout(hsp).floats, BackwardQLayout(hsp).floats});
  return floats * static_cast<int64_t>(sizeof(float)) <= optin;
}

void flash_attention_forward(const Tensor& q, const Tensor& k, const Tensor& v, int64_t window,
                             Tensor& lse, Tensor& out) {
  const char* what = "flash_attention_forward";
  const AttentionDims d = check_attention_lse(q, k, v, lse, out, what);
  check_window(window, what);
  const int device = cuda_device_of(what, {&lse, &q, &k, &v, &out});
  check_supported(d, device, what);
  if (flash_attention_uses_tensor_cores(shared_dtype(what, {&q, &k, &v, &out}), d.head_dim,
                                        device)) {
    tensor_core_attention_forward(q, k, v, d, window, lse, out);
    return;
  }
  cudaStream_t stream = colrow::cuda::compute_stream(device);
  with_element_type(what, {&q, &k, &v, &out}, [&](auto e) {
    using E = decltype(e);
    const Operands<E> a = operands<E>(q, k, v, d, window);
    E* o = elements<E>(out);
    flash::with_columns_per_thread(d.head_dim, [&](auto te) {
      launch_forward<decltype(te)::value>(a, d.batch, o, out.row_stride(), lse.data(), stream);
    });
  });
}

bool flash_attention_uses_tensor_cores(DType dtype, int64_t head_dim, int device) {
  return dtype == DType::kBF16 && tensor_core_attention_supports(head_dim, device);
}

Shape flash_attention_backward_scratch_shape(const AttentionSize& size, int device,
                                             AttentionBackward how) {
  if (flash_attention_uses_tensor_cores(size.dtype, size.head_dim, device)) {
    return {tensor_core_attention_scratch_floats(size, how)};
  }
  return {size.batch * size.n_head * size.seq};
}

void flash_attention_backward(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out,
                              const Tensor& lse, const Tensor& dout, int64_t window, Tensor& dq,
                              Tensor& dk, Tensor& dv, Tensor& scratch, AttentionBackward how) {
  const char* what = "flash_attention_backward";
  const AttentionDims d = check_attention_lse(q, k, v, lse, dout, what);
  check_attention_operands({d.batch, d.seq, d.n_head, 0, 0, 0}, q, k, v, lse, out, what);
  check_attention_grads(q, k, d, dq, dk, dv, what);
  check_window(window, what);
  const int device = cuda_device_of(what, {&lse, &q, &k, &v, &out, &dout, &dq, &dk, &dv, &scratch});
  const DType dtype = shared_dtype(what, {&q, &k, &v, &out, &dout, &dq, &dk, &dv});
  const bool tensor_cores = flash_attention_uses_tensor_cores(dtype, d.head_dim, device);
  const Shape need = flash_attention_backward_scratch_shape(
      {d.batch, d.n_head, d.seq, d.head_dim, dtype}, device, how);
  if (!scratch.is_contiguous() || scratch.numel() < need[0]) {
    attention_fail(what, "scratch " + shape_to_string(scratch.shape()) +
                             " must be contiguous and hold at least " + shape_to_string(need));
  }
  check_supported(d, device, what);
  if (tensor_cores) {
    tensor_core_attention_backward(q, k, v, out, lse, dout, d, window, dq, dk, dv, scratch.data(),
                                   how);
    return;
  }
  cudaStream_t stream = colrow::cuda::compute_stream(device);
  const int64_t tokens = d.batch * d.seq;
  float* row_dots = scratch.data();  // [B, NH, T]
  with_element_type(what, {&q, &k, &v, &out, &dout, &dq, &dk, &dv}, [&](auto e) {
    using E = decltype(e);
    launch_rows_dot(elements<E>(dout), dout.row_stride(), elements<E>(out), out.row_stride(),
                    tokens, d.seq, d.n_head, d.head_dim, row_dots, stream);
    const Operands<E> a = operands<E>(q, k, v, d, window);
    const Gradients<E> gr{elements<E>(dout), dout.row_stride(), lse.data(),      row_dots,
                          elements<E>(dq),   dq.row_stride(),   elements<E>(dk), dk.row_stride(),
                          elements<E>(dv),   dv.row_stride()};
    flash::with_columns_per_thread(
        d.head_dim, [&](auto te) { launch_backward<decltype(te)::value>(a, d.batch, gr, stream); });
  });
}

}  // namespace colrow::kernels::cuda
