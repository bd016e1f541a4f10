// A kernel's shared memory, spelled through two macros so that a host
// compiler can take the kernel too: tests/support/warp_emulation.h defines
// them to give every emulated block its own (tests/kernels/cuda/emulated/).
#pragma once

#include <cuda_runtime.h>

#ifndef COLROW_WARP_EMULATION

// Declares `name`, the block's dynamic shared memory (the launch's third
// argument), 128-byte aligned. Spelled in the kernel, not returned by a
// function: ptxas then allocates the kernels' registers as it always has
// (through a function, the tensor-core attention forward took 22 fewer and
// others more).
#define COLROW_DYNAMIC_SHARED(name) extern __shared__ __align__(128) char name[]

// Declares the block's static shared array `name` of `type` with extents
// `dims`: COLROW_BLOCK_SHARED(float, sums, [8][32]).
#define COLROW_BLOCK_SHARED(type, name, dims) __shared__ type name dims

#endif  // COLROW_WARP_EMULATION
