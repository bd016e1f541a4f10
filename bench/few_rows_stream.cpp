// How fast the few-rows product's loop (kernels/cpu/gemm.cpp,
// rows_times_weights_t) streams its weights, against a plain read of the same
// memory: why that loop prefetches the weight rows ahead (docs/performance.md,
// "A few rows without sgemm", 2026-11-25). One thread, 8 rows of x (decoding
// at batch 8) against fp32 weights [n, 768]: n 24576 (75 MB, from memory) and
// n 256 (0.8 MB, from L2). The loops are this file's own copies of the
// kernel's loop shape, so that the prefetch distance and the tile can vary:
//   g++ -O3 -march=native -fopenmp-simd -o /tmp/few_rows_stream bench/few_rows_stream.cpp
//   /tmp/few_rows_stream        # prints GB/s of weights read, best of 10 (2000 in L2)
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <vector>

namespace {

constexpr int64_t kRows = 8, kK = 768;

// The kernel's loop: four rows of x share each weight vector, then the next
// four; kAhead weight rows ahead are prefetched (0: none).
template <int kAhead>
void four_rows(int64_t n, const float* w, const float* x, float* out) {
  for (int64_t j = 0; j < n; ++j) {
    const float* row = w + j * kK;
    if (kAhead > 0 && j + kAhead < n) {
      const char* next = reinterpret_cast<const char*>(row + kAhead * kK);
      for (int64_t b = 0; b < kK * 4; b += 64) __builtin_prefetch(next + b);
    }
    for (int64_t i = 0; i < kRows; i += 4) {
      const float *x0 = x + i * kK, *x1 = x0 + kK, *x2 = x1 + kK, *x3 = x2 + kK;
      float s0 = 0.0f, s1 = 0.0f, s2 = 0.0f, s3 = 0.0f;
#pragma omp simd reduction(+ : s0, s1, s2, s3)
      for (int64_t p = 0; p < kK; ++p) {
        s0 += x0[p] * row[p];
        s1 += x1[p] * row[p];
        s2 += x2[p] * row[p];
        s3 += x3[p] * row[p];
      }
      out[(i + 0) * n + j] = s0;
      out[(i + 1) * n + j] = s1;
      out[(i + 2) * n + j] = s2;
      out[(i + 3) * n + j] = s3;
    }
  }
}

// A register tile: four rows of x against four weight rows at once, each x
// vector used four times (fewer loads per multiply-add than four_rows).
void four_by_four(int64_t n, const float* w, const float* x, float* out) {
  for (int64_t j = 0; j + 4 <= n; j += 4) {
    const float *w0 = w + j * kK, *w1 = w0 + kK, *w2 = w1 + kK, *w3 = w2 + kK;
    for (int64_t i = 0; i < kRows; i += 4) {
      float s[4][4] = {};
      for (int64_t r = 0; r < 4; ++r) {
        const float* xr = x + (i + r) * kK;
        float a = 0.0f, b = 0.0f, c = 0.0f, d = 0.0f;
#pragma omp simd reduction(+ : a, b, c, d)
        for (int64_t p = 0; p < kK; ++p) {
          a += xr[p] * w0[p];
          b += xr[p] * w1[p];
          c += xr[p] * w2[p];
          d += xr[p] * w3[p];
        }
        s[r][0] = a, s[r][1] = b, s[r][2] = c, s[r][3] = d;
      }
      for (int64_t r = 0; r < 4; ++r) {
        for (int64_t c = 0; c < 4; ++c) out[(i + r) * n + j + c] = s[r][c];
      }
    }
  }
}

// Sum of every weight: the rate one thread streams this memory at.
void plain_read(int64_t n, const float* w, const float*, float* out) {
  float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
  for (int64_t p = 0; p < n * kK; ++p) sum += w[p];
  out[0] = sum;
}

}  // namespace

int main() {
  for (const int64_t n : {int64_t{24576}, int64_t{256}}) {
    std::vector<float> w(n * kK), x(kRows * kK, 0.5f), out(kRows * n);
    for (size_t i = 0; i < w.size(); ++i) w[i] = static_cast<float>(i % 97) / 97.0f;
    const int repeats = n < 1024 ? 2000 : 10;
    const auto run = [&](const char* name,
                         void (*loop)(int64_t, const float*, const float*, float*)) {
      double best = 1e30;
      for (int r = 0; r < repeats; ++r) {
        const auto t0 = std::chrono::steady_clock::now();
        loop(n, w.data(), x.data(), out.data());
        best = std::min(
            best, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
      }
      std::printf("n %6lld (%5.1f MB)  %-28s %6.1f GB/s of weights\n", static_cast<long long>(n),
                  4.0 * n * kK / 1e6, name, 4.0 * n * kK / best / 1e9);
    };
    run("plain read", plain_read);
    run("four rows, no prefetch", four_rows<0>);
    run("four rows, 1 row ahead", four_rows<1>);
    run("four rows, 2 rows ahead", four_rows<2>);
    run("4 x 4 tile, no prefetch", four_by_four);
  }
}
