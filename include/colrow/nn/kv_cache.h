// KvCache: the keys and values a decoder has already computed, kept so that a
// new token costs one row of work per layer instead of the whole prefix again.
// Under tensor parallelism each rank caches only its own KV heads (its
// replica of one when tp > n_kv_head), so the cache splits like the weights:
// per layer [slots, kv_heads_local, capacity, head_dim], preallocated, on the
// model's device, in the model's compute dtype (bf16 halves the cache). A
// slot holds one sequence; lengths() says how many of its positions are filled.
#pragma once

#include <cstdint>
#include <vector>

#include "colrow/core/tensor.h"

namespace colrow {

class KvCache {
 public:
  // Zeroed; n_layer pairs of [slots, kv_heads_local, capacity, head_dim].
  KvCache(int n_layer, int64_t slots, int64_t kv_heads_local, int64_t capacity, int64_t head_dim,
          Device device, DType dtype = DType::kF32);

  int64_t slots() const { return static_cast<int64_t>(lengths_.size()); }
  int64_t capacity() const { return capacity_; }
  // Filled positions of `slot`: its next token goes to position length(slot).
  int64_t length(int64_t slot) const { return lengths_.at(slot); }
  void advance(int64_t slot, int64_t tokens) { lengths_.at(slot) += tokens; }

  Tensor& keys(int layer) { return keys_.at(layer); }
  Tensor& values(int layer) { return values_.at(layer); }
  // Bytes of one position's keys and values over all layers on this rank:
  // what decoding reads per cached token of a sequence.
  int64_t bytes_per_position() const;

 private:
  int64_t capacity_;
  std::vector<int64_t> lengths_;
  std::vector<Tensor> keys_, values_;
};

}  // namespace colrow
