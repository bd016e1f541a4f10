// ParallelAttention: q/k/v column-parallel by heads (one fused projection) ->
// RoPE -> head-local causal attention -> o_proj row-parallel.
// Collectives: forward one all-reduce over tp (o_proj, [g fwd]); backward one
// all-reduce of dx over tp ([f bwd]), plus, when KV heads are replicated
// (tp > n_kv_head), one all-reduce over the replica group of the k_proj and
// v_proj weight gradients and one of their biases'.
#include "colrow/nn/parallel_attention.h"

#include <array>
#include <sstream>

#include "colrow/core/error.h"
#include "colrow/nn/shared_buffer.h"
#include "kernels/ops.h"

namespace colrow {
namespace {

std::string brace_list(const std::vector<int64_t>& values) {
  std::ostringstream s;
  s << "{";
  for (size_t i = 0; i < values.size(); ++i) s << (i ? ", " : "") << values[i];
  s << "}";
  return s.str();
}

// The tp degrees this head layout allows: divisors of n_head that divide
// n_kv_head or are multiples of it.
std::vector<int64_t> valid_tp(int64_t n_head, int64_t n_kv_head) {
  std::vector<int64_t> out;
  for (int64_t t : divisors(n_head)) {
    if (n_kv_head % t == 0 || t % n_kv_head == 0) out.push_back(t);
  }
  return out;
}

AttentionConfig resolved(const AttentionConfig& config) {
  AttentionConfig c = config;
  if (c.n_kv_head == 0) c.n_kv_head = c.n_head;
  if (c.head_dim == 0) c.head_dim = c.d_model / c.n_head;
  return c;
}

const AttentionConfig resolved_and_validated(const AttentionConfig& config, int tp) {
  validate(config, tp);
  return resolved(config);
}

std::vector<double> inverse_frequencies(const AttentionConfig& c) {
  return rope_inverse_frequencies(c.head_dim, c.rope_theta, c.rope_scaling);
}

// KV heads are replicated when there are fewer of them than ranks.
bool kv_replicated(const AttentionConfig& c, int tp_size) {
  return c.n_kv_head % tp_size != 0;
}

// The rows of k_proj/v_proj this rank holds. Split: KV heads
// [r NKV/tp, (r+1) NKV/tp). Replicated: the one KV head its query heads use,
// r / (tp / NKV), as a block of NKV parts.
OutputBlock kv_block(const AttentionConfig& c, int tp_rank, int tp_size) {
  if (!kv_replicated(c, tp_size)) return {tp_rank, tp_size};
  return {tp_rank / (tp_size / c.n_kv_head), c.n_kv_head};
}

std::unique_ptr<Communicator> split_kv_replicas(Communicator& tp, const AttentionConfig& c) {
  if (!kv_replicated(c, tp.size())) return nullptr;
  const OutputBlock block = kv_block(c, tp.rank(), tp.size());
  return tp.split(/*color=*/block.index, /*key=*/tp.rank(), "kv_replicas");
}

LinearSpec projection(const AttentionConfig& c, const std::string& suffix, int64_t in, int64_t out,
                      bool output = false) {
  LinearSpec spec;
  spec.name = c.name + "." + suffix;
  spec.in_features = in;
  spec.out_features = out;
  spec.bias = output ? c.output_bias : c.qkv_bias;
  spec.seed = c.seed;
  spec.weight_init = output && c.output_init ? c.output_init : c.weight_init;
  spec.bias_init = c.bias_init;
  return spec;
}

}  // namespace

void validate(const AttentionConfig& c, int tp) {
  const std::string nh = std::to_string(c.n_head), nkv = std::to_string(c.n_kv_head);
  if (c.d_model < 1 || c.n_head < 1) {
    throw ConfigError("[attention] d_model (" + std::to_string(c.d_model) + ") and n_head (" + nh +
                      ") must be positive.");
  }
  if (c.n_kv_head < 0) {
    throw ConfigError("[attention] n_kv_head (" + nkv + ") must be positive, or 0 for n_head (" +
                      nh + ").");
  }
  if (c.head_dim < 0) {
    throw ConfigError("[attention] head_dim (" + std::to_string(c.head_dim) +
                      ") must be positive, or 0 for d_model / n_head.");
  }
  if (c.head_dim == 0 && c.d_model % c.n_head != 0) {
    throw ConfigError("[attention] d_model (" + std::to_string(c.d_model) +
                      ") must be divisible by n_head (" + nh +
                      ") when head_dim is 0 (d_model / n_head). Set head_dim, or choose n_head "
                      "in " +
                      brace_list(divisors(c.d_model)) + ".");
  }
  const AttentionConfig r = resolved(c);
  if (r.n_head % r.n_kv_head != 0) {
    throw ConfigError("[attention] n_head (" + nh + ") must be divisible by n_kv_head (" + nkv +
                      "). Choose n_kv_head in " + brace_list(divisors(r.n_head)) + ".");
  }
  if (r.rope && r.head_dim % 2 != 0) {
    throw ConfigError("[attention] head_dim (" + std::to_string(r.head_dim) +
                      ") must be even with rope (it rotates pairs i, i + head_dim/2).");
  }
  if (r.rope && !(r.rope_theta > 0.0)) {
    throw ConfigError("[attention] rope_theta (" + std::to_string(r.rope_theta) +
                      ") must be positive.");
  }
  if (r.rope) validate(r.rope_scaling);
  if (r.window < 0) {
    throw ConfigError("[attention] window (" + std::to_string(r.window) +
                      ") must be >= 0 (0: fully causal).");
  }
  const std::string choose = " Choose tp in " + brace_list(valid_tp(r.n_head, r.n_kv_head)) + ".";
  if (tp < 1 || r.n_head % tp != 0) {
    throw ConfigError("[attention] n_head (" + nh + ") must be divisible by tp (" +
                      std::to_string(tp) + ")." + choose);
  }
  if (r.n_kv_head % tp != 0 && tp % r.n_kv_head != 0) {
    throw ConfigError("[attention] n_kv_head (" + std::to_string(r.n_kv_head) + ") and tp (" +
                      std::to_string(tp) +
                      "): tp must divide n_kv_head or be a multiple of it (KV heads are split "
                      "or replicated whole)." +
                      choose);
  }
}

ParallelAttention::ParallelAttention(Communicator& tp, const AttentionConfig& config)
    : config_(resolved_and_validated(config, tp.size())),
      n_head_local_(config_.n_head / tp.size()),
      n_kv_head_local_(kv_replicated(config_, tp.size()) ? 1 : config_.n_kv_head / tp.size()),
      kv_replicas_(split_kv_replicas(tp, config_)),
      input_(tp, config_.sequence_parallel, config_.overlap_backward),
      qkv_proj_(
          tp,
          {{projection(config_, "q_proj", config_.d_model, config_.n_head * config_.head_dim),
            {tp.rank(), tp.size()}},
           {projection(config_, "k_proj", config_.d_model, config_.n_kv_head * config_.head_dim),
            kv_block(config_, tp.rank(), tp.size())},
           {projection(config_, "v_proj", config_.d_model, config_.n_kv_head * config_.head_dim),
            kv_block(config_, tp.rank(), tp.size())}}),
      o_proj_(tp,
              projection(config_, "o_proj", config_.n_head * config_.head_dim, config_.d_model,
                         /*output=*/true),
              /*input_is_parallel=*/true, config_.sequence_parallel) {}

const Tensor& ParallelAttention::forward(const Tensor& x_given, int64_t batch, int64_t seq) {
  // none, or an all-gather of the token blocks: x is then [batch*seq, d_model] on every rank
  const Tensor& x = input_.forward(x_given);
  if (batch < 1 || seq < 1 || x.ndim() != 2 || x.size(0) != batch * seq ||
      x.size(1) != config_.d_model) {
    throw InvalidInputError("[attention] x " + shape_to_string(x.shape()) + " must be [batch (" +
                            std::to_string(batch) + ") * seq (" + std::to_string(seq) +
                            "), d_model (" + std::to_string(config_.d_model) +
                            ")], batch and seq positive.");
  }
  batch_ = batch;
  seq_ = seq;
  const int64_t tokens = batch * seq, hd = config_.head_dim;
  // One GEMM for the three projections, each of which reads the whole x.
  // x: [tokens, d_model] -> qkv: [tokens, (n_head_local + 2 n_kv_head_local) * hd], whose
  // column blocks are q: [tokens, n_head_local*hd], k, v: [tokens, n_kv_head_local*hd]
  const Tensor& qkv = qkv_proj_.forward(x);
  const Tensor q = qkv_proj_.part(qkv, 0), k = qkv_proj_.part(qkv, 1), v = qkv_proj_.part(qkv, 2);
  // [kv replicas fwd] identity: replicas of a KV head hold its rows alike and compute one k, v
  if (config_.rope) {
    if (cos_.ndim() != 2 || cos_.size(0) != seq || cos_.device() != q.device()) {
      ensure_shape(cos_, {seq, hd / 2}, q.device());
      ensure_shape(sin_, {seq, hd / 2}, q.device());
      ops::rope_table(seq, inverse_frequencies(config_), cos_, sin_);
    }
    ensure_shape(q_rot_, q.shape(), q.device(), q.dtype());
    ensure_shape(k_rot_, k.shape(), k.device(), k.dtype());
    ops::rope_forward(q, cos_, sin_, q_rot_);  // from qkv's columns into contiguous rows
    ops::rope_forward(k, cos_, sin_, k_rot_);
  }
  // q, k, v -> saved (the probabilities [batch, n_head_local, seq, seq], or a
  // fused kernel's [batch, n_head_local, seq]), attn_out: [tokens, n_head_local*hd]
  ensure_shape(saved_, ops::attention_saved_shape(q.device(), {batch, n_head_local_, seq, hd}),
               q.device());
  ensure_shape(attn_out_, {tokens, n_head_local_ * hd}, q.device(), q.dtype());
  ops::attention_forward(config_.rope ? q_rot_ : q, config_.rope ? k_rot_ : k, v, config_.window,
                         saved_, attn_out_);
  // attn_out: [tokens, n_head_local*hd] -> y: [tokens, d_model]
  return o_proj_.forward(attn_out_);  // one all-reduce (or reduce-scatter) over tp
}

const Tensor& ParallelAttention::forward_cached(const Tensor& x, const CacheRows& rows,
                                                Tensor& k_cache, Tensor& v_cache) {
  if (config_.sequence_parallel) {
    throw InternalError(
        "[attention] forward_cached runs without sequence parallelism: build "
        "the decoding model with sequence_parallel = false");
  }
  const int64_t tokens = static_cast<int64_t>(rows.slots.size()) * rows.n_new;
  const int64_t hd = config_.head_dim, capacity = k_cache.ndim() == 4 ? k_cache.size(2) : 0;
  if (x.ndim() != 2 || x.size(0) != tokens || x.size(1) != config_.d_model ||
      k_cache.shape() != Shape{k_cache.size(0), n_kv_head_local_, capacity, hd}) {
    throw InvalidInputError("[attention] x " + shape_to_string(x.shape()) + " must be [" +
                            std::to_string(tokens) + ", " + std::to_string(config_.d_model) +
                            "] and the cache [slots, " + std::to_string(n_kv_head_local_) +
                            ", capacity, " + std::to_string(hd) + "], got " +
                            shape_to_string(k_cache.shape()) + ".");
  }
  batch_ = 0;  // the training activations are gone: backward would be wrong
  // x: [tokens, d_model] -> qkv, whose column blocks are q: [tokens, n_head_local*hd]
  // and k, v: [tokens, n_kv_head_local*hd]
  const Tensor& qkv = qkv_proj_.forward(x);
  const Tensor q = qkv_proj_.part(qkv, 0), k = qkv_proj_.part(qkv, 1), v = qkv_proj_.part(qkv, 2);
  if (config_.rope) {
    // Each token rotates by its own position: rows of the table for the whole cache.
    if (cos_cached_.ndim() != 2 || cos_cached_.size(0) != capacity ||
        cos_cached_.device() != q.device()) {
      ensure_shape(cos_cached_, {capacity, hd / 2}, q.device());
      ensure_shape(sin_cached_, {capacity, hd / 2}, q.device());
      ops::rope_table(capacity, inverse_frequencies(config_), cos_cached_, sin_cached_);
    }
    const std::vector<int32_t> positions = rows.positions();
    ensure_shape(cos_rows_, {tokens, hd / 2}, q.device());
    ensure_shape(sin_rows_, {tokens, hd / 2}, q.device());
    ops::embedding_forward(positions, 0, cos_cached_, cos_rows_);  // a row gather
    ops::embedding_forward(positions, 0, sin_cached_, sin_rows_);
    ensure_shape(q_rot_, q.shape(), q.device(), q.dtype());
    ensure_shape(k_rot_, k.shape(), k.device(), k.dtype());
    ops::rope_forward(q, cos_rows_, sin_rows_, q_rot_);  // one "sequence" of tokens rows
    ops::rope_forward(k, cos_rows_, sin_rows_, k_rot_);
  }
  // The new keys and values join the cache, then the queries read it.
  ops::kv_cache_append(config_.rope ? k_rot_ : k, rows, k_cache);
  ops::kv_cache_append(v, rows, v_cache);
  ensure_shape(scores_, {tokens, n_head_local_, capacity}, q.device());
  ensure_shape(attn_out_, {tokens, n_head_local_ * hd}, q.device(), q.dtype());
  ops::cached_attention(config_.rope ? q_rot_ : q, k_cache, v_cache, rows, config_.window, scores_,
                        attn_out_);
  // attn_out: [tokens, n_head_local*hd] -> y: [tokens, d_model]
  return o_proj_.forward(attn_out_);  // one all-reduce over tp ([g fwd])
}

const Tensor& ParallelAttention::backward(const Tensor& dy) {
  if (batch_ == 0) throw InternalError("[attention] backward called before forward");
  const int64_t rows = input_.local_rows(batch_ * seq_);
  if (dy.ndim() != 2 || dy.size(0) != rows || dy.size(1) != config_.d_model) {
    throw InvalidInputError("[attention] dy " + shape_to_string(dy.shape()) + " must be [" +
                            std::to_string(rows) + ", " + std::to_string(config_.d_model) +
                            "], the shape of forward's output.");
  }
  // dy -> d_attn: [tokens, n_head_local*hd]; none, or an all-gather of dy's token blocks
  const Tensor& d_attn = o_proj_.backward(dy);
  const Tensor& qkv = qkv_proj_.output();
  const Tensor q = config_.rope ? q_rot_ : qkv_proj_.part(qkv, 0);
  const Tensor k = config_.rope ? k_rot_ : qkv_proj_.part(qkv, 1);
  const Tensor v = qkv_proj_.part(qkv, 2);
  // The gradients of q, k and v are column blocks of one [tokens, qkv] tensor,
  // which the fused projection's backward then reads whole.
  layer_buffer(dqkv_, shared_buffers_, "attention.dqkv", qkv.shape(), qkv.device(), d_attn.dtype());
  Tensor dq = qkv_proj_.part(dqkv_, 0), dk = qkv_proj_.part(dqkv_, 1),
         dv = qkv_proj_.part(dqkv_, 2);
  // Used within this call only, so every attention layer shares one, in a block
  // or not: a step allocates nothing here once warm.
  layer_buffer(scratch_, /*shared=*/true, "attention.backward_scratch",
               ops::attention_backward_scratch_shape(
                   q.device(), {batch_, n_head_local_, seq_, config_.head_dim, q.dtype()}),
               q.device(), DType::kF32);
  ops::attention_backward(q, k, v, attn_out_, saved_, d_attn, config_.window, dq, dk, dv, scratch_);
  if (config_.rope) {  // back through the rotation, in place
    ops::rope_backward(dq, cos_, sin_, dq);
    ops::rope_backward(dk, cos_, sin_, dk);
  }
  // A replicated KV head's gradients from this step are partial (this rank's
  // query heads only) and are summed over the replicas below; set aside what
  // earlier steps accumulated so that it is not summed again.
  std::vector<Tensor> kv = kv_replicas_ ? kv_grads() : std::vector<Tensor>{};
  for (size_t i = 0; i < kv.size(); ++i) {
    ensure_shape(kv_grad_stash_[i], kv[i].shape(), kv[i].device());
    kv_grad_stash_[i].copy_from(kv[i]);
    kv[i].zero();
  }
  // Every projection read the same x: one GEMM sums their partial dx, then one reduce.
  Tensor& dx = input_.partial_grad();  // sequence parallel: starts gathering x again
  qkv_proj_.backward_input(dqkv_, dx, /*accumulate=*/false);
  // all-reduce (or reduce-scatter) dx over tp while the weight gradients compute
  input_.reduce_partial_grad();
  qkv_proj_.backward_weights(dqkv_);
  const Tensor& dx_summed = input_.grad();
  for (size_t i = 0; i < kv.size(); ++i) {
    // [kv replicas bwd] all-reduce this step's k_proj and v_proj gradients over the KV head's
    // ranks: their weights' rows, then their biases'
    kv_replicas_->all_reduce_sum(kv[i]);
    ops::add_into(kv[i], kv_grad_stash_[i]);
  }
  return dx_summed;
}

void ParallelAttention::share_buffers() {
  shared_buffers_ = true;
  input_.share_buffers();
  o_proj_.share_buffers();
}

std::vector<Tensor> ParallelAttention::kv_grads() {
  std::vector<Tensor> grads{qkv_proj_.weights().grad_of_parts(1, 2)};
  if (ParameterGroup* biases = qkv_proj_.biases()) grads.push_back(biases->grad_of_parts(1, 2));
  return grads;
}

std::vector<Parameter*> ParallelAttention::parameters() {
  std::vector<Parameter*> params = qkv_proj_.parameters();
  for (Parameter* p : {&o_proj_.weight(), o_proj_.bias()}) {
    if (p != nullptr) params.push_back(p);
  }
  return params;
}

}  // namespace colrow
