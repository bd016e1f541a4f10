// One pre-norm decoder block; the model's forward/backward call these in order.
#include "colrow/nn/transformer_block.h"

#include <cmath>

#include "colrow/core/error.h"
#include "colrow/nn/shared_buffer.h"
#include "kernels/ops.h"

namespace colrow {

BlockNames BlockNames::of(ModelFamily family, int layer) {
  const std::string i = std::to_string(layer);
  if (family == ModelFamily::kGpt2) {
    return {"h." + i + ".ln_1", "h." + i + ".attn", "h." + i + ".ln_2", "h." + i + ".mlp"};
  }
  const std::string p = "model.layers." + i;
  return {p + ".input_layernorm", p + ".self_attn", p + ".post_attention_layernorm", p + ".mlp"};
}

// Initialization as the families' reference code does it: weights N(0, 0.02),
// biases zero; GPT-2 scales the projections that write into the residual
// stream by 1/sqrt(2 n_layer) (its paper, section 2.3) -- applied to both
// families here, as Megatron does (init_method for output layers).
namespace {
constexpr float kInitStd = 0.02f;
Init output_init(const ModelConfig& c) {
  return Init::normal(kInitStd / static_cast<float>(std::sqrt(2.0 * c.n_layer)));
}
}  // namespace

AttentionConfig attention_config(const ModelConfig& c, int layer, uint64_t seed,
                                 bool sequence_parallel) {
  AttentionConfig a;
  a.name = BlockNames::of(c.family, layer).attention;
  a.d_model = c.d_model;
  a.n_head = c.n_head;
  a.n_kv_head = c.n_kv_head;
  a.head_dim = c.head_dim;
  a.qkv_bias = c.attention_qkv_bias;
  a.output_bias = c.attention_output_bias;
  a.rope = c.family == ModelFamily::kLlama;
  a.rope_theta = c.rope_theta;
  a.rope_scaling = c.rope_scaling;
  a.window = c.attention_window(layer);
  a.seed = seed;
  a.weight_init = Init::normal(kInitStd);
  a.bias_init = Init::zeros();
  a.output_init = output_init(c);
  a.sequence_parallel = sequence_parallel;
  return a;
}

MlpConfig mlp_config(const ModelConfig& c, int layer, uint64_t seed, bool sequence_parallel) {
  MlpConfig m;
  m.name = BlockNames::of(c.family, layer).mlp;
  m.d_model = c.d_model;
  m.ffn_hidden_size = c.ffn_hidden_size;
  m.activation = c.family == ModelFamily::kLlama ? Activation::kSwiGlu
                 : c.gelu_exact                  ? Activation::kGeluErf
                                                 : Activation::kGelu;
  m.bias = c.mlp_bias;
  m.seed = seed;
  m.weight_init = Init::normal(kInitStd);
  m.bias_init = Init::zeros();
  m.output_init = output_init(c);
  m.sequence_parallel = sequence_parallel;
  return m;
}

TransformerBlock::TransformerBlock(Communicator& tp, const ModelConfig& config, int layer,
                                   uint64_t seed, bool sequence_parallel)
    : norm_1_(config, BlockNames::of(config.family, layer).norm_1, seed),
      attention_(tp, attention_config(config, layer, seed, sequence_parallel)),
      norm_2_(config, BlockNames::of(config.family, layer).norm_2, seed),
      mlp_(tp, mlp_config(config, layer, seed, sequence_parallel)) {
  for (Norm* norm : {&norm_1_, &norm_2_}) {
    for (Parameter* p : norm->parameters()) p->sequence_parallel = sequence_parallel;
    norm->share_buffers();
  }
  attention_.share_buffers();
  mlp_.share_buffers();
}

const Tensor& TransformerBlock::forward(const Tensor& x, int64_t batch, int64_t seq) {
  ensure_shape(h_, x.shape(), x.device(), x.dtype());
  ensure_shape(y_, x.shape(), x.device(), x.dtype());
  // h = x + attention(norm_1(x))        one all-reduce, in attention's o_proj
  //   (the add in norm_2's pass)
  const Tensor& normed_h = norm_2_.forward_add(attention_.forward(norm_1_.forward(x), batch, seq), x, h_);
  // y = h + mlp(norm_2(h))              one all-reduce, in the MLP's down projection
  ops::add(h_, mlp_.forward(normed_h), y_);
  return y_;
}

const Tensor& TransformerBlock::forward_cached(const Tensor& x, const CacheRows& rows,
                                               Tensor& k_cache, Tensor& v_cache) {
  ensure_shape(h_, x.shape(), x.device(), x.dtype());
  ensure_shape(y_, x.shape(), x.device(), x.dtype());
  // h = x + attention(norm_1(x))        one all-reduce, in attention's o_proj
  const Tensor& normed_h = norm_2_.forward_add(
      attention_.forward_cached(norm_1_.forward(x), rows, k_cache, v_cache), x, h_);
  // y = h + mlp(norm_2(h))              one all-reduce, in the MLP's down projection
  ops::add(h_, mlp_.forward(normed_h), y_);
  return y_;
}

void TransformerBlock::backward(const Tensor& dy, Tensor& dx) {
  layer_buffer(dh_, /*shared=*/true, "block.dh", dy.shape(), dy.device(), dy.dtype());
  ensure_shape(dx, dy.shape(), dy.device(), dy.dtype());
  // The norms write dx (and dh) in their dx pass and read their inputs and
  // dy again for the parameter gradients afterwards: no output may alias them.
  if (dx.raw_data() == dy.raw_data() || dx.raw_data() == dh_.raw_data()) {
    throw InternalError("[block] backward's dx must be neither dy nor the block's dh");
  }
  // dh = dy + norm_2'(mlp'(dy))         one all-reduce, in the MLP's input gradient
  //   (the add in norm_2's pass, as each one below)
  norm_2_.backward_add(mlp_.backward(dy), dy, dh_);
  // dx = dh + norm_1'(attention'(dh))   one all-reduce, in attention's input gradient
  norm_1_.backward_add(attention_.backward(dh_), dh_, dx);
}

std::vector<Parameter*> TransformerBlock::parameters() {
  std::vector<Parameter*> params;
  auto append = [&params](std::vector<Parameter*> more) {
    params.insert(params.end(), more.begin(), more.end());
  };
  append(norm_1_.parameters());
  append(attention_.parameters());
  append(norm_2_.parameters());
  append(mlp_.parameters());
  return params;
}

}  // namespace colrow
