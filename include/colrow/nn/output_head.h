// OutputHead: the last stage's output layer and loss, Megatron's
// vocab-parallel output layer with its cross-entropy:
//   normed: [tokens, d_model] (replicated; sequence parallel: all-gathered
//   from this rank's rows) -> logits_local = normed W_local^T: [tokens, V_pad/tp]
//   over this rank's vocab rows of W (lm_head, or the embedding table it is
//   tied to) -> vocab-parallel cross-entropy (one all-gather of [tokens, 4]),
//   which never gathers the logits.
// Backward: dh (partial over tp) = dlogits W_local, summed over tp (or
// reduce-scattered to this rank's rows) while dW_local += dlogits^T normed.
// Above a byte budget (set_chunk_bytes) forward runs in token chunks, as
// Liger's fused linear cross-entropy: a training forward takes each chunk's
// loss gradient, its dh rows and its weight gradient before the next chunk
// overwrites the logits, so no more than one chunk's logits exist; backward
// then only sums dh over tp. One chunk keeps the logits for backward, whose
// dh all-reduce overlaps the weight-gradient GEMM.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "colrow/dist/communicator.h"
#include "colrow/nn/model_config.h"
#include "colrow/nn/parameter.h"
#include "colrow/nn/tp_region_input.h"
#include "colrow/nn/vocab_parallel_cross_entropy.h"

namespace colrow {

// The default bound on the logits the output head holds at once (256 MiB:
// GPT-2's 50304 classes in bf16 at about 2.6k tokens per chunk).
constexpr int64_t kDefaultLogitsChunkBytes = int64_t{256} << 20;

// Rows per chunk of `tokens` logit rows of `row_bytes` each, so that a chunk
// holds at most `budget_bytes` (at least one row): tokens (one chunk) when
// they all fit or the budget is 0; else the rows split evenly over as few
// chunks as fit, in whole 64-row GEMM tiles where the budget holds 64 rows
// or more (rounded up while it still fits, else down).
int64_t logits_chunk_rows(int64_t tokens, int64_t row_bytes, int64_t budget_bytes);
// ConfigError unless a logits budget is 0 (all tokens at once) or positive.
void validate_logits_chunk_bytes(int64_t bytes);

// What a forward is for. kTrain: backward follows it, before the next forward
// (a chunked head computes its gradients in forward). kEvaluate: no backward
// follows (a chunked head computes the loss only).
enum class Pass { kTrain, kEvaluate };

class OutputHead {
 public:
  // tied: the embedding table the head reads (tie_word_embeddings: gpt2's
  // wte), whose gradient it adds to; null: the head's own lm_head.weight,
  // normal(0.02) over [V_pad, d_model] split by vocab rows, the padded rows
  // zero (they never receive probability, are not saved, and load as zero).
  OutputHead(Communicator& tp, const ModelConfig& config, int64_t padded_vocab_size, uint64_t seed,
             Parameter* tied, bool sequence_parallel);
  OutputHead(const OutputHead&) = delete;
  OutputHead& operator=(const OutputHead&) = delete;

  // normed: the final norm's output (sequence parallel: this rank's rows),
  // unchanged until backward. Returns the per-token losses and the count of
  // targets that count (the same on every rank).
  CrossEntropyOutput forward(const Tensor& normed, const std::vector<int32_t>& targets, Pass pass);
  // After a Pass::kTrain forward: the mean loss's gradient with respect to
  // normed (sequence parallel: this rank's rows), whole over tp; the head's
  // weight gradient accumulated. InternalError after an evaluating forward in
  // chunks, or twice after one forward.
  const Tensor& backward();
  // Decoding: [rows, V_pad/tp] logits of `normed` ([rows, d_model], replicated).
  const Tensor& logits(const Tensor& normed);
  // Checks (and on a GPU uploads) the targets ahead of forward; returns how
  // many count (VocabParallelCrossEntropy::stage).
  int64_t stage(const std::vector<int32_t>& targets, Device device) const;
  // Whether the last forward took gradients that no backward has used yet.
  bool gradients_pending() const { return state_ == State::kGradientsTaken; }

  // The most bytes of logits held at once (0: all tokens' at once).
  void set_chunk_bytes(int64_t bytes);
  int64_t chunk_bytes() const { return chunk_bytes_; }
  // Tokens per chunk of a forward over `tokens` rows with logits in `dtype`.
  int64_t chunk_tokens(int64_t tokens, DType dtype) const;
  // Sum dh over tp while the weight gradient computes (on by default).
  void set_overlap(bool overlap) { input_.set_overlap(overlap); }

  // lm_head.weight; none when tied (the embedding holds the table).
  std::vector<Parameter*> parameters();
  // [tokens, V_pad/tp]: the last forward's logits; after backward, their
  // gradient, written in their place. After a forward in chunks: the last
  // chunk's (a training forward's: its gradient).
  const Tensor& logits_local() const { return logits_local_; }
  int64_t vocab_size_local() const { return loss_.vocab_size_local(); }

 private:
  Parameter& weight() { return lm_head_ ? *lm_head_ : *tied_; }
  CrossEntropyOutput forward_in_chunks(const Tensor& normed, const std::vector<int32_t>& targets,
                                       int64_t chunk_rows, Pass pass);

  bool sequence_parallel_;
  TpRegionInput input_;  // normed rows made whole; dh summed over tp
  VocabParallelCrossEntropy loss_;
  Parameter* tied_;
  std::optional<Parameter> lm_head_;
  int64_t chunk_bytes_ = kDefaultLogitsChunkBytes;
  Tensor logits_local_;  // [tokens, V_pad/tp], or a view of the chunks' storage
  // Storage grown and viewed (leading_rows), so chunks of uneven sizes and
  // batches of other sizes reuse it:
  Tensor logits_chunks_;  // [chunk rows, V_pad/tp]: the chunks' logits, one at a time
  Tensor chunk_losses_;   // [tokens]: the chunks' losses
  // Sequence parallel: the chunks' dh, [tokens, d_model], until backward.
  // The region's partial_grad() is a buffer every SP region shares
  // (nn/tp_region_input.h), which another model's backward may use between
  // this forward and its backward; without SP it is the region's own.
  Tensor chunks_dh_;
  // What the last forward left for backward.
  enum class State {
    kNone,            // no forward since the last backward
    kLogits,          // all the logits (one chunk): backward starts from them
    kGradientsTaken,  // a training forward in chunks: backward starts from dh
    kLossesOnly,      // an evaluating forward in chunks: no backward
  };
  State state_ = State::kNone;
};

}  // namespace colrow
