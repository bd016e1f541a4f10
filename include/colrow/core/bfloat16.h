// bf16: the upper 16 bits of an fp32 (sign, the same 8-bit exponent, 7
// mantissa bits), the format GPUs multiply in. Widening to fp32 is exact.
// Narrowing rounds to nearest, ties to even (as __float2bfloat16_rn and
// PyTorch do), overflows to infinity and keeps a NaN a NaN (quieted, sign and
// top payload bits kept): rounding a NaN's bits like a number could carry it
// into infinity. The same functions run in CUDA kernels, so the CPU and the
// GPU round alike bit for bit (cuda_bf16.h's own rounding returns the
// canonical NaN instead).
#pragma once

#include <cstdint>
#include <cstring>

#if defined(__CUDACC__)
#define COLROW_HOST_DEVICE __host__ __device__
#else
#define COLROW_HOST_DEVICE
#endif

namespace colrow {

COLROW_HOST_DEVICE inline uint32_t float_bits(float f) {
#if defined(__CUDA_ARCH__)
  return __float_as_uint(f);
#else
  uint32_t bits;
  std::memcpy(&bits, &f, sizeof bits);
  return bits;
#endif
}

COLROW_HOST_DEVICE inline float bf16_to_float(uint16_t h) {
  const uint32_t bits = static_cast<uint32_t>(h) << 16;
#if defined(__CUDA_ARCH__)
  return __uint_as_float(bits);
#else
  float f;
  std::memcpy(&f, &bits, sizeof f);
  return f;
#endif
}

COLROW_HOST_DEVICE inline uint16_t float_to_bf16(float f) {
  uint32_t bits = float_bits(f);
  if ((bits & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((bits >> 16) | 0x0040u);
  bits += 0x7fffu + ((bits >> 16) & 1u);  // half an ulp, one more when the kept lsb is odd
  return static_cast<uint16_t>(bits >> 16);
}

// An element E of an fp32 tensor (float) or of a bf16 one (its bits,
// uint16_t) as fp32, and an fp32 result back as E: what a kernel that takes
// either dtype does at each access (exact widening, one rounding per output).
COLROW_HOST_DEVICE inline float widen(float v) {
  return v;
}
COLROW_HOST_DEVICE inline float widen(uint16_t v) {
  return bf16_to_float(v);
}
template <typename E>
COLROW_HOST_DEVICE inline E narrow(float v) {
  if constexpr (sizeof(E) == sizeof(float)) {
    return v;
  } else {
    return float_to_bf16(v);
  }
}

}  // namespace colrow
