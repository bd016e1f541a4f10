// ParallelAttention (Megatron's ParallelAttention; HF's GPT2Attention and
// LlamaAttention): causal multi-head self-attention with GQA/MQA and optional
// RoPE, split over tp by heads. q_proj, k_proj, v_proj are column-parallel
// (rank r owns query heads [r NH/tp, (r+1) NH/tp) and the KV heads they use),
// fused into one projection (nn/fused_column_parallel_linear.h: one GEMM
// each way, the checkpoint keeping the three names); attention is
// head-local, reading q, k and v as column blocks of the projection's output;
// o_proj is row-parallel on the local heads.
//   x: [batch*seq, d_model] (replicated, token-major) -> y: [batch*seq, d_model] (replicated)
// Collectives: one all-reduce forward (o_proj, [g fwd]) and one backward (the
// summed dx of q/k/v, [f bwd]). With tp > n_kv_head each KV head is replicated
// over tp / n_kv_head ranks, and backward adds one all-reduce over that
// replica group of the k_proj and v_proj weight gradients (their rows are
// adjacent), and one of their biases'.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "colrow/core/cache_rows.h"
#include "colrow/dist/communicator.h"
#include "colrow/nn/fused_column_parallel_linear.h"
#include "colrow/nn/parameter.h"
#include "colrow/nn/rope_scaling.h"
#include "colrow/nn/row_parallel_linear.h"
#include "colrow/nn/tp_region_input.h"

namespace colrow {

struct AttentionConfig {
  // Parameter-name prefix: name + ".q_proj", ".k_proj", ".v_proj", ".o_proj"
  // (+ ".weight" / ".bias"), HF LLaMA's names.
  std::string name = "attn";
  int64_t d_model = 0;
  int n_head = 0;
  int n_kv_head = 0;        // 0: n_head (MHA, HF's default); 1: MQA; otherwise GQA
  int64_t head_dim = 0;     // 0: d_model / n_head
  bool qkv_bias = true;     // q/k/v biases: GPT-2, Qwen2, LLaMA's attention_bias
  bool output_bias = true;  // o_proj's bias: GPT-2, LLaMA's attention_bias
  bool rope = false;        // LLaMA: rotary embedding on q and k
  double rope_theta = 10000.0;
  RopeScaling rope_scaling;  // with rope: HF's rope_type linear or llama3
  // 0: causal. Otherwise a sliding window (Mistral): query i sees keys
  // (i - window, i], in training and in decoding alike.
  int64_t window = 0;
  uint64_t seed = 0;
  // Default to nn.Linear's, Init::linear_default(fan-in of each projection),
  // as LinearSpec's do (GPT-2 uses normal(0.02) weights and zero biases).
  std::optional<Init> weight_init;
  std::optional<Init> bias_init;
  // o_proj's weight, which writes into the residual stream (unset: weight_init).
  std::optional<Init> output_init;
  // Megatron's sequence parallelism: x and y are this rank's block of the
  // batch*seq token rows (all-gathered on entry, reduce-scattered out of
  // o_proj); training only, not forward_cached.
  bool sequence_parallel = false;
  // Sum dx over tp while the weight gradients compute (tp_region_input.h).
  bool overlap_backward = true;
};

// Pure, identical on every rank, before any allocation or collective. Sizes
// positive; head_dim given or d_model % n_head == 0; n_head % n_kv_head == 0;
// an even head_dim, rope_theta > 0 and a valid scaling with rope; window >= 0;
// n_head % tp == 0; and tp
// divides n_kv_head or is a multiple of it. ConfigError naming both numbers
// and the tp degrees that would work.
void validate(const AttentionConfig& config, int tp);

class ParallelAttention {
 public:
  // Validates, then builds the projections; when tp > n_kv_head, splits tp
  // into KV replica groups (a collective on every rank of tp).
  ParallelAttention(Communicator& tp, const AttentionConfig& config);

  // x: [batch*seq, d_model], sequence b in rows [b*seq, (b+1)*seq); it must
  // stay unchanged until backward. Returns y: [batch*seq, d_model].
  // Sequence parallel: x and y hold this rank's [batch*seq/tp, d_model] rows.
  const Tensor& forward(const Tensor& x, int64_t batch, int64_t seq);
  // dy: the shape of y (replicated, or this rank's rows). Accumulates every
  // parameter gradient (complete, replicas summed); returns dx, the shape of x.
  const Tensor& backward(const Tensor& dy);
  // Its transient tensors (the output, dq, dk and dv, dx) from now on live in
  // buffers every layer shares (nn/shared_buffer.h: layer_buffer): what
  // forward and backward return is then valid until the next layer's call.
  void share_buffers();
  // AttentionConfig::overlap_backward, changed after construction.
  void set_overlap_backward(bool overlap) { input_.set_overlap(overlap); }

  // Incremental decoding (nn/kv_cache.h). x: [batch * n_new, d_model], the new
  // tokens of the sequences `rows` places. Appends their keys and values to
  // this layer's k_cache, v_cache ([slots, n_kv_head_local, capacity,
  // head_dim]), then each new query attends to its sequence's cached
  // positions up to its own. Returns y: [batch * n_new, d_model]. One
  // all-reduce of y over tp (o_proj), as forward. No backward, and not with
  // sequence parallelism (InternalError).
  const Tensor& forward_cached(const Tensor& x, const CacheRows& rows, Tensor& k_cache,
                               Tensor& v_cache);

  // q_proj, k_proj, v_proj weights, then their biases (when present), then
  // o_proj's weight and bias.
  std::vector<Parameter*> parameters();
  // The configuration with n_kv_head and head_dim filled in.
  const AttentionConfig& config() const { return config_; }
  int n_head_local() const { return n_head_local_; }
  int n_kv_head_local() const { return n_kv_head_local_; }
  // The ranks sharing this rank's KV head (null unless tp > n_kv_head).
  Communicator* kv_replica_group() { return kv_replicas_.get(); }
  // What the last forward kept for backward (ops::attention_saved_shape): the
  // probabilities [batch, n_head_local, seq, seq], or a fused kernel's row
  // log-sum-exp [batch, n_head_local, seq].
  const Tensor& attention_saved() const { return saved_; }

 private:
  // The k_proj and v_proj rows of the fused weight's gradient, then of the
  // bias's (when there are biases): one view each.
  std::vector<Tensor> kv_grads();

  AttentionConfig config_;
  int n_head_local_;
  int n_kv_head_local_;
  std::unique_ptr<Communicator> kv_replicas_;
  TpRegionInput input_;
  // Parts q_proj [n_head*hd, d_model] split by query heads, then k_proj and
  // v_proj [n_kv_head*hd, d_model] split (or replicated) by KV heads.
  FusedColumnParallelLinear qkv_proj_;
  RowParallelLinear o_proj_;  // [d_model, n_head*hd] split by query heads
  // Replicated KV heads: the gradients accumulated before this backward, by
  // kv_grads() position.
  std::array<Tensor, 2> kv_grad_stash_;
  int64_t batch_ = 0, seq_ = 0;
  Tensor cos_, sin_;                // RoPE table: [seq, hd/2]
  Tensor cos_cached_, sin_cached_;  // decoding: RoPE table [capacity, hd/2], then per-token rows
  Tensor cos_rows_, sin_rows_;      // [tokens, hd/2]
  Tensor scores_;                   // decoding: [tokens, n_head_local, capacity]
  Tensor q_rot_, k_rot_;            // q, k after RoPE: [tokens, heads_local*hd]
  Tensor saved_;                    // attention_saved()
  Tensor attn_out_;                 // [tokens, n_head_local*hd]: o_proj's input
  Tensor dqkv_;                     // [tokens, (n_head_local + 2 n_kv_head_local) * hd]
  Tensor scratch_;                  // the backward kernel's, shared by every attention layer
  bool shared_buffers_ = false;
};

}  // namespace colrow
