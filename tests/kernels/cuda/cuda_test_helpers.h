// Helpers shared by the CUDA kernel tests (tests/kernels/cuda): seeded host
// inputs, the same numbers for a seed on every machine (std::mt19937 and the
// distributions below, no platform-defined ones), fp32 error terms, and
// bit-for-bit comparisons of two tensors on any devices.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "colrow/core/tensor.h"
#include "support/reference.h"

namespace colrow::testing {

constexpr double kU = 0x1p-24;  // fp32's unit roundoff

// Higham's gamma_n = n u / (1 - n u).
inline double higham_gamma(int64_t n) {
  return n * kU / (1.0 - n * kU);
}

// Values k 2^-23 - 1 in [-1, 1), exact in fp32, plus `offset`.
inline Tensor random_exact(const Shape& shape, uint32_t seed, float offset = 0.0f) {
  std::mt19937 gen(seed);
  std::vector<float> v(static_cast<size_t>(shape_numel(shape)));
  for (float& x : v) {
    x = static_cast<float>(static_cast<double>(gen() >> 8) * 0x1p-23 - 1.0) + offset;
  }
  return Tensor::from_vector(shape, v);
}

// Integers in [-max_abs, max_abs]: sums of few of them are exact in fp32.
inline Tensor random_integers(const Shape& shape, uint32_t seed, int max_abs) {
  std::mt19937 gen(seed);
  std::vector<float> v(static_cast<size_t>(shape_numel(shape)));
  for (float& x : v) x = static_cast<float>(static_cast<int>(gen() % (2 * max_abs + 1)) - max_abs);
  return Tensor::from_vector(shape, v);
}

// std::uniform_real_distribution<float> over [lo, hi).
inline Tensor random_uniform(const Shape& shape, uint32_t seed, float lo, float hi) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> values(shape_numel(shape));
  for (float& v : values) v = dist(gen);
  return Tensor::from_vector(shape, values);
}

inline reference::Matrix to_matrix(const Tensor& t) {
  const std::vector<float> v = t.to_vector();
  return reference::Matrix(v.begin(), v.end());
}

inline bool same_bits(const Tensor& a, const Tensor& b) {
  const std::vector<float> va = a.to_vector(), vb = b.to_vector();
  return va.size() == vb.size() &&
         std::memcmp(va.data(), vb.data(), va.size() * sizeof(float)) == 0;
}

// EXPECTs a and b bitwise equal; on failure, names how many elements differ and the first.
inline void expect_same_bits(const std::string& what, const Tensor& a, const Tensor& b) {
  const std::vector<float> va = a.to_vector(), vb = b.to_vector();
  ASSERT_EQ(va.size(), vb.size()) << what;
  int64_t first = -1, count = 0;
  for (size_t i = 0; i < va.size(); ++i) {
    if (std::memcmp(&va[i], &vb[i], sizeof(float)) != 0) {
      if (first < 0) first = static_cast<int64_t>(i);
      ++count;
    }
  }
  EXPECT_EQ(count, 0) << what << ": " << count << " of " << va.size()
                      << " elements differ; first at " << first << ": "
                      << (first >= 0 ? va[first] : 0.0f) << " vs "
                      << (first >= 0 ? vb[first] : 0.0f);
}

}  // namespace colrow::testing
