// Unsharded reference for the attention tests: Hugging Face RoPE, causal
// multi-head attention with GQA, and the whole attention layer (q/k/v/o
// projections), forward and backward, in double precision with plain loops.
// Like reference.h it includes no colrow header and shares no code with src/.
//
// Every quantity is a Bounded: the exact value (in double) together with a
// rigorous bound on how far an fp32 evaluation of the same formula can be
// from it, carried along the computation (a running error analysis, Higham,
// Accuracy and Stability of Numerical Algorithms, ch. 3):
//   - u = 2^-24. A product or a sum of two computed values is rounded once:
//     error <= u (|result| + error so far).
//   - A dot product or sum of n terms, in ANY order and grouping (blocked
//     GEMMs, accumulation over heads, partial sums then an all-reduce), with
//     at most D additions on any term's path: error <= gamma_{D+1} sum |terms|
//     plus the propagated errors of the terms (Higham eq. 3.5). So that the
//     grouping never matters, |.| is always the magnitude m: the sum of the
//     absolute values of the atomic products that make up a value (m >= |v|),
//     which bounds every partial sum of them.
//   - softmax is analysed as a whole (the max shift cancels exactly): see
//     attention_reference.cpp; expf is taken to be within 4 ulp (what glibc's
//     vector expf promises).
//   - Each rounding may also lose everything below 2^-126 (underflow).
//   - Constants rounded to fp32 once (1/sqrt(head_dim), RoPE's cos and sin)
//     carry u |c|.
// The double evaluation's own error (~1e-16 relative per operation) is far
// below every bound; check_within() allows 1e-12 m for it.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "support/reference.h"

namespace colrow::reference {

struct Bounded {
  double v = 0.0;  // exact value
  double m = 0.0;  // magnitude: sum of |atomic products| making up v (>= |v|)
  double e = 0.0;  // |fp32 evaluation - v| <= e
};
using BMatrix = std::vector<Bounded>;  // row-major, like Matrix

// Exactly representable inputs (fp32 values): m = |v|, e = 0.
BMatrix exact(const Matrix& a);
Matrix values(const BMatrix& a);

// Hugging Face's rope_scaling (config.json), in its own vocabulary.
struct RopeScalingSpec {
  std::string type = "default";  // rope_type: "default", "linear" or "llama3"
  double factor = 1.0;           // linear, llama3
  double low_freq_factor = 1.0, high_freq_factor = 4.0;  // llama3
  int64_t original_max_position_embeddings = 8192;       // llama3
};

// RoPE's head_dim / 2 inverse frequencies, in double, from transformers'
// modeling_rope_utils:
//   default (_compute_default_rope_parameters): inv_freq[i] = theta^(-2i/hd)
//   linear (_compute_linear_scaling_rope_parameters): inv_freq[i] / factor
//   llama3 (_compute_llama3_parameters): with wavelen = 2 pi / inv_freq[i],
//     low_freq_wavelen = original / low_freq_factor and
//     high_freq_wavelen = original / high_freq_factor:
//       wavelen > low_freq_wavelen:  inv_freq[i] / factor
//       wavelen < high_freq_wavelen: inv_freq[i]
//       otherwise: (1 - smooth) inv_freq[i] / factor + smooth inv_freq[i],
//         smooth = (original / wavelen - low_freq_factor) /
//                  (high_freq_factor - low_freq_factor)
// (All three leave the attention scaling at 1.) An unknown type throws
// std::invalid_argument.
std::vector<double> rope_inv_freq(int64_t head_dim, double theta,
                                  const RopeScalingSpec& scaling = {});

// HF LLaMA's RoPE, written as HF writes it: inv_freq = rope_inv_freq(...),
// angle = pos * inv_freq, cos/sin = cat(freqs, freqs), y = x cos +
// rotate_half(x) sin, rotate_half(x) = cat(-x[hd/2:], x[:hd/2]); pos = t % seq.
// inverse = true rotates by -angle (RoPE's backward).
// x: [tokens, width], width a multiple of head_dim.
BMatrix rope(const BMatrix& x, int64_t tokens, int64_t width, int64_t seq, int64_t head_dim,
             double theta, bool inverse, const RopeScalingSpec& scaling = {});

struct CoreDims {
  int64_t batch = 0, seq = 0, n_head = 0, n_kv_head = 0, head_dim = 0;
  // Extra additions on any dK, dV term's path: partial sums over ranks that
  // share a KV head (their dK, dV reach the weights as tp-partial sums).
  int64_t extra_depth = 0;
  // Sliding window (Mistral, Qwen2): 0 is fully causal; otherwise key j is
  // visible to query i (positions within the sequence) iff
  // i - window < j <= i, and a masked key gets probability exactly 0.
  int64_t window = 0;
};
struct CoreResult {
  BMatrix probs;   // [batch, n_head, seq, seq], zero above the diagonal and outside the window
  BMatrix out;     // [batch*seq, n_head*head_dim]
  BMatrix dq;      // like q
  BMatrix dk, dv;  // like k: summed over the query heads of each KV head
};
// Causal (and, with dims.window, sliding-window) softmax(q k^T /
// sqrt(head_dim)) v per (sequence, head); query head h
// reads KV head h / (n_head / n_kv_head). q: [batch*seq, n_head*hd],
// k, v: [batch*seq, n_kv_head*hd], dout: like q.
CoreResult causal_attention(const CoreDims& dims, const BMatrix& q, const BMatrix& k,
                            const BMatrix& v, const BMatrix& dout);

struct AttentionSpec {
  int64_t batch = 0, seq = 0, d_model = 0, n_head = 0, n_kv_head = 0, head_dim = 0;
  bool rope = false;
  double rope_theta = 10000.0;
  RopeScalingSpec rope_scaling;
  int64_t window = 0;  // sliding window, as CoreDims::window (0: fully causal)
  int tp = 1;          // ranks: partial sums over them add additions to error bounds
};
// Weights as nn.Linear stores them ([out, in]); biases empty when absent.
struct AttentionWeights {
  Matrix q_w, q_b;  // [n_head*hd, d_model], [n_head*hd]
  Matrix k_w, k_b;  // [n_kv_head*hd, d_model], [n_kv_head*hd]
  Matrix v_w, v_b;  // like k
  Matrix o_w, o_b;  // [d_model, n_head*hd], [d_model]
};
struct AttentionGrads {
  BMatrix q_w, q_b, k_w, k_b, v_w, v_b, o_w, o_b;  // like the weights
};
struct AttentionLayerResult {
  BMatrix y;   // [batch*seq, d_model]
  BMatrix dx;  // [batch*seq, d_model]
  AttentionGrads grads;
};
// y = o_proj(attention(rope(q_proj(x)), rope(k_proj(x)), v_proj(x))), then
// backward from dy. x, dy: [batch*seq, d_model].
AttentionLayerResult attention_layer(const AttentionSpec& spec, const AttentionWeights& w,
                                     const Matrix& x, const Matrix& dy);

// Compares fp32 results with a bounded reference: empty when every
// |got_i - v_i| <= e_i + 1e-12 m_i, otherwise the count of violations and the
// worst element. worst_ratio (optional) receives max |got - v| / bound.
std::string check_within(const std::vector<float>& got, const BMatrix& ref,
                         double* worst_ratio = nullptr);

}  // namespace colrow::reference
