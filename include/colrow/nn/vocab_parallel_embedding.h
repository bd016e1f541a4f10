// VocabParallelEmbedding (Megatron's VocabParallelEmbedding): the token
// embedding table [padded_vocab, d_model] split by vocabulary rows; rank r owns
// rows [r*V_pad/tp, (r+1)*V_pad/tp).
//   forward:  ids: [tokens] (replicated) -> my rows, zero for ids I do not own
//             -> all-reduce over tp -> y: [tokens, d_model] (replicated)   [g fwd]
//   backward: dy: [tokens, d_model] (replicated) -> scatter-add into my rows;
//             no communication                                            [g bwd]
// Also the vocabulary padding rule (Megatron's _vocab_size_with_padding).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "colrow/dist/communicator.h"
#include "colrow/nn/parameter.h"

namespace colrow {

// The vocabulary rounded up to a multiple of tp * multiple, so every rank owns
// the same number of rows and each shard is a hardware-friendly width
// (Megatron's make_vocab_size_divisible_by, default 128). GPT-2's 50257 gives
// 50304 at tp 1, 50432 at tp 2, 50688 at tp 4. ConfigError unless vocab_size,
// tp and multiple are positive.
int64_t padded_vocab_size(int64_t vocab_size, int tp, int64_t multiple = 128);

// Pure, identical on every rank: vocab_size >= 1, padded_vocab_size >=
// vocab_size and divisible by tp (ConfigError naming the values and the fix).
void validate_vocab_sizes(const std::string& component, int64_t vocab_size,
                          int64_t padded_vocab_size, int tp);

class VocabParallelEmbedding {
 public:
  // weight: name + ".weight", [padded_vocab_size, d_model] split along dim 0.
  // Rows >= vocab_size are zero: no valid id reads them (forward rejects ids
  // outside [0, vocab_size)) and none writes their gradient, and a tied output
  // layer's padded logits are masked by the cross-entropy, so they never train
  // and never matter; zero keeps them out of any norm or checkpoint diff.
  VocabParallelEmbedding(Communicator& tp, const std::string& name, int64_t vocab_size,
                         int64_t padded_vocab_size, int64_t d_model,
                         const Init& init = Init::normal(0.02f), uint64_t seed = 0);

  // ids: [tokens] -> y: [tokens, d_model]. Every id must lie in [0, vocab_size):
  // otherwise InvalidInputError naming the first bad id and its position,
  // thrown before any collective and alike on every rank (ids are replicated).
  const Tensor& forward(const std::vector<int32_t>& ids);
  // dy: [tokens, d_model] for the ids of the last forward; accumulates my rows
  // of the weight gradient (a repeated id accumulates once per occurrence).
  void backward(const Tensor& dy);
  // Checks `ids` as forward does and stages them on the device
  // (ops::stage_embedding_ids), so that the forward and backward of these ids
  // upload nothing: what a CUDA graph of them needs (train/step_graph.h).
  void stage(const std::vector<int32_t>& ids);

  Parameter& weight() { return weight_; }
  // My shard [padded_vocab_size/tp, d_model] as the layers compute with it, for a tied output
  // layer.
  const Tensor& weight_local() const { return weight_.compute(); }
  std::vector<Parameter*> parameters() { return {&weight_}; }
  int64_t vocab_size() const { return vocab_size_; }
  int64_t padded_vocab_size() const { return padded_vocab_size_; }
  int64_t vocab_start() const { return vocab_start_; }  // my first row
  int64_t vocab_size_local() const { return vocab_size_local_; }
  int64_t d_model() const { return d_model_; }

 private:
  Communicator& tp_;
  int64_t vocab_size_;
  int64_t padded_vocab_size_;
  int64_t d_model_;
  int64_t vocab_size_local_;
  int64_t vocab_start_;
  Parameter weight_;          // [padded_vocab_size/tp, d_model]
  std::vector<int32_t> ids_;  // [tokens]: the ids of the last forward
  Tensor y_;                  // [tokens, d_model]
};

}  // namespace colrow
