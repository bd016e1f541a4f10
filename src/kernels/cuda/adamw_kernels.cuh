// AdamW's kernel on the GPU (adamw.h; launched by adamw.cu), one
// multi-tensor launch: the host uploads a table of
// the segments (pointers, length, decay flag, first chunk); block b updates
// chunk b of the concatenation, finding its segment by binary search over the
// first chunks. Element formula and operation order as kernels/cpu/adamw.h
// (and torch's _single_tensor_adamw), each updated param also written to its
// bf16 compute copy where the segment has one. Plain fp32 operations; sqrtf and the
// divisions are IEEE-rounded (nvcc's defaults), but nvcc may fuse a multiply
// and an add into an FMA where the CPU build does not (or the reverse), so
// results can differ from the CPU's by an ulp or so per operation.
// A host compiler takes this header too: tests/kernels/cuda/adamw_test runs
// the kernel on the CPU through the warp emulation as well as on a GPU.
#pragma once

#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "colrow/core/bfloat16.h"
#include "colrow/core/error.h"
#include "kernels/backend.h"
#include "kernels/checks/adamw.h"
#include "kernels/cuda/chunk_table.cuh"

namespace colrow::kernels::cuda::adamw_kernels {

constexpr int kThreads = 256;
constexpr int kPerThread = 8;
constexpr int64_t kChunk = int64_t{kThreads} * kPerThread;  // elements per block

// One row of the uploaded table; 8-byte fields only, so host and device agree
// on the layout.
struct Segment {
  float* param;
  const float* grad;
  float* exp_avg;
  float* exp_avg_sq;
  uint16_t* compute;  // the bf16 compute copy, or null
  int64_t count;
  int64_t first_chunk;  // chunks of the segments before this one
  int64_t decay;        // 1: weight decay applies
};

// The step's scalars, as the element formula uses them.
struct Scalars {
  float grad_scale, decay, one_minus_beta1, beta2, one_minus_beta2, bias_correction2_sqrt, eps,
      step_size;
};

__global__ void adamw_chunks(const Segment* table, int64_t n_segments, Scalars s) {
  const int64_t chunk = blockIdx.x;
  const Segment seg = row_of_chunk(table, n_segments, chunk);
  const int64_t begin = (chunk - seg.first_chunk) * kChunk;
  const float decay = seg.decay != 0 ? s.decay : 1.0f;
  for (int k = 0; k < kPerThread; ++k) {
    const int64_t i = begin + int64_t{k} * kThreads + threadIdx.x;
    if (i >= seg.count) break;
    const float g = seg.grad[i] * s.grad_scale;
    float p = seg.param[i];
    float m = seg.exp_avg[i];
    float v = seg.exp_avg_sq[i];
    p *= decay;                                   // param.mul_(1 - lr * wd)
    m += s.one_minus_beta1 * (g - m);             // exp_avg.lerp_(grad, 1 - beta1)
    v = v * s.beta2 + s.one_minus_beta2 * g * g;  // exp_avg_sq.mul_(beta2).addcmul_
    const float denom = sqrtf(v) / s.bias_correction2_sqrt + s.eps;
    p += -s.step_size * (m / denom);  // param.addcdiv_(m, denom, -step_size)
    seg.param[i] = p;
    seg.exp_avg[i] = m;
    seg.exp_avg_sq[i] = v;
    if (seg.compute != nullptr) seg.compute[i] = float_to_bf16(p);
  }
}

using SegmentTable = ChunkTable<Segment>;

// The launch's table: a row per non-empty segment, in order; each segment
// checked and on the first one's device.
inline SegmentTable segment_table(const std::vector<AdamWSegment>& segments) {
  SegmentTable table;
  for (size_t i = 0; i < segments.size(); ++i) {
    const AdamWSegment& s = segments[i];
    const int64_t n = s.param.numel();
    check_adamw_segment(s);
    if (n == 0) continue;
    // Tensors are shallow handles: copies of them write the segment's storage.
    Tensor param = s.param, exp_avg = s.exp_avg, exp_avg_sq = s.exp_avg_sq, compute = s.compute;
    table.append(
        Segment{param.data(), s.grad.data(), exp_avg.data(), exp_avg_sq.data(),
                compute.owns_storage() ? compute.bf16_data() : nullptr, n, 0, s.decay ? 1 : 0},
        i, s.param.device(), n, kChunk);
    require_device("adamw_update", table.device,
                   {&s.param, &s.grad, &s.exp_avg, &s.exp_avg_sq, &s.compute});
  }
  table.check_fits("[adamw] adamw_update");
  return table;
}

// 1 - beta1 and 1 - beta2 in fp32, as the CPU computes them.
inline Scalars scalars_of(const AdamWStep& step) {
  return {step.grad_scale, step.decay,        1.0f - step.beta1,
          step.beta2,      1.0f - step.beta2, step.bias_correction2_sqrt,
          step.eps,        step.step_size};
}

}  // namespace colrow::kernels::cuda::adamw_kernels
