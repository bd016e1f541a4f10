// OutputHead: logits over this rank's vocab rows, then the vocab-parallel
// cross-entropy; whole, or in token chunks with the gradients taken as each
// chunk's loss is known.
// Collectives: forward none (sequence parallel: the all-gather of normed's
// rows) plus the loss's all-gather of [tokens, 4] (one of [chunk rows, 4]
// per chunk); backward one all-reduce of dh over tp (sequence parallel: a
// reduce-scatter to this rank's rows).
#include "colrow/nn/output_head.h"

#include <algorithm>

#include "colrow/core/error.h"
#include "colrow/nn/column_parallel_linear.h"
#include "colrow/nn/shared_buffer.h"
#include "kernels/ops.h"

namespace colrow {
namespace {

using ops::Trans;

// Chunks of more rows than this are whole multiples of it (GEMM tiles).
constexpr int64_t kChunkRowMultiple = 64;

int64_t ceil_div(int64_t a, int64_t b) {
  return (a + b - 1) / b;
}

}  // namespace

int64_t logits_chunk_rows(int64_t tokens, int64_t row_bytes, int64_t budget_bytes) {
  if (tokens < 1 || budget_bytes <= 0 || tokens * row_bytes <= budget_bytes) return tokens;
  const int64_t fit = std::max<int64_t>(1, budget_bytes / std::max<int64_t>(1, row_bytes));
  const int64_t rows = ceil_div(tokens, ceil_div(tokens, fit));  // balanced, at most fit
  if (fit < kChunkRowMultiple) return rows;
  const int64_t tiles = ceil_div(rows, kChunkRowMultiple) * kChunkRowMultiple;
  return tiles <= fit ? std::min(tokens, tiles) : fit / kChunkRowMultiple * kChunkRowMultiple;
}

OutputHead::OutputHead(Communicator& tp, const ModelConfig& config, int64_t padded_vocab_size,
                       uint64_t seed, Parameter* tied, bool sequence_parallel)
    : sequence_parallel_(sequence_parallel),
      input_(tp, sequence_parallel),
      loss_(tp, config.vocab_size, padded_vocab_size),
      tied_(tied) {
  // The logits are this head's buffer, read by nothing after the loss's
  // backward: their gradient takes their place.
  loss_.set_gradient_in_place(true);
  if (tied_ != nullptr) return;
  lm_head_.emplace("lm_head.weight",
                   output_rows({padded_vocab_size, config.d_model}, {tp.rank(), tp.size()}),
                   Init::normal(0.02f), seed);
  Tensor& w = lm_head_->value;  // padded vocabulary rows hold zeros, as the embedding's do
  const int64_t first_row = lm_head_->shard.offset_along_dim();
  const int64_t real_rows =
      std::max<int64_t>(0, std::min(w.size(0), config.vocab_size - first_row));
  if (real_rows < w.size(0)) w.slice(0, real_rows, w.size(0) - real_rows).zero();
}

void validate_logits_chunk_bytes(int64_t bytes) {
  if (bytes < 0) {
    throw ConfigError("[model] logits chunk (" + std::to_string(bytes) +
                      " bytes) must be 0 (all tokens' logits at once) or a positive size.");
  }
}

void OutputHead::set_chunk_bytes(int64_t bytes) {
  validate_logits_chunk_bytes(bytes);
  chunk_bytes_ = bytes;
}

int64_t OutputHead::chunk_tokens(int64_t tokens, DType dtype) const {
  return logits_chunk_rows(tokens, vocab_size_local() * dtype_bytes(dtype), chunk_bytes_);
}

int64_t OutputHead::stage(const std::vector<int32_t>& targets, Device device) const {
  return loss_.stage(targets, device);
}

CrossEntropyOutput OutputHead::forward(const Tensor& normed_given,
                                       const std::vector<int32_t>& targets, Pass pass) {
  // The final norm's output made whole: none, or an all-gather of the blocks
  const Tensor& normed = input_.forward(normed_given);
  const int64_t chunk_rows = chunk_tokens(normed.size(0), normed.dtype());
  if (chunk_rows < normed.size(0)) return forward_in_chunks(normed, targets, chunk_rows, pass);
  state_ = State::kLogits;
  logits(normed);                                // no communication
  return loss_.forward(logits_local_, targets);  // one all-gather of [tokens, 4]
}

const Tensor& OutputHead::logits(const Tensor& normed) {
  // normed: [tokens, d_model] (replicated) -> logits_local: [tokens, V_pad/tp]
  // [f fwd] identity: normed is replicated
  ensure_shape(logits_local_, {normed.size(0), vocab_size_local()}, normed.device(),
               normed.dtype());
  ops::gemm(Trans::kNo, Trans::kYes, 1.0f, normed, weight().compute(), 0.0f, logits_local_);
  return logits_local_;
}

CrossEntropyOutput OutputHead::forward_in_chunks(const Tensor& normed,
                                                 const std::vector<int32_t>& targets,
                                                 int64_t chunk_rows, Pass pass) {
  const int64_t tokens = normed.size(0);
  const Device device = normed.device();
  // Every target checked before the first chunk's collective (alike on every
  // rank), and on a GPU uploaded once for all chunks.
  const int64_t counted = loss_.stage(targets, device);
  logits_local_ = Tensor();  // a view of an older chunk buffer: let it go
  const Tensor logits_chunk =
      leading_rows(logits_chunks_, {chunk_rows, vocab_size_local()}, device, normed.dtype());
  const Tensor losses = leading_rows(chunk_losses_, {tokens}, device);
  const Tensor& w = weight().compute();  // [V_pad/tp, d_model]: my vocab rows
  Tensor* dh = nullptr;
  if (pass == Pass::kTrain && sequence_parallel_) {
    ensure_shape(chunks_dh_, normed.shape(), device, normed.dtype());
    dh = &chunks_dh_;
  } else if (pass == Pass::kTrain) {
    dh = &input_.partial_grad();  // the region's own buffer
  }
  // The mean's gradient, as VocabParallelCrossEntropy::backward() takes it.
  const float mean_scale = counted > 0 ? 1.0f / static_cast<float>(counted) : 0.0f;
  for (int64_t first = 0; first < tokens; first += chunk_rows) {
    const int64_t n = std::min(chunk_rows, tokens - first);
    const Tensor rows = normed.slice(0, first, n);
    Tensor chunk = logits_chunk.slice(0, 0, n);
    // rows: [n, d_model] (replicated) -> chunk: [n, V_pad/tp], no communication
    ops::gemm(Trans::kNo, Trans::kYes, 1.0f, rows, w, 0.0f, chunk);
    const CrossEntropyOutput part = loss_.forward_rows(chunk, targets, first);  // all-gather [n, 4]
    losses.slice(0, first, n).copy_from(part.losses);
    logits_local_ = chunk;
    if (dh == nullptr) continue;
    // The chunk's loss gradient over its logits, in their place; then what
    // backward does with it, for these rows: dh (partial over tp) =
    // dlogits W_local, and d W_local += dlogits^T rows.
    const Tensor& dlogits = loss_.backward(mean_scale);
    Tensor dh_rows = dh->slice(0, first, n);
    ops::gemm(Trans::kNo, Trans::kNo, 1.0f, dlogits, w, 0.0f, dh_rows);
    ops::gemm(Trans::kYes, Trans::kNo, 1.0f, dlogits, rows, 1.0f, weight().grad);
  }
  state_ = dh != nullptr ? State::kGradientsTaken : State::kLossesOnly;
  CrossEntropyOutput out;
  out.losses = losses;
  out.counted = counted;
  return out;
}

const Tensor& OutputHead::backward() {
  const State state = state_;
  state_ = State::kNone;
  if (state == State::kGradientsTaken) {
    // The chunked forward took dh and the weight gradient already.
    if (sequence_parallel_) input_.partial_grad().copy_from(chunks_dh_);
    input_.reduce_partial_grad();  // [f bwd] all-reduce (or reduce-scatter) of dh
    return input_.grad();
  }
  if (state == State::kLossesOnly) {
    throw InternalError(
        "[model] backward after a forward with Pass::kEvaluate that ran the output head in "
        "chunks (no logits kept): run the forward with Pass::kTrain");
  }
  if (state == State::kNone) {
    throw InternalError("[model] backward without a forward since the last backward");
  }
  const Tensor& dlogits_local = loss_.backward();  // [tokens, V_pad/tp], no communication
  // dh (partial over tp) = dlogits_local W_local   ([tokens, V_pad/tp] x [V_pad/tp, d_model])
  Tensor& dh = input_.partial_grad();
  ops::gemm(Trans::kNo, Trans::kNo, 1.0f, dlogits_local, weight().compute(), 0.0f, dh);
  // [f bwd] all-reduce (or reduce-scatter to my rows) of dh, while the
  // weight gradient computes: d W_local += dlogits_local^T normed
  input_.reduce_partial_grad();
  ops::gemm(Trans::kYes, Trans::kNo, 1.0f, dlogits_local, input_.input(), 1.0f, weight().grad);
  return input_.grad();
}

std::vector<Parameter*> OutputHead::parameters() {
  if (lm_head_) return {&*lm_head_};
  return {};
}

}  // namespace colrow
