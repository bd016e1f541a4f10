// Double-precision reference for the whole decoder-only model (GPT-2 and
// LLaMA, as Hugging Face builds them): loss and the gradient of every
// parameter, with plain loops, composed from the layer references
// (reference.h: linear and MLP; attention_reference.h: attention with RoPE and
// GQA; norm_reference.h; vocab_reference.h: embedding and cross-entropy). Like
// them it includes no colrow header and shares no code with src/.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace colrow::reference {

using Matrix = std::vector<double>;  // row-major
// Full (unsharded) tensors keyed by colrow's Hugging Face-style names, weights
// [out, in] as nn.Linear stores them, the vocabulary unpadded:
//   gpt2:  wte.weight [V, d], wpe.weight [P, d], h.i.ln_1.{weight,bias},
//          h.i.attn.{q,k,v,o}_proj.{weight,bias}, h.i.ln_2.{weight,bias},
//          h.i.mlp.{c_fc,c_proj}.{weight,bias}, ln_f.{weight,bias}
//   llama: model.embed_tokens.weight, model.layers.i.input_layernorm.weight,
//          model.layers.i.self_attn.{q,k,v,o}_proj.weight,
//          model.layers.i.self_attn.{q,k,v}_proj.bias (qkv_bias),
//          model.layers.i.self_attn.o_proj.bias (output_bias),
//          model.layers.i.post_attention_layernorm.weight,
//          model.layers.i.mlp.{gate,up,down}_proj.weight,
//          model.layers.i.mlp.{gate,up,down}_proj.bias (mlp_bias), model.norm.weight,
//          lm_head.weight (absent when tied)
// (llama also stands for Hugging Face's mistral and qwen2: the same layers with
// these biases and a sliding window.)
using NamedTensors = std::map<std::string, Matrix>;

struct GptSpec {
  bool llama = false;  // false: gpt2
  int64_t vocab_size = 0, d_model = 0, head_dim = 0, ffn_hidden_size = 0;
  int n_layer = 0, n_head = 0, n_kv_head = 0;
  double norm_eps = 1e-5;
  // llama: RoPE's theta and HF's rope_scaling (rope_inv_freq in
  // attention_reference.h): rope_type "default", "linear" or "llama3".
  double rope_theta = 10000.0;
  std::string rope_type = "default";
  double rope_factor = 1.0;                         // linear, llama3
  double low_freq_factor = 1.0;                     // llama3
  double high_freq_factor = 4.0;                    // llama3
  int64_t original_max_position_embeddings = 8192;  // llama3
  bool tie_word_embeddings = true;
  // llama's biases (HF attention_bias splits into these two for qwen2, which
  // has q, k, v biases and no o_proj bias). gpt2 always has every bias.
  bool qkv_bias = false, output_bias = false, mlp_bias = false;
  // gpt2: the exact GELU x/2 (1 + erf(x / sqrt 2)) (HF activation_function
  // "gelu") instead of the tanh form (gelu_new).
  bool gelu_exact = false;
  // Sliding window: layers >= max_window_layers let query i see keys
  // i - sliding_window < j <= i (positions within the sequence); 0: fully causal.
  int64_t sliding_window = 0;
  int max_window_layers = 0;
};

struct GptReferenceResult {
  std::vector<double> losses;  // [tokens]; 0 where the target is ignore_index
  double mean = 0.0;           // over the counted tokens
  int64_t counted = 0;
  NamedTensors grads;  // d mean / d parameter, same names and shapes as the parameters
};

// The pre-norm decoder: x = wte[ids] (+ wpe[t % seq], gpt2); per layer
// h = x + attn(norm_1(x)), x = h + mlp(norm_2(h)); logits = norm_f(x) W^T with
// W = lm_head, or wte when tied (gpt2 always); loss = mean cross-entropy over
// the targets that are not ignore_index (-100). gpt2: LayerNorm, biases,
// GELU MLP (tanh form, or erf with gelu_exact); llama: RMSNorm, RoPE (scaled
// per rope_type) on q and k, SwiGLU, the biases its flags ask for. Attention
// is causal, within the sliding window in layers >= max_window_layers.
// ids, targets: [batch * seq], row-major by sequence.
GptReferenceResult gpt_forward_backward(const GptSpec& spec, const NamedTensors& params,
                                        const std::vector<int32_t>& ids,
                                        const std::vector<int32_t>& targets, int64_t batch,
                                        int64_t seq);

}  // namespace colrow::reference
