// GptModel: the whole decoder-only Transformer at any tp, read top to bottom
// as one script in forward() and backward():
//   tokens -> vocab-parallel embedding (+ learned positions, gpt2)
//          -> n_layer x TransformerBlock -> final norm
//          -> output head, vocab-parallel: logits stay [tokens, V_pad/tp]
//          -> vocab-parallel cross-entropy (one all-gather of [tokens, 4])
// The last two are the OutputHead (nn/output_head.h), in token chunks where
// the logits would be large (above set_logits_chunk_bytes).
// gpt2 ties the output head to the embedding (wte); llama has lm_head unless
// tie_word_embeddings. Parameter names are Hugging Face's (gpt2 without the
// "transformer." prefix); attention's q/k/v are separate parameters here
// (one fused projection's parts) and the checkpoint code maps GPT-2's fused
// c_attn onto them.
// Under pipeline parallelism a GptModel is one stage (nn/pipeline_stage.h):
// forward_stage()/backward_stage() run its part, and the pieces above that the
// stage does not hold are not built.
#pragma once

#include <array>
#include <functional>
#include <memory>
#include <optional>
#include <unordered_map>
#include <vector>

#include "colrow/dist/communicator.h"
#include "colrow/nn/kv_cache.h"
#include "colrow/nn/model_config.h"
#include "colrow/nn/norm.h"
#include "colrow/nn/output_head.h"
#include "colrow/nn/pipeline_stage.h"
#include "colrow/nn/position_embedding.h"
#include "colrow/nn/tp_region_input.h"
#include "colrow/nn/transformer_block.h"
#include "colrow/nn/vocab_parallel_cross_entropy.h"
#include "colrow/nn/vocab_parallel_embedding.h"

namespace colrow {

class GptModel {
 public:
  // The head and the blocks keep pointers into the model: it stays where it was built.
  GptModel(const GptModel&) = delete;
  GptModel& operator=(const GptModel&) = delete;

  // What a forward is for (nn/output_head.h): kTrain, backward() follows;
  // kEvaluate, none does.
  using Pass = colrow::Pass;

  // Validates config against tp (ConfigError) before allocating anything.
  // Parameters are made on the CPU; to() moves them to another device.
  // sequence_parallel (Megatron's): between the tensor-parallel regions, the
  // blocks' norms and residual adds and the final norm work on this rank's
  // batch*seq/tp token rows; forward() then needs batch*seq divisible by tp,
  // and forward_cached() refuses (decoding builds its model without it).
  GptModel(Communicator& tp, const ModelConfig& config, uint64_t seed = 0,
           bool sequence_parallel = false);
  // One pipeline stage of the model: only its blocks (and embeddings, head
  // and loss where the stage holds them) are built. Every parameter is the
  // same as in the whole model (initialization depends on the name only).
  GptModel(Communicator& tp, const ModelConfig& config, const PipelineStage& stage, uint64_t seed,
           bool sequence_parallel);

  // Moves every parameter (value and grad) to `device`; activations follow
  // the parameters at the next forward. `tp` must carry tensors of that
  // device (dist/device_communicator.h).
  void to(Device device);
  Device device() const { return device_; }

  // Mixed precision (Megatron's bf16, llm.c's): with kBF16 every parameter
  // keeps its fp32 value (the master AdamW updates) and a bf16 copy the
  // layers compute with; activations and their gradients are bf16, while
  // norm statistics, softmax, the loss and the parameters' gradients stay
  // fp32 (kernels/mixed_precision.h). kF32 (the default) drops the copies.
  void set_compute_dtype(DType dtype);
  DType compute_dtype() const { return compute_dtype_; }

  // Every block's MLP makes its activation again in backward instead of
  // keeping it (llm.c's recompute=1): one [tokens, ffn/tp] tensor per layer
  // less during training, for one more activation pass. The same losses and
  // gradients, bit for bit. Off by default.
  void set_recompute_activation(bool recompute);
  // Backward sums each tp region's input gradient (all-reduce, or the
  // reduce-scatter and re-gather of sequence parallelism) during the region's
  // weight-gradient GEMMs, as Megatron's asynchronous tensor-parallel
  // all-reduce does (on by default). Off waits for each collective where it
  // starts: the same losses and gradients, bit for bit; what overlapping gains.
  void set_overlap_tp_backward(bool overlap);
  // The most bytes of [rows, V_pad/tp] logits the output head holds at once
  // (kDefaultLogitsChunkBytes; 0: all tokens' at once). Above it, forward
  // runs the head and the loss in chunks of logits_chunk_rows() tokens, one
  // small all-gather each; a Pass::kTrain forward also takes each chunk's
  // loss gradient, its input gradient (dh, summed over tp in backward) and
  // its weight gradient (accumulated) before the next chunk overwrites its
  // logits, which the gradient replaced. The same losses and gradients as
  // one chunk up to fp32 rounding: a GEMM of fewer rows may sum in another
  // order, and the head's weight gradient sums its tokens chunk by chunk.
  // Takes effect at the next forward.
  void set_logits_chunk_bytes(int64_t bytes);
  int64_t logits_chunk_bytes() const { return logits_chunk_bytes_; }
  // Tokens per chunk of a forward over `tokens` token rows on the last stage
  // (logits_chunk_rows for this rank's classes in the compute dtype): tokens
  // itself when they run in one piece.
  int64_t logits_chunk_tokens(int64_t tokens) const;

  // Renews the bf16 copies from the values: after an optimizer step or a
  // load. A no-op in fp32.
  void refresh_compute_copies();

  // ids, targets: [batch * seq], row-major by sequence; a target equal to
  // ignore_index (-100) does not count. Returns the per-token losses and
  // their mean over the counted tokens (the same on every rank). The whole
  // model only (one pipeline stage).
  CrossEntropyOutput forward(const std::vector<int32_t>& ids, const std::vector<int32_t>& targets,
                             int64_t batch, int64_t seq, Pass pass = Pass::kTrain);
  // Accumulates every parameter's gradient of the last forward's mean loss
  // (sequence parallel: the partial gradients of norm weights and biases
  // summed over tp, so every rank holds the whole gradient, as without it).
  void backward();

  // While set, every backward reports the parameters whose gradients it
  // has finished, as indices into parameters(), so that their dp reduction
  // can start while backward goes on (AdamW::grads_ready): the output head's
  // and final norm's, then each block's, last block first. Never reported
  // (the optimizer takes them in its step): sequence-parallel parameters at
  // tp > 1 (summed over tp at the end of backward), and the embeddings, whose
  // gradients come last or are finished by the caller (a tied table's two
  // pipeline copies). An empty function (the default) reports nothing.
  using GradsReady = std::function<void(const std::vector<size_t>&)>;
  void set_on_grads_ready(GradsReady on_grads_ready);

  // A pipeline stage's forward of one micro-batch. The first stage reads
  // `ids`, the others `input`: the previous stage's output, [boundary_rows,
  // d_model], unchanged until backward_stage. The last stage reads `targets`
  // and returns the loss; the others return their output for the next stage
  // (this model's buffer, valid until its next forward_stage).
  struct StageForward {
    const Tensor* output = nullptr;  // not the last stage
    CrossEntropyOutput loss;         // the last stage
  };
  StageForward forward_stage(const std::vector<int32_t>& ids, const Tensor* input,
                             const std::vector<int32_t>& targets, int64_t batch, int64_t seq,
                             Pass pass = Pass::kTrain);
  // Checks a micro-batch as forward_stage does and stages its ids and targets
  // on the device (VocabParallelEmbedding::stage, VocabParallelCrossEntropy::
  // stage), so that forward_stage and backward_stage of it upload nothing: a
  // CUDA graph of the two is fed each micro-batch this way before its replay
  // (train/step_graph.h). Returns the targets that count (the last stage; 0
  // elsewhere), the one value of a batch besides its size that the work
  // queued for it depends on (the mean's 1 / counted).
  int64_t stage_inputs(const std::vector<int32_t>& ids, const std::vector<int32_t>& targets,
                       int64_t batch, int64_t seq);
  // Backward of the last forward_stage. grad_output: the next stage's
  // input gradient, the shape of the output (the last stage: nullptr, it
  // starts from its loss). Returns the gradient of `input` for the previous
  // stage (this model's buffer), nullptr on the first stage.
  const Tensor* backward_stage(const Tensor* grad_output);
  // Rows of the tensors that cross stage boundaries: batch * seq, or this
  // rank's batch * seq / tp under sequence parallelism.
  int64_t boundary_rows(int64_t batch, int64_t seq) const;
  const PipelineStage& stage() const { return stage_; }

  // A model of the same stage whose parameters are handles onto this one's
  // values and gradients. A pipeline stage keeps one per micro-batch in
  // flight, each holding its own activations while all train one weight set.
  std::unique_ptr<GptModel> make_replica();
  // The word embedding table on the stages that hold it (the first; the last
  // too when the head is tied to it), nullptr elsewhere.
  Parameter* word_embeddings() { return embedding_ ? &embedding_->weight() : nullptr; }

  // Incremental decoding (infer/generator.h drives it). A zeroed cache of this
  // rank's KV heads, for this stage's layers, for `slots` sequences of up to
  // `capacity` positions (1..max_position_embeddings), on the model's device, in
  // its compute dtype (set_compute_dtype before making the cache).
  KvCache make_kv_cache(int64_t slots, int64_t capacity) const;
  // ids: [batch * n_new], the next n_new tokens of each sequence in `slots`
  // (batch = slots.size()), continuing at position cache.length(slot), which
  // then advances by n_new. One sequence (a prompt's prefill) or one token
  // each (a decoding step). Returns the logits of each sequence's last new
  // token: [batch, V_pad/tp]. Collectives: the embedding's all-reduce and two
  // per layer, each of [batch * n_new, d_model]; none for the logits.
  const Tensor& forward_cached(const std::vector<int32_t>& ids, const std::vector<int64_t>& slots,
                               int64_t n_new, KvCache& cache);
  // The same for one pipeline stage. The first stage reads `ids`, the others
  // `input`: the previous stage's output, [batch * n_new, d_model]. The last
  // stage returns the logits as above; the others their output for the next
  // stage (this model's buffer, valid until the next call). Every stage
  // advances its cache's slots.
  const Tensor& forward_cached_stage(const std::vector<int32_t>& ids, const Tensor* input,
                                     const std::vector<int64_t>& slots, int64_t n_new,
                                     KvCache& cache);

  // [tokens, V_pad/tp]: the last forward's logits; after backward, their
  // gradient, written in their place (VocabParallelCrossEntropy::set_gradient_in_place).
  // After a forward in chunks: the last chunk's (a training forward's: its gradient).
  const Tensor& logits_local() const { return head_ ? head_->logits_local() : no_logits_; }
  std::vector<Parameter*> parameters();
  // Elements of this rank's parameter shards (replicated ones counted here too).
  int64_t local_parameter_count();
  void zero_grad();
  const ModelConfig& config() const { return config_; }
  Communicator& tp() const { return tp_; }  // the group its weights are split over
  int64_t padded_vocab_size() const { return padded_vocab_size_; }
  int64_t vocab_size_local() const { return padded_vocab_size_ / tp_.size(); }
  bool sequence_parallel() const { return sequence_parallel_; }

 private:
  // Sums over tp the gradients this backward added to sequence-parallel
  // parameters (one all-reduce of them all), keeping what earlier
  // micro-batches accumulated out of the sum: stash at the start of
  // backward, reduce at its end.
  void stash_sequence_parallel_grads();
  void reduce_sequence_parallel_grads();
  // The pieces of forward_stage and backward_stage.
  const Tensor& embed(const std::vector<int32_t>& ids, int64_t batch, int64_t seq);
  void embedding_backward(const Tensor& dx);
  void require_whole_model(const char* what) const;
  // InvalidInputError unless ids and targets (where this stage reads them)
  // are batch x seq tokens; sequence parallel: tokens divisible by tp.
  void check_batch(const std::vector<int32_t>& ids, const std::vector<int32_t>& targets,
                   int64_t batch, int64_t seq) const;
  // Calls on_grads_ready_ (set) with `group`'s reportable parameters, if any.
  void report_grads_ready(const std::vector<Parameter*>& group);
  // This model's parameters become handles onto `owner`'s (same stage:
  // names and shapes checked).
  void share_parameters_of(GptModel& owner);

  Communicator& tp_;
  ModelConfig config_;
  PipelineStage stage_;
  bool sequence_parallel_;
  Device device_;
  DType compute_dtype_ = DType::kF32;
  bool recompute_activation_ = false;
  bool overlap_tp_backward_ = true;
  int64_t padded_vocab_size_;
  // wte / model.embed_tokens: on the first stage, and on the last as the tied
  // head's copy (Parameter::pipeline_copy)
  std::optional<VocabParallelEmbedding> embedding_;
  std::optional<PositionEmbedding> positions_;  // wpe (gpt2), first stage
  std::vector<std::unique_ptr<TransformerBlock>> blocks_;
  // The last stage's:
  std::optional<Norm> final_norm_;  // ln_f / model.norm
  std::optional<OutputHead> head_;  // lm_head (or the tied wte) and the loss
  int64_t batch_ = 0, seq_ = 0;
  Tensor x_;        // [tokens, d_model]: embeddings (+ positions)
  Tensor x_block_;  // sequence parallel: my [tokens/tp, d_model] rows of x_, block 0's input
  Tensor dx_;       // sequence parallel: [tokens, d_model], the blocks' dx gathered
  // The blocks' input gradients, alternating: block i reads one and writes
  // the other. The first block's stays intact until this model's next
  // backward (a pipeline stage may still be sending it).
  std::array<Tensor, 2> block_grads_;
  int64_t logits_chunk_bytes_ = kDefaultLogitsChunkBytes;  // the head's, when there is one
  Tensor no_logits_;  // logits_local() of a stage without the head
  std::vector<Parameter*> sequence_parallel_params_;
  Tensor sp_grads_;       // their gradients, packed for one all-reduce
  Tensor sp_grad_stash_;  // their gradients before this backward, packed
  GradsReady on_grads_ready_;
  std::unordered_map<const Parameter*, size_t> parameter_index_;  // in parameters(), made once
  Tensor position_rows_;  // decoding: [tokens, d_model], wpe's rows at the tokens' positions
};

}  // namespace colrow
