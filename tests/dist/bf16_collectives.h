// The collectives on bf16 tensors (src/dist/fp32_wire.h), checked on any
// communicator by every rank of it: a sum over ranks rounds once from the
// exact fp32 sum (rank 0 holds 1, every other rank 2^-9, a quarter of bf16's
// ulp at 1: at 4 ranks the sum is 1 + 3 2^-9, which rounds to 1 + 2^-7, where
// rounding after each addition would stay at 1); max, gather, scatter and
// broadcast move bf16 values unchanged; the started all-reduce too. On the
// host (MPI, shared memory) or on a GPU (staged, NCCL).
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

#include "colrow/core/bfloat16.h"
#include "colrow/dist/communicator.h"

namespace colrow::testing {

inline Tensor bf16_of(const std::vector<float>& values, const Shape& shape,
                      Device device = Device::cpu()) {
  return Tensor::from_vector(shape, values).to(device).to(DType::kBF16);
}

inline void check_bf16_collectives(Communicator& c, const std::string& what,
                                   Device device = Device::cpu()) {
  const int rank = c.rank(), size = c.size();
  const int64_t n = 5;
  auto mine = [&](int r) {
    std::vector<float> v(n, r == 0 ? 1.0f : 0x1p-9f);
    v[n - 1] = static_cast<float>(r * 3 - 2);  // small integers: exact in any order
    return v;
  };
  // all_reduce_sum: one rounding of the exact sum.
  Tensor x = bf16_of(mine(rank), {n}, device);
  c.all_reduce_sum(x);
  const float once = bf16_to_float(float_to_bf16(1.0f + static_cast<float>(size - 1) * 0x1p-9f));
  float integers = 0.0f;
  for (int r = 0; r < size; ++r) integers += static_cast<float>(r * 3 - 2);
  const std::vector<float> sum = x.to_vector();
  for (int64_t k = 0; k < n - 1; ++k) EXPECT_EQ(sum[k], once) << what << " sum " << k;
  EXPECT_EQ(sum[n - 1], integers) << what;
  EXPECT_EQ(x.dtype(), DType::kBF16);
  // The started form gives the same.
  Tensor y = bf16_of(mine(rank), {n}, device);
  c.start_all_reduce_sum(y)->wait();
  EXPECT_EQ(y.to_vector(), sum) << what << " started";
  // all_reduce_max.
  Tensor m = bf16_of(mine(rank), {n}, device);
  c.all_reduce_max(m);
  EXPECT_EQ(m.to_vector()[n - 1], static_cast<float>((size - 1) * 3 - 2)) << what;
  // all_gather: every rank's values, unchanged.
  Tensor gathered = Tensor::empty({size * n}, device, DType::kBF16);
  c.all_gather(bf16_of(mine(rank), {n}, device), gathered);
  const std::vector<float> all = gathered.to_vector();
  for (int r = 0; r < size; ++r) {
    const std::vector<float> want = mine(r);
    for (int64_t k = 0; k < n; ++k) EXPECT_EQ(all[r * n + k], want[k]) << what << " gather";
  }
  // reduce_scatter_sum: this rank's block of the sum, rounded once.
  std::vector<float> stacked;
  for (int r = 0; r < size; ++r) {
    const std::vector<float> v = mine(rank);
    stacked.insert(stacked.end(), v.begin(), v.end());
  }
  Tensor block = Tensor::empty({n}, device, DType::kBF16);
  c.reduce_scatter_sum(bf16_of(stacked, {size * n}, device), block);
  EXPECT_EQ(block.to_vector(), sum) << what << " reduce_scatter";
  // broadcast from the last rank.
  Tensor b = bf16_of(mine(rank), {n}, device);
  c.broadcast(b, size - 1);
  EXPECT_EQ(b.to_vector(), bf16_of(mine(size - 1), {n}, device).to_vector())
      << what << " broadcast";
}

}  // namespace colrow::testing
