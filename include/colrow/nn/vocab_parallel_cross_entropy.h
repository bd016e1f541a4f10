// VocabParallelCrossEntropy (Megatron's vocab_parallel_cross_entropy, fixed):
// softmax cross-entropy over logits that stay split by vocabulary columns,
// rank r holding classes [r*V_pad/tp, (r+1)*V_pad/tp).
//   forward:  logits_local: [tokens, V_pad/tp], targets: [tokens] (replicated)
//             -> losses: [tokens] and their mean (replicated)
//   backward: -> dlogits_local: [tokens, V_pad/tp], formed locally
// Passes and collectives: forward reads the local logits once (each row's max,
// sum of exps, target logit and sum of logits, as online softmax does), then
// exactly one small all-gather over tp of those [tokens, 4] partials, never
// of logits, which every rank combines in rank order; backward reads the
// logits once more and writes the gradient (over them when in place), with
// no communication. No probabilities are kept.
// Fixes against Megatron: padded classes (>= vocab_size) are masked out (they
// get no probability and no gradient); label smoothing follows PyTorch exactly,
//   loss = (1 - a) CE + a mean_{j < V}(-log p_j),
// with the mean over all real classes reduced over tp; every rank computes the
// loss from the gathered partials only, so all ranks hold the same bits (and
// every tp the same loss up to the rounding of the partial sums).
#pragma once

#include <cstdint>
#include <vector>

#include "colrow/core/tensor.h"
#include "colrow/dist/communicator.h"

namespace colrow {

// The target that does not count, PyTorch's and Hugging Face's default.
constexpr int32_t kIgnoreIndex = -100;

// The sum of per-token `losses` ([tokens] fp32, 0 on ignored rows) in double,
// in token order, so every device, rank and tp gives the same bits for the
// same losses. Reads the losses back: on a GPU, a wait for the kernels that
// wrote them.
double loss_sum(const Tensor& losses);
// loss_sum over `counted` tokens, rounded to fp32 once; NaN when counted is 0
// (as PyTorch).
float mean_loss(const Tensor& losses, int64_t counted);

struct CrossEntropyOutput {
  Tensor losses;        // [tokens]: per-token loss, 0 where target == ignore_index (a view
                        // of the layer's buffer on the logits' device, valid until the
                        // next forward)
  int64_t counted = 0;  // tokens whose target is not ignore_index
  // Over the counted tokens, as PyTorch's reduction='mean' (mean_loss). Not
  // computed by forward, which leaves the losses where they are: a training
  // step reads them once its backward is queued, not between the two.
  float mean() const { return mean_loss(losses, counted); }
};

// Pure, identical on every rank: the vocabulary sizes as validate_vocab_sizes
// (vocab_parallel_embedding.h) and 0 <= label_smoothing <= 1.
void validate_cross_entropy(int64_t vocab_size, int64_t padded_vocab_size, int tp,
                            float label_smoothing);

class VocabParallelCrossEntropy {
 public:
  VocabParallelCrossEntropy(Communicator& tp, int64_t vocab_size, int64_t padded_vocab_size,
                            float label_smoothing = 0.0f, int32_t ignore_index = kIgnoreIndex);

  // logits_local: [tokens, padded_vocab_size/tp], my classes; must stay
  // unchanged until backward. targets: [tokens], each in [0, vocab_size) or
  // ignore_index, else InvalidInputError naming the first bad target and its
  // position, thrown before any collective and alike on every rank.
  CrossEntropyOutput forward(const Tensor& logits_local, const std::vector<int32_t>& targets);
  // The same for one chunk of a batch (nn/output_head.h runs the head in
  // token chunks): logits_local holds rows [first_row, first_row + rows)
  // of the batch whose targets are `targets`; the losses and backward are
  // those rows' (counted: the chunk's). Only the chunk's targets are
  // checked: stage() checks the batch's before the first chunk's collective.
  CrossEntropyOutput forward_rows(const Tensor& logits_local, const std::vector<int32_t>& targets,
                                  int64_t first_row);

  // dlogits_local: [tokens, padded_vocab_size/tp] = dloss_t * d loss_t / d logits_t
  //   = dloss_t (softmax - (1 - a) onehot(target) - a / V) on real classes,
  // zero on padded classes and ignored rows. Three ways to give dloss_t:
  // The mean's gradient, 1 / counted: after forward_rows the chunk's own
  // count, so a chunked batch's mean needs backward(1 / the batch's count).
  const Tensor& backward();
  const Tensor& backward(float grad_scale);     // the same scale for every token
  const Tensor& backward(const Tensor& dloss);  // dloss: [tokens], per token

  // Checks `targets` as forward does, stages them on `device`
  // (ops::stage_cross_entropy_targets: forward and backward then upload
  // nothing, what a CUDA graph of them needs) and returns how many count.
  int64_t stage(const std::vector<int32_t>& targets, Device device) const;

  // With `in_place`, backward writes dlogits over the logits forward was
  // given (when they are contiguous) and returns them, as llm.c's fused
  // classifier does: no [tokens, V_pad/tp] buffer of the layer's own, the
  // largest activation of a GPT. The caller gives up those logits: nothing
  // may read them after backward, and a second backward needs a new forward
  // (InternalError otherwise). Off by default.
  void set_gradient_in_place(bool in_place) { in_place_ = in_place; }

  int64_t vocab_size() const { return vocab_size_; }
  int64_t padded_vocab_size() const { return padded_vocab_size_; }
  int64_t vocab_start() const { return vocab_start_; }  // my first class
  int64_t vocab_size_local() const { return vocab_size_local_; }
  float label_smoothing() const { return label_smoothing_; }
  int32_t ignore_index() const { return ignore_index_; }

 private:
  const Tensor& backward_scaled(const Tensor* dloss, float uniform_scale);
  // Targets in [first, first + count) that count; InvalidInputError at the
  // first one out of range.
  int64_t counted_targets(const std::vector<int32_t>& targets, int64_t first, int64_t count) const;

  Communicator& tp_;
  int64_t vocab_size_;
  int64_t padded_vocab_size_;
  float label_smoothing_;
  int32_t ignore_index_;
  int64_t vocab_size_local_;
  int64_t vocab_start_;
  int64_t real_local_;  // my classes below vocab_size: columns [0, real_local_) are real
  bool in_place_ = false;
  bool logits_consumed_ = false;  // backward wrote over logits_

  Tensor logits_;                 // [tokens, V_pad/tp]: the caller's logits, read by backward
  std::vector<int32_t> targets_;  // the batch's, of which the logits hold
  int64_t first_row_ = 0;         // rows [first_row_, first_row_ + tokens)
  int64_t counted_ = 0;
  // The last forward's (views of storage_, which grows to the most rows
  // asked for: a batch's chunks, of uneven sizes, reuse it):
  Tensor partials_;  // [tokens, 4]: my classes' max, sums and target logit
  Tensor gathered_;  // [tp * tokens, 4]: every rank's partials (tp > 1)
  Tensor max_;       // [tokens]: row max over every real class
  Tensor sum_exp_;   // [tokens]: sum_j exp(x_j - max) over every real class
  Tensor losses_;    // [tokens]
  Tensor dlogits_;   // [tokens, V_pad/tp]
  struct {
    Tensor partials, gathered, max, sum_exp, losses, dlogits;
  } storage_;
};

}  // namespace colrow
