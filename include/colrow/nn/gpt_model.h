// GptModel: the whole decoder-only Transformer at any tp, read top to bottom
// as one script in forward() and backward():
//   tokens -> vocab-parallel embedding (+ learned positions, gpt2)
//          -> n_layer x TransformerBlock -> final norm
//          -> output head, vocab-parallel: logits stay [tokens, V_pad/tp]
//          -> vocab-parallel cross-entropy (three all-reduces of [tokens])
// gpt2 ties the output head to the embedding (wte); llama has lm_head unless
// tie_word_embeddings. Parameter names are Hugging Face's (gpt2 without the
// "transformer." prefix); attention's q/k/v are separate tensors here and the
// checkpoint code maps GPT-2's fused c_attn onto them.
#pragma once

#include <memory>
#include <optional>
#include <vector>

#include "colrow/dist/communicator.h"
#include "colrow/nn/column_parallel_linear.h"
#include "colrow/nn/kv_cache.h"
#include "colrow/nn/model_config.h"
#include "colrow/nn/norm.h"
#include "colrow/nn/position_embedding.h"
#include "colrow/nn/transformer_block.h"
#include "colrow/nn/vocab_parallel_cross_entropy.h"
#include "colrow/nn/vocab_parallel_embedding.h"

namespace colrow {

class GptModel {
 public:
  // Validates config against tp (ConfigError) before allocating anything.
  // Parameters are made on the CPU; to() moves them to another device.
  GptModel(Communicator& tp, const ModelConfig& config, uint64_t seed = 0);

  // Moves every parameter (value and grad) to `device`; activations follow
  // the parameters at the next forward. `tp` must carry tensors of that
  // device (dist/device_communicator.h).
  void to(Device device);
  Device device() const { return device_; }

  // ids, targets: [batch * seq], row-major by sequence; a target equal to
  // ignore_index (-100) does not count. Returns the per-token losses and
  // their mean over the counted tokens (the same on every rank).
  CrossEntropyOutput forward(const std::vector<int32_t>& ids, const std::vector<int32_t>& targets,
                             int64_t batch, int64_t seq);
  // Accumulates every parameter's gradient of the last forward's mean loss.
  void backward();

  // Incremental decoding (infer/generator.h drives it). A zeroed cache of this
  // rank's KV heads for `slots` sequences of up to `capacity` positions
  // (1..max_position_embeddings), on the model's device.
  KvCache make_kv_cache(int64_t slots, int64_t capacity) const;
  // ids: [batch * n_new], the next n_new tokens of each sequence in `slots`
  // (batch = slots.size()), continuing at position cache.length(slot), which
  // then advances by n_new. One sequence (a prompt's prefill) or one token
  // each (a decoding step). Returns the logits of each sequence's last new
  // token: [batch, V_pad/tp]. Collectives: the embedding's all-reduce and two
  // per layer, each of [batch * n_new, d_model]; none for the logits.
  const Tensor& forward_cached(const std::vector<int32_t>& ids, const std::vector<int64_t>& slots,
                               int64_t n_new, KvCache& cache);

  const Tensor& logits_local() const { return logits_local_; }  // [tokens, V_pad/tp]
  std::vector<Parameter*> parameters();
  // Elements of this rank's parameter shards (replicated ones counted here too).
  int64_t local_parameter_count();
  void zero_grad();
  const ModelConfig& config() const { return config_; }
  int64_t padded_vocab_size() const { return embedding_.padded_vocab_size(); }
  int64_t vocab_size_local() const { return embedding_.vocab_size_local(); }

 private:
  Communicator& tp_;
  ModelConfig config_;
  Device device_;
  VocabParallelEmbedding embedding_;            // wte / model.embed_tokens
  std::optional<PositionEmbedding> positions_;  // wpe (gpt2)
  std::vector<std::unique_ptr<TransformerBlock>> blocks_;
  Norm final_norm_;                              // ln_f / model.norm
  std::optional<ColumnParallelLinear> lm_head_;  // untied head (llama)
  VocabParallelCrossEntropy loss_;
  int64_t batch_ = 0, seq_ = 0;
  Tensor x_;              // [tokens, d_model]: embeddings (+ positions), input of block 0
  Tensor normed_;         // [tokens, d_model]: the final norm's output (its buffer)
  Tensor logits_local_;   // [tokens, V_pad/tp]
  Tensor dh_;             // [tokens, d_model]: gradient into the final norm's output (tied head)
  Tensor position_rows_;  // decoding: [tokens, d_model], wpe's rows at the tokens' positions
};

}  // namespace colrow
