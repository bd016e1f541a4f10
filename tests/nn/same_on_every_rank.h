// Bitwise agreement of a tensor across the ranks of a communicator. Each
// float's 32 bits are split into two 16-bit halves (exact as floats); every
// rank holds the same bits iff, for every half, the max over ranks equals the
// min (= -max of the negation). Two all_reduce_max calls, issued on every rank,
// and every rank gets the same answer. NaN and signed zeros compare by bits.
#pragma once

#include <cstdint>
#include <cstring>
#include <vector>

#include "colrow/core/tensor.h"
#include "colrow/dist/communicator.h"

namespace colrow::testing {

inline bool same_on_every_rank(Communicator& comm, const Tensor& t) {
  const std::vector<float> values = t.to_vector();
  const int64_t n = static_cast<int64_t>(values.size());
  Tensor hi_max = Tensor::empty({2 * n}), neg_min = Tensor::empty({2 * n});
  for (int64_t i = 0; i < n; ++i) {
    uint32_t bits;
    std::memcpy(&bits, &values[i], sizeof(bits));
    hi_max.data()[2 * i] = static_cast<float>(bits >> 16);
    hi_max.data()[2 * i + 1] = static_cast<float>(bits & 0xffffu);
  }
  for (int64_t i = 0; i < 2 * n; ++i) neg_min.data()[i] = -hi_max.data()[i];
  comm.all_reduce_max(hi_max);
  comm.all_reduce_max(neg_min);
  for (int64_t i = 0; i < 2 * n; ++i) {
    if (hi_max.data()[i] != -neg_min.data()[i]) return false;
  }
  return true;
}

inline bool same_on_every_rank(Communicator& comm, float value) {
  return same_on_every_rank(comm, Tensor::from_vector({1}, {value}));
}

}  // namespace colrow::testing
