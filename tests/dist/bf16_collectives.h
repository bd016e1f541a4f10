// The collectives on bf16 tensors (src/dist/fp32_wire.h), checked on any
// communicator by every rank of it: a sum over ranks rounds once from the
// exact fp32 sum (rank 0 holds 1, every other rank 2^-9, a quarter of bf16's
// ulp at 1: at 4 ranks the sum is 1 + 3 2^-9, which rounds to 1 + 2^-7, where
// rounding after each addition would stay at 1); max, gather, scatter and
// broadcast move bf16 values unchanged; the started all-reduce too. On the
// host (MPI, shared memory) or on a GPU (staged, NCCL). And the bf16 wire's
// sums (check_bf16_wire_sums).
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "colrow/core/bfloat16.h"
#include "colrow/core/error.h"
#include "colrow/core/philox.h"
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

// Element k of rank r's operand, as a bf16 value: small integers at even k
// (every partial sum exact, in any order and at any rounding), normal values
// at odd k.
inline float wire_value(int rank, int64_t k) {
  if (k % 2 == 0) return static_cast<float>((k / 2 + rank * 5) % 9 - 4);
  return bf16_to_float(float_to_bf16(standard_normal(41, static_cast<uint64_t>(rank), k)));
}

// all_reduce_sum_bf16_wire and reduce_scatter_sum_bf16_wire over n elements
// per rank (n >= 2), checked on every rank of c against the exact sum of the
// ranks' bf16 values: exact at the integers; elsewhere within R u sum|x_r|
// (u = 2^-8, bf16's unit roundoff: the backend may round each of up to R - 1
// forwarded partial sums and the result, each by at most u of a partial sum,
// and every partial sum is at most sum|x_r|). `rounds_once` (shared memory):
// each result is the fp32 sum over ranks 0..R-1 rounded once, bit for bit.
// Also: the same bits on every rank and on a second call, and fp32 operands
// refused before anything is sent. The started forms likewise.
inline void check_bf16_wire_sums(Communicator& c, const std::string& what, int64_t n,
                                 bool rounds_once, Device device = Device::cpu()) {
  const int rank = c.rank(), size = c.size();
  auto operand = [&](int r, int64_t first, int64_t count) {
    std::vector<float> v(count);
    for (int64_t k = 0; k < count; ++k) v[k] = wire_value(r, first + k);
    return v;
  };
  // The expected sum of element k and its bound, from every rank's values.
  auto check = [&](const std::vector<float>& got, int64_t first, const std::string& op) {
    for (int64_t k = 0; k < static_cast<int64_t>(got.size()); ++k) {
      double exact = 0.0, magnitude = 0.0;
      float in_order = 0.0f;  // shared memory's: fp32, ranks 0..R-1, one rounding
      for (int r = 0; r < size; ++r) {
        const float v = wire_value(r, first + k);
        exact += v;
        magnitude += std::fabs(v);
        in_order = r == 0 ? v : in_order + v;
      }
      const std::string where = what + " " + op + " element " + std::to_string(first + k);
      if (rounds_once) {
        ASSERT_EQ(got[k], bf16_to_float(float_to_bf16(in_order))) << where;
      } else if ((first + k) % 2 == 0) {
        ASSERT_EQ(got[k], exact) << where;
      } else {
        ASSERT_LE(std::fabs(got[k] - exact), size * 0x1p-8 * magnitude) << where;
      }
    }
  };
  // Every rank holds the bits this rank holds (gathered exactly: fp32 wire).
  auto same_on_every_rank = [&](const Tensor& mine, const std::string& op) {
    Tensor all = Tensor::empty({size * mine.numel()}, device, DType::kBF16);
    c.all_gather(mine, all);
    const std::vector<float> every = all.to_vector(), here = mine.to_vector();
    for (int r = 0; r < size; ++r) {
      for (int64_t k = 0; k < mine.numel(); ++k) {
        ASSERT_EQ(every[r * mine.numel() + k], here[k]) << what << " " << op << " on rank " << r;
      }
    }
  };

  Tensor x = bf16_of(operand(rank, 0, n), {n}, device);
  c.all_reduce_sum_bf16_wire(x);
  EXPECT_EQ(x.dtype(), DType::kBF16);
  check(x.to_vector(), 0, "all_reduce");
  same_on_every_rank(x, "all_reduce");
  Tensor again = bf16_of(operand(rank, 0, n), {n}, device);
  c.all_reduce_sum_bf16_wire(again);
  EXPECT_EQ(again.to_vector(), x.to_vector()) << what << " all_reduce twice";

  // Rank r's operand is [size * n]; this rank's block of the sum is block `rank`.
  Tensor stacked = bf16_of(operand(rank, 0, size * n), {size * n}, device);
  Tensor block = Tensor::empty({n}, device, DType::kBF16);
  c.reduce_scatter_sum_bf16_wire(stacked, block);
  check(block.to_vector(), rank * n, "reduce_scatter");
  Tensor block_again = Tensor::empty({n}, device, DType::kBF16);
  c.reduce_scatter_sum_bf16_wire(stacked, block_again);
  EXPECT_EQ(block_again.to_vector(), block.to_vector()) << what << " reduce_scatter twice";

  // The started forms, both in flight at once and waited for in reverse
  // order: the same bounds, the same bits on every rank, and where the
  // backend rounds once the blocking forms' bits.
  Tensor started = bf16_of(operand(rank, 0, n), {n}, device);
  Tensor started_block = Tensor::empty({n}, device, DType::kBF16);
  {
    std::unique_ptr<PendingCollective> reduce = c.start_all_reduce_sum_bf16_wire(started);
    std::unique_ptr<PendingCollective> scatter =
        c.start_reduce_scatter_sum_bf16_wire(stacked, started_block);
    scatter->wait();
    reduce->wait();
  }
  check(started.to_vector(), 0, "started all_reduce");
  check(started_block.to_vector(), rank * n, "started reduce_scatter");
  same_on_every_rank(started, "started all_reduce");
  if (rounds_once) {
    EXPECT_EQ(started.to_vector(), x.to_vector()) << what << " started all_reduce";
    EXPECT_EQ(started_block.to_vector(), block.to_vector()) << what << " started reduce_scatter";
  }

  // fp32 operands: refused on every rank, before anything crosses.
  Tensor fp32 = Tensor::zeros({n}, device);
  EXPECT_THROW(c.all_reduce_sum_bf16_wire(fp32), InternalError) << what;
  EXPECT_THROW(c.start_all_reduce_sum_bf16_wire(fp32), InternalError) << what;
  Tensor fp32_block = Tensor::zeros({n}, device);
  EXPECT_THROW(c.reduce_scatter_sum_bf16_wire(stacked, fp32_block), InternalError) << what;
  EXPECT_THROW(c.start_reduce_scatter_sum_bf16_wire(stacked, fp32_block), InternalError) << what;
  const Tensor fp32_stacked = Tensor::zeros({size * n}, device);
  EXPECT_THROW(c.reduce_scatter_sum_bf16_wire(fp32_stacked, block), InternalError) << what;
}

}  // namespace colrow::testing
