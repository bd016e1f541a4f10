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
#include "colrow/nn/tp_region_input.h"
#include "colrow/nn/transformer_block.h"
#include "colrow/nn/vocab_parallel_cross_entropy.h"
#include "colrow/nn/vocab_parallel_embedding.h"

namespace colrow {

class GptModel {
 public:
  // Validates config against tp (ConfigError) before allocating anything.
  // Parameters are made on the CPU; to() moves them to another device.
  // sequence_parallel (Megatron's): between the tensor-parallel regions, the
  // blocks' norms and residual adds and the final norm work on this rank's
  // batch*seq/tp token rows; forward() then needs batch*seq divisible by tp,
  // and forward_cached() refuses (decoding builds its model without it).
  GptModel(Communicator& tp, const ModelConfig& config, uint64_t seed = 0,
           bool sequence_parallel = false);

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
  // Accumulates every parameter's gradient of the last forward's mean loss
  // (sequence parallel: the partial gradients of norm weights and biases
  // summed over tp, so every rank holds the whole gradient, as without it).
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
  bool sequence_parallel() const { return sequence_parallel_; }

 private:
  // Sums over tp the gradients this backward added to sequence-parallel
  // parameters (one all-reduce of them all), keeping what earlier
  // micro-batches accumulated out of the sum: stash at the start of
  // backward, reduce at its end.
  void stash_sequence_parallel_grads();
  void reduce_sequence_parallel_grads();

  Communicator& tp_;
  ModelConfig config_;
  bool sequence_parallel_;
  Device device_;
  VocabParallelEmbedding embedding_;            // wte / model.embed_tokens
  std::optional<PositionEmbedding> positions_;  // wpe (gpt2)
  std::vector<std::unique_ptr<TransformerBlock>> blocks_;
  Norm final_norm_;                              // ln_f / model.norm
  TpRegionInput head_input_;                     // the output head's: normed rows made whole
  std::optional<ColumnParallelLinear> lm_head_;  // untied head (llama)
  VocabParallelCrossEntropy loss_;
  int64_t batch_ = 0, seq_ = 0;
  Tensor x_;             // [tokens, d_model]: embeddings (+ positions)
  Tensor x_block_;       // sequence parallel: my [tokens/tp, d_model] rows of x_, block 0's input
  Tensor dx_;            // sequence parallel: [tokens, d_model], the blocks' dx gathered
  Tensor logits_local_;  // [tokens, V_pad/tp]
  std::vector<Parameter*> sequence_parallel_params_;
  Tensor sp_grads_;       // their gradients, packed for one all-reduce
  Tensor sp_grad_stash_;  // their gradients before this backward, packed
  Tensor position_rows_;  // decoding: [tokens, d_model], wpe's rows at the tokens' positions
};

}  // namespace colrow
