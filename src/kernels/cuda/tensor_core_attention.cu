// Launches of fused causal attention on tensor cores (tensor_core_attention.h):
// the kernels, and what each computes, are in tensor_core_attention_kernels.cuh.
#include "kernels/cuda/tensor_core_attention.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

#include "colrow/core/error.h"
#include "core/cuda/cuda_check.h"
#include "core/cuda/cuda_context.h"
#include "kernels/cuda/attention_tiles.cuh"
#include "kernels/cuda/tensor_core_attention_kernels.cuh"

namespace colrow::kernels::cuda {
namespace {

using tensor_cores::Bf16Operands;
using tensor_cores::Gradients;
using tensor_cores::kThreads;
using tensor_cores::with_head_dim;

// kernel<<<grid, kThreads, bytes, stream>>>(args...), its shared memory allowed.
template <typename... Params, typename... Args>
void launch(void (*kernel)(Params...), dim3 grid, int64_t bytes, cudaStream_t stream,
            Args... args) {
  allow_shared_bytes(kernel, bytes);
  kernel<<<grid, kThreads, bytes, stream>>>(args...);
  COLROW_CUDA_CHECK_LAUNCH();
}

template <int HS>
void forward(const Bf16Operands& a, int64_t batch, uint16_t* out, int64_t ldo, float* lse,
             cudaStream_t stream) {
  launch(tensor_cores::tc_forward<HS>,
         dim3(static_cast<unsigned>(batch * a.n_head), static_cast<unsigned>(key_tiles(a.seq))),
         tensor_cores::forward_bytes(HS), stream, a, out, ldo, lse);
}

template <int HS>
void backward(const Bf16Operands& a, int64_t batch, const Gradients& gr, AttentionBackward how,
              cudaStream_t stream) {
  const unsigned tiles = static_cast<unsigned>(key_tiles(a.seq));
  const dim3 key_grid(static_cast<unsigned>(batch * (a.n_head / a.group)), tiles);
  if (how == AttentionBackward::kOrdered) {
    COLROW_CUDA_CHECK(
        cudaMemsetAsync(gr.dq_turns, 0, sizeof(int) * batch * a.n_head * tiles, stream));
    launch(tensor_cores::tc_backward_kv<HS, true>, key_grid, tensor_cores::key_bytes(HS), stream, a,
           gr);
    return;
  }
  launch(tensor_cores::tc_backward_kv<HS, false>, key_grid, tensor_cores::key_bytes(HS), stream, a,
         gr);
  launch(tensor_cores::tc_backward_q<HS>, dim3(static_cast<unsigned>(batch * a.n_head), tiles),
         tensor_cores::query_bytes(HS), stream, a, gr);
}

}  // namespace

bool tensor_core_attention_supports(int64_t head_dim, int device) {
  if (!tensor_cores::takes_head_dim(head_dim)) return false;
  int major = 0, optin = 0;
  COLROW_CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device));
  COLROW_CUDA_CHECK(
      cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, device));
  if (major < 8 || tensor_cores::shared_bytes(static_cast<int>(head_dim)) > optin) return false;
  // The code the GPU runs must have been compiled for sm_80 or newer too (a
  // build for an older architecture JITs kernels whose bodies trap).
  colrow::cuda::compute_stream(device);  // makes `device` current
  cudaFuncAttributes built{};
  const cudaError_t found = cudaFuncGetAttributes(&built, tensor_cores::tc_forward<64>);
  if (found == cudaErrorNoKernelImageForDevice || found == cudaErrorInvalidDeviceFunction) {
    cudaGetLastError();  // no image this GPU can run: the fp32 kernels serve (clears the error)
    return false;
  }
  COLROW_CUDA_CHECK(found);
  return built.ptxVersion >= 80;
}

void tensor_core_attention_forward(const Tensor& q, const Tensor& k, const Tensor& v,
                                   const AttentionDims& d, int64_t window, Tensor& lse,
                                   Tensor& out) {
  cudaStream_t stream = colrow::cuda::compute_stream(out.device().index);
  const Bf16Operands a = operands<uint16_t>(q, k, v, d, window);
  uint16_t* o = static_cast<uint16_t*>(out.raw_data());
  with_head_dim(d.head_dim, [&](auto hs) {
    forward<decltype(hs)::value>(a, d.batch, o, out.row_stride(), lse.data(), stream);
  });
}

int64_t tensor_core_attention_scratch_floats(const AttentionSize& size, AttentionBackward how) {
  return tensor_cores::scratch_layout(size.batch, size.n_head, size.seq, size.head_dim,
                                      how == AttentionBackward::kOrdered)
      .floats;
}

void tensor_core_attention_backward(const Tensor& q, const Tensor& k, const Tensor& v,
                                    const Tensor& out, const Tensor& lse, const Tensor& dout,
                                    const AttentionDims& d, int64_t window, Tensor& dq, Tensor& dk,
                                    Tensor& dv, float* scratch, AttentionBackward how) {
  cudaStream_t stream = colrow::cuda::compute_stream(dq.device().index);
  const auto* o = static_cast<const uint16_t*>(out.raw_data());
  const auto* g = static_cast<const uint16_t*>(dout.raw_data());
  float* row_dots = scratch;  // [B, NH, T]
  launch_rows_dot(g, dout.row_stride(), o, out.row_stride(), d.batch * d.seq, d.seq, d.n_head,
                  d.head_dim, row_dots, stream);
  Bf16Operands a = operands<uint16_t>(q, k, v, d, window);
  a.aligned = a.aligned && aligned_rows(dout);
  const Gradients gr = tensor_cores::gradients(dout, lse, dq, dk, dv, d, scratch, how);
  with_head_dim(d.head_dim,
                [&](auto hs) { backward<decltype(hs)::value>(a, d.batch, gr, how, stream); });
}

}  // namespace colrow::kernels::cuda
