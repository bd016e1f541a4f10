// The whole-model reference: the layer references called in the order of the
// model's forward, then again in reverse with the upstream gradients. Each
// layer reference computes forward and backward in one call, so the forward
// pass calls it with a zero upstream gradient and keeps only its output.
#include "support/gpt_reference.h"

#include <stdexcept>
#include <utility>

#include "support/attention_reference.h"
#include "support/norm_reference.h"
#include "support/reference.h"
#include "support/vocab_reference.h"

namespace colrow::reference {
namespace {

constexpr int32_t kIgnoreIndex = -100;

const Matrix& get(const NamedTensors& params, const std::string& name) {
  const auto it = params.find(name);
  if (it == params.end()) throw std::invalid_argument("gpt reference: missing parameter " + name);
  return it->second;
}

void add_into(Matrix& dst, const Matrix& src) {
  for (size_t i = 0; i < dst.size(); ++i) dst[i] += src[i];
}

Matrix sum(const Matrix& a, const Matrix& b) {
  Matrix out = a;
  add_into(out, b);
  return out;
}

struct Names {
  std::string embed, positions, final_norm, head;
  std::string norm_1(int i) const { return layer(i) + (llama ? ".input_layernorm" : ".ln_1"); }
  std::string attn(int i) const { return layer(i) + (llama ? ".self_attn" : ".attn"); }
  std::string norm_2(int i) const {
    return layer(i) + (llama ? ".post_attention_layernorm" : ".ln_2");
  }
  std::string mlp(int i) const { return layer(i) + ".mlp"; }
  std::string layer(int i) const { return (llama ? "model.layers." : "h.") + std::to_string(i); }
  bool llama = false;
};

Names names_of(const GptSpec& s) {
  Names n;
  n.llama = s.llama;
  n.embed = s.llama ? "model.embed_tokens.weight" : "wte.weight";
  n.positions = "wpe.weight";
  n.final_norm = s.llama ? "model.norm" : "ln_f";
  n.head = s.llama && !s.tie_word_embeddings ? "lm_head.weight" : n.embed;
  return n;
}

// norm(x) with upstream dy (zeros for the forward pass alone); the result's
// dgamma, dbeta go to `prefix`.weight, .bias in grads when grads is non-null.
NormResult norm(const GptSpec& s, const NamedTensors& params, const std::string& prefix,
                const Matrix& x, const Matrix& dy, int64_t tokens) {
  if (s.llama)
    return rms_norm(x, get(params, prefix + ".weight"), dy, tokens, s.d_model, s.norm_eps);
  return layer_norm(x, get(params, prefix + ".weight"), get(params, prefix + ".bias"), dy, tokens,
                    s.d_model, s.norm_eps);
}

void accumulate_norm(const GptSpec& s, const std::string& prefix, const NormResult& r,
                     NamedTensors& grads) {
  grads[prefix + ".weight"] = r.dgamma;
  if (!s.llama) grads[prefix + ".bias"] = r.dbeta;
}

bool has_qkv_bias(const GptSpec& s) {
  return !s.llama || s.qkv_bias;
}
bool has_output_bias(const GptSpec& s) {
  return !s.llama || s.output_bias;
}

// A bias the spec asks for (a missing one is an error), or none.
Matrix bias_if(bool wanted, const NamedTensors& params, const std::string& name) {
  return wanted ? get(params, name) : Matrix{};
}

AttentionWeights attention_weights(const GptSpec& s, const NamedTensors& params,
                                   const std::string& p) {
  AttentionWeights w;
  w.q_w = get(params, p + ".q_proj.weight");
  w.k_w = get(params, p + ".k_proj.weight");
  w.v_w = get(params, p + ".v_proj.weight");
  w.o_w = get(params, p + ".o_proj.weight");
  w.q_b = bias_if(has_qkv_bias(s), params, p + ".q_proj.bias");
  w.k_b = bias_if(has_qkv_bias(s), params, p + ".k_proj.bias");
  w.v_b = bias_if(has_qkv_bias(s), params, p + ".v_proj.bias");
  w.o_b = bias_if(has_output_bias(s), params, p + ".o_proj.bias");
  return w;
}

MlpWeights mlp_weights(const GptSpec& s, const NamedTensors& params, const std::string& p) {
  MlpWeights w;
  if (s.llama) {
    w.gate_w = get(params, p + ".gate_proj.weight");
    w.up_w = get(params, p + ".up_proj.weight");
    w.down_w = get(params, p + ".down_proj.weight");
    w.gate_b = bias_if(s.mlp_bias, params, p + ".gate_proj.bias");
    w.up_b = bias_if(s.mlp_bias, params, p + ".up_proj.bias");
    w.down_b = bias_if(s.mlp_bias, params, p + ".down_proj.bias");
  } else {
    w.up_w = get(params, p + ".c_fc.weight");
    w.up_b = get(params, p + ".c_fc.bias");
    w.down_w = get(params, p + ".c_proj.weight");
    w.down_b = get(params, p + ".c_proj.bias");
  }
  return w;
}

}  // namespace

GptReferenceResult gpt_forward_backward(const GptSpec& s, const NamedTensors& params,
                                        const std::vector<int32_t>& ids,
                                        const std::vector<int32_t>& targets, int64_t batch,
                                        int64_t seq) {
  const int64_t tokens = batch * seq, d = s.d_model, v = s.vocab_size, ffn = s.ffn_hidden_size;
  const Names n = names_of(s);
  const Matrix zeros(tokens * d, 0.0);
  AttentionSpec attn_spec;
  attn_spec.batch = batch;
  attn_spec.seq = seq;
  attn_spec.d_model = d;
  attn_spec.n_head = s.n_head;
  attn_spec.n_kv_head = s.n_kv_head;
  attn_spec.head_dim = s.head_dim;
  attn_spec.rope = s.llama;
  attn_spec.rope_theta = s.rope_theta;
  attn_spec.rope_scaling.type = s.rope_type;
  attn_spec.rope_scaling.factor = s.rope_factor;
  attn_spec.rope_scaling.low_freq_factor = s.low_freq_factor;
  attn_spec.rope_scaling.high_freq_factor = s.high_freq_factor;
  attn_spec.rope_scaling.original_max_position_embeddings = s.original_max_position_embeddings;
  // Layer i's attention: fully causal below max_window_layers, windowed above.
  auto attn_spec_of = [&](int layer) {
    AttentionSpec a = attn_spec;
    a.window = layer >= s.max_window_layers ? s.sliding_window : 0;
    return a;
  };
  const MlpKind mlp_kind =
      s.llama ? MlpKind::kSwiGlu : (s.gelu_exact ? MlpKind::kGeluErf : MlpKind::kGelu);

  // Forward. ids: [tokens] -> x: [tokens, d] (+ wpe[t % seq]).
  Matrix x = embedding_forward(get(params, n.embed), ids, d);
  if (!s.llama) {
    const Matrix& wpe = get(params, n.positions);
    for (int64_t t = 0; t < tokens; ++t) {
      for (int64_t j = 0; j < d; ++j) x[t * d + j] += wpe[(t % seq) * d + j];
    }
  }
  std::vector<Matrix> block_in(s.n_layer), block_mid(s.n_layer);  // x and h of each block
  for (int i = 0; i < s.n_layer; ++i) {
    block_in[i] = x;
    const Matrix a = norm(s, params, n.norm_1(i), x, zeros, tokens).y;
    // h = x + attn(norm_1(x))
    block_mid[i] = sum(
        x,
        values(
            attention_layer(attn_spec_of(i), attention_weights(s, params, n.attn(i)), a, zeros).y));
    const Matrix b = norm(s, params, n.norm_2(i), block_mid[i], zeros, tokens).y;
    // x = h + mlp(norm_2(h))
    x = sum(block_mid[i],
            mlp(mlp_kind, mlp_weights(s, params, n.mlp(i)), b, zeros, tokens, d, ffn).y);
  }
  const Matrix z = norm(s, params, n.final_norm, x, zeros, tokens).y;
  // z: [tokens, d] -> logits: [tokens, V]
  const Matrix& head = get(params, n.head);
  const Matrix logits = linear_forward(z, head, {}, tokens, d, v);
  const CrossEntropyResult ce = cross_entropy(logits, targets, tokens, v, 0.0, kIgnoreIndex);

  GptReferenceResult r;
  r.losses = ce.losses;
  r.mean = ce.mean;
  r.counted = ce.counted;
  NamedTensors& g = r.grads;

  // Backward of the mean: d mean / d logits = dlogits / counted.
  Matrix dlogits = ce.dlogits;
  for (double& e : dlogits) e /= static_cast<double>(ce.counted);
  const LinearGrads head_grads = linear_backward(z, head, dlogits, false, tokens, d, v);
  g[n.head] = head_grads.dw;  // the tied case adds the embedding's gradient below
  const NormResult final_norm = norm(s, params, n.final_norm, x, head_grads.dx, tokens);
  accumulate_norm(s, n.final_norm, final_norm, g);
  Matrix dx = final_norm.dx;
  for (int i = s.n_layer - 1; i >= 0; --i) {
    // dh = dy + norm_2'(mlp'(dy))
    const NormResult n2f = norm(s, params, n.norm_2(i), block_mid[i], zeros, tokens);
    const MlpResult m = mlp(mlp_kind, mlp_weights(s, params, n.mlp(i)), n2f.y, dx, tokens, d, ffn);
    const NormResult n2 = norm(s, params, n.norm_2(i), block_mid[i], m.dx, tokens);
    accumulate_norm(s, n.norm_2(i), n2, g);
    if (s.llama) {
      g[n.mlp(i) + ".gate_proj.weight"] = m.grads.gate_w;
      g[n.mlp(i) + ".up_proj.weight"] = m.grads.up_w;
      g[n.mlp(i) + ".down_proj.weight"] = m.grads.down_w;
      if (s.mlp_bias) {
        g[n.mlp(i) + ".gate_proj.bias"] = m.grads.gate_b;
        g[n.mlp(i) + ".up_proj.bias"] = m.grads.up_b;
        g[n.mlp(i) + ".down_proj.bias"] = m.grads.down_b;
      }
    } else {
      g[n.mlp(i) + ".c_fc.weight"] = m.grads.up_w;
      g[n.mlp(i) + ".c_fc.bias"] = m.grads.up_b;
      g[n.mlp(i) + ".c_proj.weight"] = m.grads.down_w;
      g[n.mlp(i) + ".c_proj.bias"] = m.grads.down_b;
    }
    const Matrix dh = sum(dx, n2.dx);
    // dx = dh + norm_1'(attn'(dh))
    const NormResult n1f = norm(s, params, n.norm_1(i), block_in[i], zeros, tokens);
    const AttentionLayerResult at =
        attention_layer(attn_spec_of(i), attention_weights(s, params, n.attn(i)), n1f.y, dh);
    const NormResult n1 = norm(s, params, n.norm_1(i), block_in[i], values(at.dx), tokens);
    accumulate_norm(s, n.norm_1(i), n1, g);
    const std::string p = n.attn(i);
    g[p + ".q_proj.weight"] = values(at.grads.q_w);
    g[p + ".k_proj.weight"] = values(at.grads.k_w);
    g[p + ".v_proj.weight"] = values(at.grads.v_w);
    g[p + ".o_proj.weight"] = values(at.grads.o_w);
    if (has_qkv_bias(s)) {
      g[p + ".q_proj.bias"] = values(at.grads.q_b);
      g[p + ".k_proj.bias"] = values(at.grads.k_b);
      g[p + ".v_proj.bias"] = values(at.grads.v_b);
    }
    if (has_output_bias(s)) g[p + ".o_proj.bias"] = values(at.grads.o_b);
    dx = sum(dh, n1.dx);
  }
  // dx: [tokens, d] -> wpe rows t % seq, embedding rows ids[t]
  if (!s.llama) {
    Matrix dwpe(get(params, n.positions).size(), 0.0);
    for (int64_t t = 0; t < tokens; ++t) {
      for (int64_t j = 0; j < d; ++j) dwpe[(t % seq) * d + j] += dx[t * d + j];
    }
    g[n.positions] = std::move(dwpe);
  }
  const Matrix dembed = embedding_backward(ids, dx, v, d);
  if (n.head == n.embed) {
    add_into(g[n.embed], dembed);
  } else {
    g[n.embed] = dembed;
  }
  return r;
}

}  // namespace colrow::reference
