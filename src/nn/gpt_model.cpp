// The model's forward and backward, one straight script of layer calls.
// Collectives per step: 1 all-reduce in the embedding, 2 per block forward and
// 2 backward, 1 backward for the output head's input gradient, and the loss's
// all-gather of [tokens, 4] (one of [chunk rows, 4] per chunk when the head
// runs in token chunks). Sequence parallel: each block's forward all-reduces
// become reduce-scatter + all-gather pairs (backward also gathers dy and a
// region's input again: tp_region_input.h), the head's input is all-gathered
// forward and its gradient reduce-scattered, the blocks' dx is all-gathered
// for the embeddings, and one all-reduce sums the norm (and bias) gradients.
#include "colrow/nn/gpt_model.h"

#include <utility>

#include "colrow/core/error.h"
#include "colrow/nn/parameter_group.h"
#include "kernels/ops.h"

namespace colrow {
namespace {

const ModelConfig& validated(const ModelConfig& config, int tp) {
  validate(config, tp);
  return config;
}

bool is_gpt2(const ModelConfig& c) {
  return c.family == ModelFamily::kGpt2;
}

}  // namespace

GptModel::GptModel(Communicator& tp, const ModelConfig& config, uint64_t seed,
                   bool sequence_parallel)
    : GptModel(tp, config, PipelineStage::whole(config), seed, sequence_parallel) {}

GptModel::GptModel(Communicator& tp, const ModelConfig& config, const PipelineStage& stage,
                   uint64_t seed, bool sequence_parallel)
    : tp_(tp),
      config_(validated(config, tp.size())),
      stage_(stage),
      sequence_parallel_(sequence_parallel),
      padded_vocab_size_(
          colrow::padded_vocab_size(config.vocab_size, tp.size(), config.vocab_multiple)) {
  if (stage.n_layers < 1 || stage.first_layer < 0 ||
      stage.first_layer + stage.n_layers > config.n_layer) {
    throw InternalError("[model] stage " + std::to_string(stage.index) + " holds layers " +
                        std::to_string(stage.first_layer) + " + " + std::to_string(stage.n_layers) +
                        " of " + std::to_string(config.n_layer));
  }
  const bool tied_head_here = stage.is_last() && config.tie_word_embeddings;
  if (stage.is_first() || tied_head_here) {
    embedding_.emplace(tp, is_gpt2(config) ? "wte" : "model.embed_tokens", config.vocab_size,
                       padded_vocab_size_, config.d_model, Init::normal(0.02f), seed);
    embedding_->weight().pipeline_copy = !stage.is_first();
  }
  if (stage.is_first() && is_gpt2(config)) {
    positions_.emplace("wpe", config.max_position_embeddings, config.d_model, Init::normal(0.01f),
                       seed);
  }
  for (int layer = stage.first_layer; layer < stage.first_layer + stage.n_layers; ++layer) {
    blocks_.push_back(
        std::make_unique<TransformerBlock>(tp, config, layer, seed, sequence_parallel));
  }
  if (!stage.is_last()) return;
  final_norm_.emplace(config, is_gpt2(config) ? "ln_f" : "model.norm", seed);
  for (Parameter* p : final_norm_->parameters()) p->sequence_parallel = sequence_parallel;
  head_.emplace(tp, config, padded_vocab_size_, seed,
                tied_head_here ? &embedding_->weight() : nullptr, sequence_parallel);
}

void GptModel::to(Device device) {
  move_parameters(parameters(), device);
  device_ = device;
}

std::unique_ptr<GptModel> GptModel::make_replica() {
  auto replica = std::make_unique<GptModel>(tp_, config_, stage_, /*seed=*/0, sequence_parallel_);
  replica->share_parameters_of(*this);
  replica->set_recompute_activation(recompute_activation_);
  replica->set_overlap_tp_backward(overlap_tp_backward_);
  replica->set_logits_chunk_bytes(logits_chunk_bytes_);
  return replica;
}

void GptModel::set_compute_dtype(DType dtype) {
  colrow::set_compute_dtype(parameters(), dtype);
  compute_dtype_ = dtype;
}

void GptModel::set_recompute_activation(bool recompute) {
  for (auto& block : blocks_) block->set_recompute_activation(recompute);
  recompute_activation_ = recompute;
}

void GptModel::set_overlap_tp_backward(bool overlap) {
  for (auto& block : blocks_) block->set_overlap_tp_backward(overlap);
  if (head_) head_->set_overlap(overlap);
  overlap_tp_backward_ = overlap;
}

void GptModel::set_logits_chunk_bytes(int64_t bytes) {
  validate_logits_chunk_bytes(bytes);
  if (head_) head_->set_chunk_bytes(bytes);
  logits_chunk_bytes_ = bytes;
}

int64_t GptModel::logits_chunk_tokens(int64_t tokens) const {
  return logits_chunk_rows(tokens, vocab_size_local() * dtype_bytes(compute_dtype_),
                           logits_chunk_bytes_);
}

void GptModel::refresh_compute_copies() {
  if (compute_dtype_ == DType::kF32) return;
  for (Parameter* p : parameters()) p->refresh_compute();
}

void GptModel::share_parameters_of(GptModel& owner) {
  const std::vector<Parameter*> mine = parameters(), theirs = owner.parameters();
  bool same = mine.size() == theirs.size();
  for (size_t i = 0; same && i < mine.size(); ++i) {
    same = mine[i]->name == theirs[i]->name && mine[i]->value.shape() == theirs[i]->value.shape();
  }
  if (!same) {
    throw InternalError("[model] a replica shares parameters only with a model of the same stage");
  }
  share_parameters(mine, theirs);  // handles onto the owner's storage
  device_ = owner.device_;
  compute_dtype_ = owner.compute_dtype_;
}

void GptModel::require_whole_model(const char* what) const {
  if (stage_.count != 1) {
    throw InternalError(std::string("[model] ") + what + " runs the whole model; stage " +
                        std::to_string(stage_.index) + " of " + std::to_string(stage_.count) +
                        " runs forward_stage/backward_stage");
  }
}

int64_t GptModel::boundary_rows(int64_t batch, int64_t seq) const {
  return sequence_parallel_ ? batch * seq / tp_.size() : batch * seq;
}

CrossEntropyOutput GptModel::forward(const std::vector<int32_t>& ids,
                                     const std::vector<int32_t>& targets, int64_t batch,
                                     int64_t seq, Pass pass) {
  require_whole_model("forward");
  return forward_stage(ids, nullptr, targets, batch, seq, pass).loss;
}

void GptModel::check_batch(const std::vector<int32_t>& ids, const std::vector<int32_t>& targets,
                           int64_t batch, int64_t seq) const {
  const int64_t tokens = batch * seq;
  if (batch < 1 || seq < 1 || (stage_.is_first() && static_cast<int64_t>(ids.size()) != tokens) ||
      (stage_.is_last() && static_cast<int64_t>(targets.size()) != tokens)) {
    throw InvalidInputError("[model] " + std::to_string(ids.size()) + " ids and " +
                            std::to_string(targets.size()) + " targets must both equal batch (" +
                            std::to_string(batch) + ") x seq (" + std::to_string(seq) + ").");
  }
  if (sequence_parallel_) require_tokens_divisible(tokens, tp_.size(), "model");
}

int64_t GptModel::stage_inputs(const std::vector<int32_t>& ids, const std::vector<int32_t>& targets,
                               int64_t batch, int64_t seq) {
  check_batch(ids, targets, batch, seq);
  if (stage_.is_first()) embedding_->stage(ids);
  return stage_.is_last() ? head_->stage(targets, device_) : 0;
}

GptModel::StageForward GptModel::forward_stage(const std::vector<int32_t>& ids, const Tensor* input,
                                               const std::vector<int32_t>& targets, int64_t batch,
                                               int64_t seq, Pass pass) {
  check_batch(ids, targets, batch, seq);
  if (head_ && head_->gradients_pending()) {
    throw InternalError(
        "[model] the last forward (Pass::kTrain) computed the output head's gradients in "
        "chunks, and no backward has used them: call backward() before the next forward");
  }
  batch_ = batch;
  seq_ = seq;
  const Tensor* h = input;
  if (stage_.is_first()) {
    h = &embed(ids, batch, seq);
  } else if (input == nullptr || input->ndim() != 2 ||
             input->size(0) != boundary_rows(batch, seq) || input->size(1) != config_.d_model) {
    throw InternalError("[model] stage " + std::to_string(stage_.index) +
                        " needs the previous stage's output of [" +
                        std::to_string(boundary_rows(batch, seq)) + ", " +
                        std::to_string(config_.d_model) + "]");
  }
  for (auto& block : blocks_) h = &block->forward(*h, batch, seq);  // 2 all-reduces each
  StageForward out;
  if (stage_.is_last()) {
    out.loss = head_->forward(final_norm_->forward(*h), targets, pass);
  } else {
    out.output = h;
  }
  return out;
}

const Tensor& GptModel::embed(const std::vector<int32_t>& ids, int64_t batch, int64_t seq) {
  // ids: [tokens] -> x: [tokens, d_model]            one all-reduce (embedding's [g fwd])
  const Tensor& embedded = embedding_->forward(ids);
  ensure_shape(x_, embedded.shape(), embedded.device(), embedded.dtype());
  x_.copy_from(embedded);
  if (positions_) positions_->forward(x_, batch, seq);
  if (!sequence_parallel_) return x_;
  // my block of token rows; no communication
  const int64_t rows = x_.size(0) / tp_.size();
  x_block_ = x_.slice(0, tp_.rank() * rows, rows);
  return x_block_;
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
  return KvCache(stage_.n_layers, slots, attention.n_kv_head_local(), capacity,
                 attention.config().head_dim, device_, compute_dtype_);
}

const Tensor& GptModel::forward_cached(const std::vector<int32_t>& ids,
                                       const std::vector<int64_t>& slots, int64_t n_new,
                                       KvCache& cache) {
  require_whole_model("forward_cached");
  return forward_cached_stage(ids, nullptr, slots, n_new, cache);
}

const Tensor& GptModel::forward_cached_stage(const std::vector<int32_t>& ids, const Tensor* input,
                                             const std::vector<int64_t>& slots, int64_t n_new,
                                             KvCache& cache) {
  if (sequence_parallel_) {
    throw InternalError(
        "[model] forward_cached runs without sequence parallelism: build the "
        "decoding model with sequence_parallel = false");
  }
  const int64_t batch = static_cast<int64_t>(slots.size());
  // Rows this stage was given: ids on the first, the previous stage's output
  // rows (of d_model) on the others, -1 when that output is missing or misshapen.
  int64_t given = -1;
  if (stage_.is_first()) {
    given = static_cast<int64_t>(ids.size());
  } else if (input != nullptr && input->ndim() == 2 && input->size(1) == config_.d_model) {
    given = input->size(0);
  }
  if (batch < 1 || n_new < 1 || (batch > 1 && n_new > 1) || given != batch * n_new) {
    throw InvalidInputError("[model] forward_cached: " + std::to_string(given) +
                            (stage_.is_first() ? " ids" : " input rows of d_model") + " for " +
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
  const Tensor* h = input;
  if (stage_.is_first()) {
    // ids: [tokens] -> x: [tokens, d_model]          one all-reduce (embedding's [g fwd])
    const Tensor& embedded = embedding_->forward(ids);
    ensure_shape(x_, embedded.shape(), embedded.device(), embedded.dtype());
    x_.copy_from(embedded);
    if (positions_) {  // wpe's rows at each token's own position
      ensure_shape(position_rows_, x_.shape(), x_.device(), x_.dtype());
      ops::embedding_forward(rows.positions(), 0, positions_->weight().compute(), position_rows_);
      ops::add_into(x_, position_rows_);
    }
    h = &x_;
  }
  for (size_t layer = 0; layer < blocks_.size(); ++layer) {  // 2 all-reduces each
    const int l = static_cast<int>(layer);  // the stage's own layers: cache layer l
    h = &blocks_[layer]->forward_cached(*h, rows, cache.keys(l), cache.values(l));
  }
  for (int64_t slot : slots) cache.advance(slot, n_new);
  if (!stage_.is_last()) return *h;
  // Only each sequence's last token is predicted from: rows n_new - 1 (prefill) or all (decode).
  const Tensor last = n_new == 1 ? *h : h->slice(0, n_new - 1, 1);
  // normed: [batch, d_model] (replicated) -> logits_local: [batch, V_pad/tp], no communication
  return head_->logits(final_norm_->forward(last));
}

void GptModel::backward() {
  require_whole_model("backward");
  backward_stage(nullptr);
}

const Tensor* GptModel::backward_stage(const Tensor* grad_output) {
  if (!stage_.is_last() && grad_output == nullptr) {
    throw InternalError("[model] stage " + std::to_string(stage_.index) +
                        " needs the next stage's input gradient");
  }
  stash_sequence_parallel_grads();
  const Tensor* dx = grad_output;
  // Reports only while someone listens: the lists cost an allocation each.
  const bool reports = static_cast<bool>(on_grads_ready_);
  if (stage_.is_last()) {
    dx = &final_norm_->backward(head_->backward());
    if (reports) {
      std::vector<Parameter*> head = final_norm_->parameters();
      for (Parameter* p : head_->parameters()) head.push_back(p);
      report_grads_ready(head);
    }
  }
  for (size_t i = blocks_.size(); i-- > 0;) {
    Tensor& block_dx = block_grads_[i % 2];
    blocks_[i]->backward(*dx, block_dx);
    dx = &block_dx;
    if (reports) report_grads_ready(blocks_[i]->parameters());
  }
  if (stage_.is_first()) {
    embedding_backward(*dx);
    dx = nullptr;
  }
  reduce_sequence_parallel_grads();
  return dx;
}

void GptModel::set_on_grads_ready(GradsReady on_grads_ready) {
  on_grads_ready_ = std::move(on_grads_ready);
  if (!on_grads_ready_ || !parameter_index_.empty()) return;
  // Once: the parameters never change place (to() moves their tensors only).
  const std::vector<Parameter*> params = parameters();
  for (size_t i = 0; i < params.size(); ++i) parameter_index_[params[i]] = i;
}

void GptModel::report_grads_ready(const std::vector<Parameter*>& group) {
  std::vector<size_t> ready;
  for (const Parameter* p : group) {
    // summed over tp only at the end of backward
    if (p->sequence_parallel && sequence_parallel_ && tp_.size() > 1) continue;
    ready.push_back(parameter_index_.at(p));
  }
  if (!ready.empty()) on_grads_ready_(ready);
}

void GptModel::embedding_backward(const Tensor& dx_blocks) {
  const Tensor* dx = &dx_blocks;
  if (sequence_parallel_) {  // the embeddings were whole: gather dx's row blocks
    ensure_shape(dx_, x_.shape(), x_.device(), dx_blocks.dtype());
    tp_.all_gather(*dx, dx_);
    dx = &dx_;
  }
  if (positions_) positions_->backward(*dx, batch_, seq_);
  embedding_->backward(*dx);  // no communication ([g bwd] identity)
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
  if (embedding_ && stage_.is_first()) append(embedding_->parameters());
  if (positions_) append(positions_->parameters());
  for (auto& block : blocks_) append(block->parameters());
  if (final_norm_) append(final_norm_->parameters());
  if (head_) append(head_->parameters());
  if (embedding_ && !stage_.is_first()) append(embedding_->parameters());  // the tied head's copy
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
