// Helpers shared by the nn layer tests: replicated inputs drawn the same on
// every rank, shards gathered back into full tensors over tp (one all_gather
// each), conversions to the double reference, and element-wise comparisons
// against it with fp32 error bounds or bit for bit.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <ostream>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "colrow/core/tensor.h"
#include "colrow/dist/communicator.h"
#include "colrow/dist/recording_communicator.h"
#include "colrow/nn/parameter.h"
#include "support/reference.h"

namespace colrow {

// So that gtest prints collective sequences readably when they differ.
inline void PrintTo(const CollectiveEvent& e, std::ostream* os) {
  *os << e.op << "(" << e.count << ")";
}

namespace testing {

using reference::Matrix;

// Values k * 2^-23 - 1 in [-1, 1), the same on every rank for the same seed.
inline Tensor random_tensor(const Shape& shape, uint64_t seed) {
  std::mt19937_64 gen(seed);
  std::vector<float> values(shape_numel(shape));
  for (float& v : values) v = static_cast<float>(static_cast<double>(gen() >> 40) * 0x1p-23 - 1.0);
  return Tensor::from_vector(shape, values);
}

// Small nonzero integers in {-3, ..., -1, 1, ..., 3}: no product is ever a
// signed zero, so a zero sum is +0 in any order and "bitwise" is unambiguous.
inline Tensor small_int_tensor(const Shape& shape, uint64_t seed) {
  static constexpr float kValues[] = {-3.0f, -2.0f, -1.0f, 1.0f, 2.0f, 3.0f};
  std::mt19937_64 gen(seed);
  std::vector<float> values(shape_numel(shape));
  for (float& v : values) v = kValues[gen() % 6];
  return Tensor::from_vector(shape, values);
}

// Row-major doubles, exactly the fp32 values.
inline Matrix to_matrix(const Tensor& t) {
  const std::vector<float> v = t.to_vector();
  return Matrix(v.begin(), v.end());
}

// Part `index` of `count` along `dim` of a row-major [rows, cols] matrix
// (dim 0: a block of rows, dim 1: a block of columns); a vector is [1, n], dim 1.
inline Matrix block(const Matrix& m, int64_t rows, int64_t cols, int dim, int index, int count) {
  const int64_t r0 = dim == 0 ? index * rows / count : 0;
  const int64_t nr = dim == 0 ? rows / count : rows;
  const int64_t c0 = dim == 1 ? index * cols / count : 0;
  const int64_t nc = dim == 1 ? cols / count : cols;
  Matrix out;
  out.reserve(nr * nc);
  for (int64_t i = r0; i < r0 + nr; ++i) {
    for (int64_t j = c0; j < c0 + nc; ++j) out.push_back(m[i * cols + j]);
  }
  return out;
}

// The full tensor from every rank's equal shard along `dim`: one all_gather
// (which stacks along dim 0), then a rearrangement when dim is not 0.
inline Tensor gather_shards(Communicator& tp, const Tensor& local, int dim) {
  Shape stacked = local.shape();
  stacked.insert(stacked.begin(), tp.size());
  Tensor buffer = Tensor::empty(stacked);
  tp.all_gather(local.is_contiguous() ? local : local.clone(), buffer);
  Shape full = local.shape();
  full[dim] *= tp.size();
  Tensor out = Tensor::empty(full);
  for (int r = 0; r < tp.size(); ++r) {
    out.shard(dim, r, tp.size()).copy_from(buffer.slice(0, r, 1).view(local.shape()));
  }
  return out;
}

// What fill_shard makes for the whole tensor, as one rank would (count 1).
inline Tensor full_parameter(const std::string& name, const Shape& shape, const Init& init,
                             uint64_t seed) {
  Tensor full = Tensor::empty(shape);
  fill_shard(full, ShardSpec::replicated(shape), init, seed, name);
  return full;
}

inline bool same_bits(const Tensor& a, const Tensor& b) {
  if (a.shape() != b.shape()) return false;
  const std::vector<float> va = a.to_vector(), vb = b.to_vector();
  // (memcmp's pointers must not be null, which an empty vector's may be)
  return va.empty() || std::memcmp(va.data(), vb.data(), va.size() * sizeof(float)) == 0;
}

// Sum over tp of one double per rank, exact to about 2^-48 relative: each rank
// contributes hi + lo as two floats, gathered (no fp32 additions) and summed in
// double. Used for losses over a sharded output.
inline double tp_sum(Communicator& tp, double local) {
  const float hi = static_cast<float>(local);
  const float lo = static_cast<float>(local - hi);
  Tensor mine = Tensor::from_vector({2}, {hi, lo});
  Tensor all = Tensor::empty({2 * static_cast<int64_t>(tp.size())});
  tp.all_gather(mine, all);
  double sum = 0.0;
  for (float v : all.to_vector()) sum += v;
  return sum;
}

// Expects |got_i - ref_i| <= factor * gamma(terms) * magnitude_i for every i
// (see reference.h for where such bounds come from). Reports the number of
// violations and the worst element.
inline void expect_within_bound(const std::string& what, const Tensor& got, const Matrix& ref,
                                const Matrix& magnitude, int64_t terms, double factor = 1.0) {
  const std::vector<float> g = got.to_vector();
  ASSERT_EQ(g.size(), ref.size()) << what << ": element count";
  ASSERT_EQ(magnitude.size(), ref.size()) << what << ": magnitude count";
  const double scale = factor * reference::gamma(terms);
  int64_t violations = 0, worst = 0;
  double worst_ratio = 0.0;
  for (size_t i = 0; i < g.size(); ++i) {
    const double err = std::fabs(static_cast<double>(g[i]) - ref[i]);
    const double bound = scale * magnitude[i];
    const double ratio = bound > 0.0 ? err / bound : (err > 0.0 ? INFINITY : 0.0);
    if (!(err <= bound)) ++violations;  // also counts NaN
    if (!(ratio <= worst_ratio)) {
      worst_ratio = ratio;
      worst = static_cast<int64_t>(i);
    }
  }
  EXPECT_EQ(violations, 0) << what << ": " << violations << " of " << g.size()
                           << " elements outside the fp32 bound; worst at flat index " << worst
                           << ": got " << g[worst] << ", reference " << ref[worst] << ", bound "
                           << scale * magnitude[worst] << " (error/bound " << worst_ratio << ")";
}

// Expects each fp32 element to have exactly the bits of the (exactly
// representable) reference value.
inline void expect_bitwise(const std::string& what, const Tensor& got, const Matrix& ref) {
  const std::vector<float> g = got.to_vector();
  ASSERT_EQ(g.size(), ref.size()) << what << ": element count";
  int64_t mismatches = 0, first = -1;
  for (size_t i = 0; i < g.size(); ++i) {
    const float want = static_cast<float>(ref[i]);
    if (static_cast<double>(want) != ref[i] || std::memcmp(&want, &g[i], sizeof(float)) != 0) {
      if (first < 0) first = static_cast<int64_t>(i);
      ++mismatches;
    }
  }
  EXPECT_EQ(mismatches, 0) << what << ": " << mismatches << " of " << g.size()
                           << " elements differ bitwise; first at flat index " << first << ": got "
                           << (first >= 0 ? g[first] : 0.0f) << ", reference "
                           << (first >= 0 ? ref[first] : 0.0);
}

}  // namespace testing
// A size tp = 2, 3 or 4 does not divide, with the divisors the error message
// must offer; nullptr for other tp.
struct BadSize {
  int tp;
  int64_t value;
  const char* choices;
};

inline const BadSize* bad_size_for(int tp) {
  static constexpr BadSize kBadSizes[] = {{2, 27, "{1, 3, 9, 27}"},
                                          {3, 32, "{1, 2, 4, 8, 16, 32}"},
                                          {4, 30, "{1, 2, 3, 5, 6, 10, 15, 30}"}};
  for (const BadSize& b : kBadSizes) {
    if (b.tp == tp) return &b;
  }
  return nullptr;
}

}  // namespace colrow
