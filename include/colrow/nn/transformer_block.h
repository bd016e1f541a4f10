// TransformerBlock: one pre-norm decoder block, as GPT-2 and LLaMA build it:
//   h = x + attention(norm_1(x))
//   y = h + mlp(norm_2(h))
// Tensor parallel inside attention and MLP: 2 all-reduces of [tokens, d_model]
// forward (the row-parallel outputs) and 2 backward (the column-parallel
// input gradients); norms and residuals are replicated and communicate nothing.
// With sequence parallelism forward's all-reduces become a reduce-scatter plus
// an all-gather each (the same bytes); backward all-gathers dy, reduce-scatters
// dx and gathers a region's input again (tp_region_input.h), and norms and
// residuals work on tokens / tp rows.
// Memory: a block keeps what its backward reads (the norms' inputs and
// outputs, q, k, v, attention's output and statistics, the MLP's hidden
// units before and after the activation, or before only when backward
// recomputes the activation); every tensor it only passes on
// (the input gradients inside backward, the row-parallel outputs) lives in
// buffers all blocks share (nn/shared_buffer.h: layer_buffer), since the
// blocks run one after another: L layers cost one set of them, as llm.c
// keeps one layer's activation gradients.
#pragma once

#include <string>
#include <vector>

#include "colrow/dist/communicator.h"
#include "colrow/nn/model_config.h"
#include "colrow/nn/norm.h"
#include "colrow/nn/parallel_attention.h"
#include "colrow/nn/parallel_mlp.h"

namespace colrow {

// Parameter names of layer i: gpt2 "h.i.{ln_1, attn, ln_2, mlp}",
// llama "model.layers.i.{input_layernorm, self_attn, post_attention_layernorm, mlp}".
struct BlockNames {
  std::string norm_1, attention, norm_2, mlp;
  static BlockNames of(ModelFamily family, int layer);
};

// The attention and MLP of layer `layer` (its name prefix, window and initialization).
AttentionConfig attention_config(const ModelConfig& config, int layer, uint64_t seed,
                                 bool sequence_parallel = false);
MlpConfig mlp_config(const ModelConfig& config, int layer, uint64_t seed,
                     bool sequence_parallel = false);

class TransformerBlock {
 public:
  // sequence_parallel: the norms and residual adds run on this rank's block
  // of the token rows (Megatron's sequence parallelism); the norm weights'
  // gradients are then partial over tp (Parameter::sequence_parallel).
  TransformerBlock(Communicator& tp, const ModelConfig& config, int layer, uint64_t seed,
                   bool sequence_parallel = false);

  // x: [batch * seq, d_model] replicated (sequence parallel: this rank's
  // [batch * seq / tp, d_model] rows) -> y: same; x must stay unchanged until backward.
  const Tensor& forward(const Tensor& x, int64_t batch, int64_t seq);
  // Incremental decoding: x: [batch * n_new, d_model], the new tokens `rows`
  // places in this layer's cache (ParallelAttention::forward_cached). The
  // same 2 all-reduces as forward; no backward.
  const Tensor& forward_cached(const Tensor& x, const CacheRows& rows, Tensor& k_cache,
                               Tensor& v_cache);
  // dy: the shape of y -> dx, written into the caller's tensor (the model
  // alternates two, so that each block's dx outlives the call and dy is
  // never dx); accumulates every parameter gradient.
  void backward(const Tensor& dy, Tensor& dx);

  // The MLP's activation made again in backward (ParallelMLP::set_recompute_activation).
  void set_recompute_activation(bool recompute) { mlp_.set_recompute_activation(recompute); }
  // Whether backward's tp collectives run during the weight-gradient GEMMs
  // (the default) or are waited for where they start.
  void set_overlap_tp_backward(bool overlap) {
    attention_.set_overlap_backward(overlap);
    mlp_.set_overlap_backward(overlap);
  }

  std::vector<Parameter*> parameters();
  const ParallelAttention& attention() const { return attention_; }

 private:
  Norm norm_1_;
  ParallelAttention attention_;
  Norm norm_2_;
  ParallelMLP mlp_;
  Tensor h_;   // [tokens, d_model]: x + attention(norm_1(x)), input of norm_2
  Tensor y_;   // [tokens, d_model]
  Tensor dh_;  // [tokens, d_model], shared by all blocks
};

}  // namespace colrow
