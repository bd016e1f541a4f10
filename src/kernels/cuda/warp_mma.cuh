// The warp-level instructions of the tensor-core attention kernels
// (tensor_core_attention_kernels.cuh), each a line of PTX: mma.sync m16n8k16
// (bf16 in, fp32 accumulators), ldmatrix and cp.async. The fragment layouts
// are spelled out here once; the kernels rely on them. A test that defines
// COLROW_WARP_EMULATION supplies these same functions for the host instead
// (tests/support/warp_emulation.h), so that the kernels run, and are
// checked, on a CPU.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

// bf16 mma.sync needs sm_80 or newer; the host pass of nvcc (and a host
// compiler) sees no __CUDA_ARCH__ and takes the kernels' bodies too.
#if !defined(__CUDA_ARCH__) || __CUDA_ARCH__ >= 800
#define COLROW_TENSOR_CORES 1
#endif

#if defined(COLROW_TENSOR_CORES) && !defined(COLROW_WARP_EMULATION)

namespace colrow::kernels::cuda {

// d += a b: a [16][16] row-major, b [16][8] column-major, bf16; d fp32.
// Fragments (g = lane / 4, t = lane % 4): a {(g, 2t..2t+1), (g + 8, 2t..),
// (g, 2t + 8..), (g + 8, 2t + 8..)}; b {(2t..2t+1, g), (2t + 8.., g)};
// d {(g, 2t), (g, 2t + 1), (g + 8, 2t), (g + 8, 2t + 1)}.
__device__ inline void mma(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
      "{%8,%9}, {%0,%1,%2,%3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

__device__ inline uint32_t shared_address(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

// Four 8 x 8 bf16 matrices; lanes 8m..8m+7 give the rows of matrix m, and
// r[m] holds (row g, columns 2t..2t+1) of it, or with .trans (rows 2t..2t+1,
// column g).
__device__ inline void ldmatrix_x4(uint32_t (&r)[4], const uint16_t* row) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(shared_address(row)));
}
__device__ inline void ldmatrix_x4_trans(uint32_t (&r)[4], const uint16_t* row) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(shared_address(row)));
}

__device__ inline void cp_async_16(uint16_t* dst, const uint16_t* src, bool fill) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(shared_address(dst)),
               "l"(src), "r"(fill ? 16 : 0));
}
__device__ inline void cp_async_4(float* dst, const float* src, bool fill) {
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(shared_address(dst)),
               "l"(src), "r"(fill ? 4 : 0));
}
__device__ inline void cp_async_commit() {
  asm volatile("cp.async.commit_group;\n" ::);
}
__device__ inline void cp_async_wait_all() {
  asm volatile("cp.async.wait_group 0;\n" ::);
}

}  // namespace colrow::kernels::cuda

#endif  // COLROW_TENSOR_CORES && !COLROW_WARP_EMULATION
