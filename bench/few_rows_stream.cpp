// How fast the few-rows product's loop (kernels/cpu/gemm.cpp, dot_tile)
// streams its weights on one thread, against a plain read of the same memory
// and against the loop it replaced (docs/performance.md, "A few rows without
// sgemm", 2026-11-25). m rows of x (decoding at batch m) against 75 MB of
// weights [n, k] (GPT-2 124M's k 768 and 3072), fp32 and bf16, in memory
// allocated as colrow's allocator does (2 MiB-aligned, huge pages advised:
// without them a 4 KiB page ends every 1.3 rows of k 768 and every loop here
// runs at half speed). The loops are this file's own copies of the kernel's
// shapes, so that the prefetch distance and the tile can vary:
//   g++ -O3 -march=native -fopenmp-simd -o /tmp/few_rows_stream bench/few_rows_stream.cpp
//   /tmp/few_rows_stream        # GB/s of weights read, best of 10 runs
#include <sys/mman.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace {

#if defined(__AVX512F__)
constexpr int kLanes = 16;
#else
constexpr int kLanes = 8;
#endif
using FloatLanes = float __attribute__((vector_size(kLanes * sizeof(float))));
using Bf16Lanes = uint16_t __attribute__((vector_size(kLanes * sizeof(uint16_t))));
using BitLanes = uint32_t __attribute__((vector_size(kLanes * sizeof(uint32_t))));

float widen(float v) {
  return v;
}
float widen(uint16_t b) {
  const uint32_t bits = uint32_t{b} << 16;
  float v;
  std::memcpy(&v, &bits, sizeof v);
  return v;
}
FloatLanes load_lanes(const float* p) {
  FloatLanes v;
  std::memcpy(&v, p, sizeof v);
  return v;
}
FloatLanes load_lanes(const uint16_t* p) {
  Bf16Lanes h;
  std::memcpy(&h, p, sizeof h);
  const BitLanes bits = __builtin_convertvector(h, BitLanes) << 16;
  FloatLanes v;
  std::memcpy(&v, &bits, sizeof v);
  return v;
}
float lane_sum(FloatLanes v) {
  float l[kLanes];
  std::memcpy(l, &v, sizeof l);
  for (int half = kLanes / 2; half > 0; half /= 2) {
    for (int i = 0; i < half; ++i) l[i] += l[i + half];
  }
  return l[0];
}

// The loop before 2026-11-25: four rows of x at a time share each weight
// element (an omp simd reduction), the whole weight row two rows ahead
// prefetched at its start. noipa: m stays a run-time value, as it was in
// colrow (GCC otherwise specializes the loop for m 4 here, 10x slower).
template <typename W>
__attribute__((noipa)) void four_rows(int64_t m, int64_t n, int64_t k, const W* w, const float* x,
                                      float* out) {
  for (int64_t j = 0; j < n; ++j) {
    const W* row = w + j * k;
    if (j + 2 < n) {
      const char* ahead = reinterpret_cast<const char*>(row + 2 * k);
      for (int64_t b = 0; b < k * static_cast<int64_t>(sizeof(W)); b += 64)
        __builtin_prefetch(ahead + b);
    }
    int64_t i = 0;
    for (; i + 4 <= m; i += 4) {
      const float *x0 = x + i * k, *x1 = x0 + k, *x2 = x1 + k, *x3 = x2 + k;
      float s0 = 0.0f, s1 = 0.0f, s2 = 0.0f, s3 = 0.0f;
#pragma omp simd reduction(+ : s0, s1, s2, s3)
      for (int64_t p = 0; p < k; ++p) {
        const float v = widen(row[p]);
        s0 += x0[p] * v, s1 += x1[p] * v, s2 += x2[p] * v, s3 += x3[p] * v;
      }
      out[i * n + j] = s0, out[(i + 1) * n + j] = s1;
      out[(i + 2) * n + j] = s2, out[(i + 3) * n + j] = s3;
    }
    for (; i < m; ++i) {
      float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
      for (int64_t p = 0; p < k; ++p) sum += x[i * k + p] * widen(row[p]);
      out[i * n + j] = sum;
    }
  }
}

// The kernel's tile: all kRows rows of x against kWeightRows weight rows in
// vector accumulators, a prefetch per cache line kAhead bytes ahead.
template <int kRows, int kWeightRows, int64_t kAhead, typename W>
void tile(int64_t, int64_t n, int64_t k, const W* w, const float* x, float* out) {
  for (int64_t j = 0; j + kWeightRows <= n; j += kWeightRows) {
    FloatLanes acc[kWeightRows][kRows] = {};
    int64_t p = 0;
    for (; p + kLanes <= k; p += kLanes) {
      FloatLanes v[kWeightRows];
      for (int c = 0; c < kWeightRows; ++c) {
        const W* at = w + (j + c) * k + p;
        if (kAhead > 0 && p * sizeof(W) % 64 == 0)
          __builtin_prefetch(reinterpret_cast<const char*>(at) + kAhead / kWeightRows);
        v[c] = load_lanes(at);
      }
      for (int r = 0; r < kRows; ++r) {
        const FloatLanes xr = load_lanes(x + r * k + p);
        for (int c = 0; c < kWeightRows; ++c) acc[c][r] += xr * v[c];
      }
    }
    for (int c = 0; c < kWeightRows; ++c) {
      for (int r = 0; r < kRows; ++r) out[r * n + j + c] = lane_sum(acc[c][r]);
    }
  }
}

template <typename W>
using Loop = void (*)(int64_t, int64_t, int64_t, const W*, const float*, float*);

template <int kRows, typename W>
void compare(int64_t k, const W* w, const float* x, float* out, double plain_gbs) {
  const int64_t n = (int64_t{75} << 20) / (k * static_cast<int64_t>(sizeof(float)));
  const auto gbs = [&](Loop<W> loop) {
    double best = 1e30;
    for (int r = 0; r < 10; ++r) {
      const auto t0 = std::chrono::steady_clock::now();
      loop(kRows, n, k, w, x, out);
      best = std::min(best,
                      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    }
    return static_cast<double>(n * k * sizeof(W)) / best / 1e9;
  };
  std::printf("%-4s k %4lld  rows %d  %6.1f %8.1f %8.1f %8.1f %8.1f %9.1f\n",
              sizeof(W) == 4 ? "fp32" : "bf16", static_cast<long long>(k), kRows, plain_gbs,
              gbs(four_rows<W>), gbs(tile<kRows, 1, 0, W>), gbs(tile<kRows, 1, 3072, W>),
              gbs(tile<kRows, 1, 6144, W>), gbs(tile<kRows, 2, 6144, W>));
}

template <typename W>
W* huge_pages(size_t count) {
  const size_t bytes = (count * sizeof(W) + (size_t{2} << 20) - 1) / (size_t{2} << 20) << 21;
  void* p = std::aligned_alloc(size_t{2} << 20, bytes);
  madvise(p, bytes, MADV_HUGEPAGE);
  std::memset(p, 0, bytes);
  return static_cast<W*>(p);
}

}  // namespace

int main() {
  const size_t weights = size_t{75} << 20 >> 2;  // enough for either dtype at any k here
  float* w32 = huge_pages<float>(weights);
  uint16_t* w16 = huge_pages<uint16_t>(weights);
  float* x = huge_pages<float>(8 * 3072);
  float* out = huge_pages<float>(8 * weights / 768);
  for (size_t i = 0; i < weights; ++i) {
    w32[i] = static_cast<float>(i % 97) / 97.0f;
    w16[i] = static_cast<uint16_t>(0x3f80 + i % 37);  // bf16 1.0 to about 1.3
  }
  for (int64_t i = 0; i < 8 * 3072; ++i) x[i] = static_cast<float>(i % 13) / 13.0f - 0.4f;
  double plain = 0.0;
  for (int r = 0; r < 10; ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
    for (size_t i = 0; i < weights; ++i) sum += w32[i];
    out[0] = sum;
    plain = std::max(
        plain, 4.0 * weights / 1e9 /
                   std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  std::printf(
      "GB/s of weights (one thread, 75 MB)   plain  4 rows   tile 1   tile 1   tile 1    tile 2\n");
  std::printf(
      "                                      read   (before)  none     3 KB     6 KB      6 KB\n");
  for (const int64_t k : {int64_t{768}, int64_t{3072}}) {
    compare<2>(k, w32, x, out, plain);
    compare<4>(k, w32, x, out, plain);
    compare<8>(k, w32, x, out, plain);
    compare<2>(k, w16, x, out, plain);
    compare<4>(k, w16, x, out, plain);
    compare<8>(k, w16, x, out, plain);
  }
}
