// The model's forward and backward, one straight script of layer calls.
// Collectives per step: 1 all-reduce in the embedding, 2 per block forward and
// 2 backward, 1 backward for the output head's input gradient, and the loss's
// three all-reduces of [tokens]. Sequence parallel: each block's all-reduces
// become reduce-scatter + all-gather pairs, the head's input is all-gathered
// forward and its gradient reduce-scattered, the blocks' dx is all-gathered
// for the embeddings, and one all-reduce sums the norm (and bias) gradients.
#include "colrow/nn/gpt_model.h"

#include <algorithm>

#include "colrow/core/error.h"
#include "kernels/ops.h"

namespace colrow {
namespace {

using ops::Trans;

const ModelConfig& validated(const ModelConfig& config, int tp) {
  validate(config, tp);
  return config;
}

bool is_gpt2(const ModelConfig& c) {
  return c.family == ModelFamily::kGpt2;
}

LinearSpec lm_head_spec(const ModelConfig& c, int64_t padded_vocab, uint64_t seed) {
  LinearSpec spec;
  spec.name = "lm_head";
  spec.in_features = c.d_model;
  spec.out_features = padded_vocab;
  spec.bias = false;
  spec.seed = seed;
  spec.weight_init = Init::normal(0.02f);
  return spec;
}

}  // namespace

GptModel::GptModel(Communicator& tp, const ModelConfig& config, uint64_t seed,
                   bool sequence_parallel)
    : tp_(tp),
      config_(validated(config, tp.size())),
      sequence_parallel_(sequence_parallel),
      embedding_(tp, is_gpt2(config) ? "wte" : "model.embed_tokens", config.vocab_size,
                 colrow::padded_vocab_size(config.vocab_size, tp.size(), config.vocab_multiple),
                 config.d_model, Init::normal(0.02f), seed),
      final_norm_(config, is_gpt2(config) ? "ln_f" : "model.norm", seed),
      head_input_(tp, sequence_parallel),
      loss_(tp, config.vocab_size, embedding_.padded_vocab_size()) {
  if (is_gpt2(config)) {
    positions_.emplace("wpe", config.max_position_embeddings, config.d_model, Init::normal(0.01f),
                       seed);
  }
  for (int layer = 0; layer < config.n_layer; ++layer) {
    blocks_.push_back(
        std::make_unique<TransformerBlock>(tp, config, layer, seed, sequence_parallel));
  }
  for (Parameter* p : final_norm_.parameters()) p->sequence_parallel = sequence_parallel;
  if (!config.tie_word_embeddings) {
    lm_head_.emplace(tp, lm_head_spec(config, embedding_.padded_vocab_size(), seed));
    // Padded vocabulary rows hold zeros, as the embedding's do: they never
    // receive probability, are not saved, and load as zero.
    Tensor& w = lm_head_->weight().value;
    const int64_t first_row = lm_head_->weight().shard.offset_along_dim();
    const int64_t real_rows =
        std::max<int64_t>(0, std::min(w.size(0), config.vocab_size - first_row));
    if (real_rows < w.size(0)) w.slice(0, real_rows, w.size(0) - real_rows).zero();
  }
}

void GptModel::to(Device device) {
  for (Parameter* p : parameters()) p->to(device);
  device_ = device;
}

CrossEntropyOutput GptModel::forward(const std::vector<int32_t>& ids,
                                     const std::vector<int32_t>& targets, int64_t batch,
                                     int64_t seq) {
  if (batch < 1 || seq < 1 || static_cast<int64_t>(ids.size()) != batch * seq ||
      ids.size() != targets.size()) {
    throw InvalidInputError("[model] " + std::to_string(ids.size()) + " ids and " +
                            std::to_string(targets.size()) + " targets must both equal batch (" +
                            std::to_string(batch) + ") x seq (" + std::to_string(seq) + ").");
  }
  if (sequence_parallel_) require_tokens_divisible(batch * seq, tp_.size(), "model");
  batch_ = batch;
  seq_ = seq;
  // ids: [tokens] -> x: [tokens, d_model]            one all-reduce (embedding's [g fwd])
  const Tensor& embedded = embedding_.forward(ids);
  ensure_shape(x_, embedded.shape(), embedded.device());
  x_.copy_from(embedded);
  if (positions_) positions_->forward(x_, batch, seq);

  const Tensor* h = &x_;
  if (sequence_parallel_) {  // my block of token rows; no communication
    const int64_t rows = x_.size(0) / tp_.size();
    x_block_ = x_.slice(0, tp_.rank() * rows, rows);
    h = &x_block_;
  }
  for (auto& block : blocks_) h = &block->forward(*h, batch, seq);  // 2 all-reduces each
  // The final norm's output (its buffer), made whole: none, or an all-gather of the blocks
  const Tensor& normed = head_input_.forward(final_norm_.forward(*h));

  // normed: [tokens, d_model] (replicated) -> logits_local: [tokens, V_pad/tp]
  if (lm_head_) {
    logits_local_ = lm_head_->forward(normed);  // column-parallel: no communication
  } else {
    // Tied head: my vocab rows of the embedding. [f fwd] identity: normed is replicated.
    ensure_shape(logits_local_, {normed.size(0), embedding_.vocab_size_local()}, normed.device());
    ops::gemm(Trans::kNo, Trans::kYes, 1.0f, normed, embedding_.weight_local(), 0.0f,
              logits_local_);
  }
  return loss_.forward(logits_local_, targets);  // three all-reduces of [tokens]
}

KvCache GptModel::make_kv_cache(int64_t slots, int64_t capacity) const {
  if (slots < 1 || capacity < 1 || capacity > config_.max_position_embeddings) {
    throw InvalidInputError(
        "[model] a KV cache of " + std::to_string(slots) + " slot(s) x " +
        std::to_string(capacity) +
        " positions: need at least one slot and 1 to max_position_embeddings (" +
        std::to_string(config_.max_position_embeddings) + ") positions.");
  }
  const ParallelAttention& attention = blocks_.front()->attention();
  return KvCache(config_.n_layer, slots, attention.n_kv_head_local(), capacity,
                 attention.config().head_dim, device_);
}

const Tensor& GptModel::forward_cached(const std::vector<int32_t>& ids,
                                       const std::vector<int64_t>& slots, int64_t n_new,
                                       KvCache& cache) {
  if (sequence_parallel_) {
    throw InternalError(
        "[model] forward_cached runs without sequence parallelism: build the "
        "decoding model with sequence_parallel = false");
  }
  const int64_t batch = static_cast<int64_t>(slots.size());
  if (batch < 1 || n_new < 1 || (batch > 1 && n_new > 1) ||
      static_cast<int64_t>(ids.size()) != batch * n_new) {
    throw InvalidInputError("[model] forward_cached: " + std::to_string(ids.size()) + " ids for " +
                            std::to_string(batch) + " sequence(s) x " + std::to_string(n_new) +
                            " new token(s): one sequence, or one token per sequence.");
  }
  CacheRows rows{slots, {}, n_new};
  for (int64_t slot : slots) {
    if (slot < 0 || slot >= cache.slots() || cache.length(slot) + n_new > cache.capacity()) {
      throw InvalidInputError("[model] forward_cached: slot " + std::to_string(slot) + " of " +
                              std::to_string(cache.slots()) + " cannot take " +
                              std::to_string(n_new) + " more token(s) (capacity " +
                              std::to_string(cache.capacity()) + ").");
    }
    rows.starts.push_back(cache.length(slot));
  }
  batch_ = 0;  // no backward after decoding
  // ids: [tokens] -> x: [tokens, d_model]            one all-reduce (embedding's [g fwd])
  const Tensor& embedded = embedding_.forward(ids);
  ensure_shape(x_, embedded.shape(), embedded.device());
  x_.copy_from(embedded);
  if (positions_) {  // wpe's rows at each token's own position
    ensure_shape(position_rows_, x_.shape(), x_.device());
    ops::embedding_forward(rows.positions(), 0, positions_->weight().value, position_rows_);
    ops::add_into(x_, position_rows_);
  }
  const Tensor* h = &x_;
  for (size_t layer = 0; layer < blocks_.size(); ++layer) {  // 2 all-reduces each
    const int l = static_cast<int>(layer);
    h = &blocks_[layer]->forward_cached(*h, rows, cache.keys(l), cache.values(l));
  }
  for (int64_t slot : slots) cache.advance(slot, n_new);
  // Only each sequence's last token is predicted from: rows n_new - 1 (prefill) or all (decode).
  const Tensor last = n_new == 1 ? *h : h->slice(0, n_new - 1, 1);
  const Tensor& normed = final_norm_.forward(last);
  // normed: [batch, d_model] (replicated) -> logits_local: [batch, V_pad/tp], no communication
  if (lm_head_) {
    logits_local_ = lm_head_->forward(normed);
  } else {
    ensure_shape(logits_local_, {batch, embedding_.vocab_size_local()}, normed.device());
    ops::gemm(Trans::kNo, Trans::kYes, 1.0f, normed, embedding_.weight_local(), 0.0f,
              logits_local_);
  }
  return logits_local_;
}

void GptModel::backward() {
  stash_sequence_parallel_grads();
  const Tensor& dlogits_local = loss_.backward();  // [tokens, V_pad/tp], no communication
  Tensor& dh = head_input_.partial_grad();         // [tokens, d_model], partial over tp
  if (lm_head_) {
    lm_head_->backward_input(dlogits_local, dh, /*accumulate=*/false);
  } else {
    // dh (partial over tp) = dlogits_local wte_local   ([tokens, V_pad/tp] x [V_pad/tp, d_model])
    ops::gemm(Trans::kNo, Trans::kNo, 1.0f, dlogits_local, embedding_.weight_local(), 0.0f, dh);
  }
  // [f bwd] all-reduce (or reduce-scatter to my rows) of dh, while the head's
  // weight gradient computes
  head_input_.reduce_partial_grad();
  if (lm_head_) {
    lm_head_->backward_weights(dlogits_local);
  } else {
    // d wte_local += dlogits_local^T normed   ([V_pad/tp, tokens] x [tokens, d_model])
    ops::gemm(Trans::kYes, Trans::kNo, 1.0f, dlogits_local, head_input_.input(), 1.0f,
              embedding_.weight().grad);
  }
  const Tensor* dx = &final_norm_.backward(head_input_.grad());
  for (auto it = blocks_.rbegin(); it != blocks_.rend(); ++it) dx = &(*it)->backward(*dx);
  if (sequence_parallel_) {  // the embeddings were whole: gather dx's row blocks
    ensure_shape(dx_, x_.shape(), x_.device());
    tp_.all_gather(*dx, dx_);
    dx = &dx_;
  }
  if (positions_) positions_->backward(*dx, batch_, seq_);
  embedding_.backward(*dx);  // no communication ([g bwd] identity)
  reduce_sequence_parallel_grads();
}

void GptModel::stash_sequence_parallel_grads() {
  if (!sequence_parallel_ || tp_.size() == 1) return;
  if (!sp_grads_.owns_storage()) {
    int64_t total = 0;
    for (Parameter* p : parameters()) {
      if (!p->sequence_parallel) continue;
      sequence_parallel_params_.push_back(p);
      total += p->grad.numel();
    }
    const Device device = sequence_parallel_params_.front()->grad.device();
    sp_grads_ = Tensor::empty({total}, device);
    sp_grad_stash_ = Tensor::empty({total}, device);
  }
  int64_t offset = 0;
  for (Parameter* p : sequence_parallel_params_) {
    const int64_t n = p->grad.numel();
    sp_grad_stash_.slice(0, offset, n).view(p->grad.shape()).copy_from(p->grad);
    p->zero_grad();
    offset += n;
  }
}

void GptModel::reduce_sequence_parallel_grads() {
  if (!sequence_parallel_ || tp_.size() == 1) return;
  int64_t offset = 0;
  for (Parameter* p : sequence_parallel_params_) {
    const int64_t n = p->grad.numel();
    sp_grads_.slice(0, offset, n).view(p->grad.shape()).copy_from(p->grad);
    offset += n;
  }
  tp_.all_reduce_sum(sp_grads_);  // each rank's tokens' share, summed
  ops::add_into(sp_grads_, sp_grad_stash_);
  offset = 0;
  for (Parameter* p : sequence_parallel_params_) {
    const int64_t n = p->grad.numel();
    p->grad.copy_from(sp_grads_.slice(0, offset, n).view(p->grad.shape()));
    offset += n;
  }
}

std::vector<Parameter*> GptModel::parameters() {
  std::vector<Parameter*> params;
  auto append = [&params](std::vector<Parameter*> more) {
    params.insert(params.end(), more.begin(), more.end());
  };
  append(embedding_.parameters());
  if (positions_) append(positions_->parameters());
  for (auto& block : blocks_) append(block->parameters());
  append(final_norm_.parameters());
  if (lm_head_) params.push_back(&lm_head_->weight());
  return params;
}

int64_t GptModel::local_parameter_count() {
  int64_t count = 0;
  for (Parameter* p : parameters()) count += p->value.numel();
  return count;
}

void GptModel::zero_grad() {
  for (Parameter* p : parameters()) p->zero_grad();
}

}  // namespace colrow
