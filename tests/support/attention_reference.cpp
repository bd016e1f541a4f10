// The attention reference: plain loops in double, each value carried with its
// magnitude and fp32 error bound (see attention_reference.h for the rules).
#include "support/attention_reference.h"

#include <algorithm>
#include <cmath>
#include <sstream>
#include <stdexcept>

namespace colrow::reference {
namespace {

constexpr double kU = kUnitRoundoff;
// expf within 4 ulp (glibc's vector expf, libmvec, promises 4 ulp; the
// kernel uses it under -ffast-math); an ulp is at most 2u relative.
constexpr double kExpRelative = 8 * kU;
// Slack for the double-precision angle behind a rounded cos/sin (pos * theta^x,
// with a rope scaling's few more double operations on the frequency, and
// cos/sin in double are within ~1e-15 for the positions tested).
constexpr double kAngleSlack = 1e-14;

Bounded exact_value(double v) {
  return {v, std::fabs(v), 0.0};
}

// Below fp32's smallest normal number there is no relative precision (and
// results may be flushed to zero): each rounding may also be off by this much.
constexpr double kTiny = 0x1p-126;

// One rounding of a computed result: u |result| <= u (m + e), or kTiny.
Bounded rounded(Bounded r) {
  r.e += kU * (r.m + r.e) + kTiny;
  return r;
}

Bounded mul(const Bounded& a, const Bounded& b) {
  return rounded({a.v * b.v, a.m * b.m, a.m * b.e + b.m * a.e + a.e * b.e});
}

Bounded add(const Bounded& a, const Bounded& b) {
  return rounded({a.v + b.v, a.m + b.m, a.e + b.e});
}

Bounded neg(const Bounded& a) {
  return {-a.v, a.m, a.e};
}

Bounded sub(const Bounded& a, const Bounded& b) {
  return add(a, neg(b));
}

// A constant computed in double and rounded to fp32 once.
Bounded constant(double c, double slack = 0.0) {
  return {c, std::fabs(c), kU * std::fabs(c) + slack};
}

// A dot product (add_product) or a plain sum (add_term) of computed values,
// in any order and grouping with at most `depth` additions on any term's
// path: gamma_{depth + 1} (products are rounded too) or gamma_depth (plain
// terms) times the sum of the computed terms' magnitudes, plus the errors the
// terms bring in.
class Sum {
 public:
  void add_product(const Bounded& a, const Bounded& b) {
    v_ += a.v * b.v;
    m_ += a.m * b.m;
    propagated_ += a.m * b.e + b.m * a.e + a.e * b.e;
    computed_ += (a.m + a.e) * (b.m + b.e);
    products_ = true;
  }
  void add_term(const Bounded& a) {
    v_ += a.v;
    m_ += a.m;
    propagated_ += a.e;
    computed_ += a.m + a.e;
  }
  Bounded result(int64_t depth) const {
    const int64_t roundings = depth + (products_ ? 1 : 0);
    return {v_, m_, propagated_ + gamma(roundings) * computed_ + roundings * kTiny};
  }

 private:
  double v_ = 0.0, m_ = 0.0, propagated_ = 0.0, computed_ = 0.0;
  bool products_ = false;
};

// Softmax of scores s[0..n) (the visible keys of one query row), evaluated in
// fp32 as d_j = s_j - max, E_j = exp(d_j), Z = sum E, p_j = E_j * (1 / Z).
// The computed max m^ shifts every score alike, and softmax is invariant to
// that shift, so only these errors count:
//   d_j = s_j - m^ + eps_j, |eps_j| <= e_j + u (|s_j - max| + e_j + E),
//     E = max_k e_k (the computed max is within E of the exact one);
//   E_j = exp(s_j - m^) (1 + rho_j), |rho_j| <= r_j = exp(|eps_j|)(1 + 8u) - 1;
//   Z = sum_k E_k (1 + sigma_k), |sigma_k| <= gamma_{n-1}; two more roundings.
// So p^_j / p_j = (1 + rho_j)(1 + d1)(1 + d2) / sum_k p_k (1 + rho_k)(1 + sigma_k),
// whose denominator lies in [(1 - R)(1 - g), (1 + R)(1 + g)], R = max r_k,
// g = gamma_{n-1}: |p^_j - p_j| <= p_j rel_j with rel_j below (plus
// underflow: a score 104 below the max has exp < 2^-149).
void softmax_row(const Bounded* s, int64_t n, Bounded* p) {
  double max = s[0].v, max_e = 0.0;
  for (int64_t j = 0; j < n; ++j) {
    max = std::max(max, s[j].v);
    max_e = std::max(max_e, s[j].e);
  }
  std::vector<double> r(n);
  double z = 0.0, big_r = 0.0;
  for (int64_t j = 0; j < n; ++j) {
    z += std::exp(s[j].v - max);
    const double eps = s[j].e + kU * (std::fabs(s[j].v - max) + s[j].e + max_e);
    r[j] = std::exp(eps) * (1.0 + kExpRelative) - 1.0;
    big_r = std::max(big_r, r[j]);
  }
  const double g = gamma(n - 1);
  for (int64_t j = 0; j < n; ++j) {
    const double pj = std::exp(s[j].v - max) / z;
    const double up = (1.0 + r[j]) * (1.0 + kU) * (1.0 + kU) / ((1.0 - big_r) * (1.0 - g)) - 1.0;
    const double down = 1.0 - (1.0 - r[j]) * (1.0 - kU) * (1.0 - kU) / ((1.0 + big_r) * (1.0 + g));
    // + kTiny for E_j and for p_j, each of which may underflow.
    p[j] = {pj, pj, pj * std::max(up, down) + 2 * kTiny};
  }
}

// x: [tokens, in] (computed), w: [out, in], b: [out] or empty -> x w^T (+ b),
// with `extra` more additions on each term's path (partial sums over ranks).
BMatrix linear(const BMatrix& x, const Matrix& w, const Matrix& b, int64_t tokens, int64_t in,
               int64_t out, int64_t extra) {
  BMatrix y(tokens * out);
  for (int64_t t = 0; t < tokens; ++t) {
    for (int64_t o = 0; o < out; ++o) {
      Sum sum;
      for (int64_t i = 0; i < in; ++i) sum.add_product(x[t * in + i], exact_value(w[o * in + i]));
      y[t * out + o] = sum.result(in - 1 + extra);
      if (!b.empty()) y[t * out + o] = add(y[t * out + o], exact_value(b[o]));
    }
  }
  return y;
}

// dw = dy^T x: [out, in] and db = column sums of dy: [out] (when `bias`),
// accumulated into zeroed gradients (one more addition) with `extra` more.
void linear_weight_grads(const BMatrix& x, const BMatrix& dy, int64_t tokens, int64_t in,
                         int64_t out, bool bias, int64_t extra, BMatrix& dw, BMatrix& db) {
  dw.assign(out * in, {});
  for (int64_t o = 0; o < out; ++o) {
    for (int64_t i = 0; i < in; ++i) {
      Sum sum;
      for (int64_t t = 0; t < tokens; ++t) sum.add_product(dy[t * out + o], x[t * in + i]);
      dw[o * in + i] = sum.result(tokens + extra);
    }
  }
  db.clear();
  if (!bias) return;
  db.assign(out, {});
  for (int64_t o = 0; o < out; ++o) {
    Sum sum;
    for (int64_t t = 0; t < tokens; ++t) sum.add_term(dy[t * out + o]);
    db[o] = sum.result(tokens + extra);
  }
}

}  // namespace

BMatrix exact(const Matrix& a) {
  BMatrix out(a.size());
  for (size_t i = 0; i < a.size(); ++i) out[i] = exact_value(a[i]);
  return out;
}

Matrix values(const BMatrix& a) {
  Matrix out(a.size());
  for (size_t i = 0; i < a.size(); ++i) out[i] = a[i].v;
  return out;
}

std::vector<double> rope_inv_freq(int64_t head_dim, double theta, const RopeScalingSpec& scaling) {
  constexpr double kPi = 3.14159265358979323846;
  const int64_t half = head_dim / 2;
  std::vector<double> inv_freq(half);
  for (int64_t i = 0; i < half; ++i) {
    // 1 / theta^(arange(0, hd, 2) / hd)
    inv_freq[i] = 1.0 / std::pow(theta, static_cast<double>(2 * i) / static_cast<double>(head_dim));
  }
  if (scaling.type == "default") return inv_freq;
  if (scaling.type == "linear") {
    for (double& f : inv_freq) f /= scaling.factor;
    return inv_freq;
  }
  if (scaling.type != "llama3") {
    throw std::invalid_argument("rope reference: unknown rope_type " + scaling.type);
  }
  const double original = static_cast<double>(scaling.original_max_position_embeddings);
  const double low_freq_wavelen = original / scaling.low_freq_factor;
  const double high_freq_wavelen = original / scaling.high_freq_factor;
  for (double& f : inv_freq) {
    const double wavelen = 2.0 * kPi / f;
    if (wavelen > low_freq_wavelen) {
      f = f / scaling.factor;  // low frequencies: scaled
    } else if (wavelen < high_freq_wavelen) {
      // high frequencies: kept
    } else {  // in between: interpolated
      const double smooth = (original / wavelen - scaling.low_freq_factor) /
                            (scaling.high_freq_factor - scaling.low_freq_factor);
      f = (1.0 - smooth) * f / scaling.factor + smooth * f;
    }
  }
  return inv_freq;
}

BMatrix rope(const BMatrix& x, int64_t tokens, int64_t width, int64_t seq, int64_t head_dim,
             double theta, bool inverse, const RopeScalingSpec& scaling) {
  const int64_t half = head_dim / 2;
  const std::vector<double> inv_freq = rope_inv_freq(head_dim, theta, scaling);
  BMatrix y(x.size());
  for (int64_t t = 0; t < tokens; ++t) {
    const double pos = static_cast<double>(t % seq);
    for (int64_t h = 0; h < width / head_dim; ++h) {
      const Bounded* xh = &x[t * width + h * head_dim];
      Bounded* yh = &y[t * width + h * head_dim];
      for (int64_t d = 0; d < head_dim; ++d) {
        // cos, sin = cat(freqs, freqs): dimension d uses frequency d mod half.
        // The scaled frequency is, like the unscaled one, a double whose
        // cos/sin the kernel rounds to fp32 once (constant() below).
        const double angle = (inverse ? -1.0 : 1.0) * pos * inv_freq[d % half];
        const Bounded c = constant(std::cos(angle), kAngleSlack);
        const Bounded s = constant(std::sin(angle), kAngleSlack);
        // rotate_half(x) = cat(-x[half:], x[:half])
        const Bounded rotated = d < half ? neg(xh[d + half]) : xh[d - half];
        yh[d] = add(mul(xh[d], c), mul(rotated, s));
      }
    }
  }
  return y;
}

CoreResult causal_attention(const CoreDims& dims, const BMatrix& q, const BMatrix& k,
                            const BMatrix& v, const BMatrix& dout) {
  const int64_t batch = dims.batch, seq = dims.seq, nh = dims.n_head, hd = dims.head_dim;
  const int64_t group = nh / dims.n_kv_head;
  const int64_t wq = nh * hd, wk = dims.n_kv_head * hd;
  const Bounded scale = constant(1.0 / std::sqrt(static_cast<double>(hd)));
  // dK, dV: group * seq terms each, grouped by head and by block of query rows.
  const int64_t kv_depth = 2 * group * seq + dims.extra_depth;
  // The first key query i sees: 0 (causal), or i - window + 1 (sliding window).
  auto first = [&](int64_t i) -> int64_t {
    return dims.window > 0 ? std::max<int64_t>(0, i - dims.window + 1) : 0;
  };

  CoreResult r;
  r.probs.assign(batch * nh * seq * seq, {});
  r.out.assign(batch * seq * wq, {});
  r.dq.assign(batch * seq * wq, {});
  r.dk.assign(batch * seq * wk, {});
  r.dv.assign(batch * seq * wk, {});
  std::vector<Sum> dk_sums(r.dk.size()), dv_sums(r.dv.size());
  auto qi = [&](const BMatrix& m, int64_t b, int64_t i, int64_t h, int64_t d) -> const Bounded& {
    return m[(b * seq + i) * wq + h * hd + d];
  };
  auto ki = [&](int64_t b, int64_t j, int64_t g, int64_t d) {
    return (b * seq + j) * wk + g * hd + d;
  };

  for (int64_t b = 0; b < batch; ++b) {
    for (int64_t h = 0; h < nh; ++h) {
      const int64_t g = h / group;
      Bounded* p = &r.probs[(b * nh + h) * seq * seq];
      // Forward: P row by row (the visible keys first(i) <= j <= i; the
      // others keep probability exactly 0), then O = P V.
      for (int64_t i = 0; i < seq; ++i) {
        const int64_t lo = first(i), n = i - lo + 1;
        std::vector<Bounded> s(n);
        for (int64_t j = lo; j <= i; ++j) {
          Sum dot;
          for (int64_t d = 0; d < hd; ++d) dot.add_product(qi(q, b, i, h, d), k[ki(b, j, g, d)]);
          s[j - lo] = mul(dot.result(hd - 1), scale);
        }
        softmax_row(s.data(), n, p + i * seq + lo);
        for (int64_t d = 0; d < hd; ++d) {
          Sum o;
          for (int64_t j = 0; j < seq; ++j) o.add_product(p[i * seq + j], v[ki(b, j, g, d)]);
          r.out[(b * seq + i) * wq + h * hd + d] = o.result(seq - 1);
        }
      }
      // Backward.
      for (int64_t i = 0; i < seq; ++i) {
        const int64_t lo = first(i);
        std::vector<Bounded> dp(i + 1), ds(seq);  // zero for the masked keys
        Sum row;                                  // sum_j dP_ij P_ij over the visible keys
        for (int64_t j = lo; j <= i; ++j) {
          Sum dot;
          for (int64_t d = 0; d < hd; ++d) dot.add_product(qi(dout, b, i, h, d), v[ki(b, j, g, d)]);
          dp[j] = dot.result(hd - 1);
          row.add_product(dp[j], p[i * seq + j]);
        }
        // Depth i, not i - lo: a kernel may sum the masked (zero) terms too.
        const Bounded c = row.result(i);
        for (int64_t j = lo; j <= i; ++j) ds[j] = mul(p[i * seq + j], sub(dp[j], c));
        for (int64_t d = 0; d < hd; ++d) {
          Sum dq;
          for (int64_t j = 0; j < seq; ++j) dq.add_product(ds[j], k[ki(b, j, g, d)]);
          r.dq[(b * seq + i) * wq + h * hd + d] = mul(dq.result(seq - 1), scale);
        }
        for (int64_t j = lo; j <= i; ++j) {
          for (int64_t d = 0; d < hd; ++d) {
            dv_sums[ki(b, j, g, d)].add_product(p[i * seq + j], qi(dout, b, i, h, d));
            dk_sums[ki(b, j, g, d)].add_product(ds[j], qi(q, b, i, h, d));
          }
        }
      }
    }
  }
  for (size_t i = 0; i < r.dk.size(); ++i) {
    r.dk[i] = mul(dk_sums[i].result(kv_depth), scale);
    r.dv[i] = dv_sums[i].result(kv_depth);
  }
  return r;
}

AttentionLayerResult attention_layer(const AttentionSpec& spec, const AttentionWeights& w,
                                     const Matrix& x, const Matrix& dy) {
  const int64_t tokens = spec.batch * spec.seq, d = spec.d_model, hd = spec.head_dim;
  const int64_t wq = spec.n_head * hd, wk = spec.n_kv_head * hd, tp = spec.tp;
  const BMatrix xb = exact(x), dyb = exact(dy);

  // Forward projections; RoPE on q and k.
  BMatrix q = linear(xb, w.q_w, w.q_b, tokens, d, wq, 0);
  BMatrix k = linear(xb, w.k_w, w.k_b, tokens, d, wk, 0);
  const BMatrix v = linear(xb, w.v_w, w.v_b, tokens, d, wk, 0);
  if (spec.rope) {
    q = rope(q, tokens, wq, spec.seq, hd, spec.rope_theta, false, spec.rope_scaling);
    k = rope(k, tokens, wk, spec.seq, hd, spec.rope_theta, false, spec.rope_scaling);
  }
  // o_proj's input gradient does not depend on the forward: d_attn = dy W_o.
  Matrix o_w_t(wq * d);  // W_o^T: [wq, d], so that d_attn = dy (W_o^T)^T
  for (int64_t c = 0; c < d; ++c) {
    for (int64_t j = 0; j < wq; ++j) o_w_t[j * d + c] = w.o_w[c * wq + j];
  }
  const BMatrix d_attn = linear(dyb, o_w_t, {}, tokens, d, wq, 0);

  CoreDims dims;
  dims.batch = spec.batch;
  dims.seq = spec.seq;
  dims.n_head = spec.n_head;
  dims.n_kv_head = spec.n_kv_head;
  dims.head_dim = hd;
  dims.extra_depth = tp;
  dims.window = spec.window;
  const CoreResult core = causal_attention(dims, q, k, v, d_attn);

  AttentionLayerResult r;
  // o_proj: partial sums over ranks, all-reduced, then the bias.
  r.y = linear(core.out, w.o_w, w.o_b, tokens, wq, d, tp);
  linear_weight_grads(core.out, dyb, tokens, wq, d, !w.o_b.empty(), 0, r.grads.o_w, r.grads.o_b);

  BMatrix dq = core.dq, dk = core.dk;
  if (spec.rope) {
    dq = rope(dq, tokens, wq, spec.seq, hd, spec.rope_theta, true, spec.rope_scaling);
    dk = rope(dk, tokens, wk, spec.seq, hd, spec.rope_theta, true, spec.rope_scaling);
  }
  const BMatrix& dv = core.dv;
  linear_weight_grads(xb, dq, tokens, d, wq, !w.q_b.empty(), tp, r.grads.q_w, r.grads.q_b);
  linear_weight_grads(xb, dk, tokens, d, wk, !w.k_b.empty(), tp, r.grads.k_w, r.grads.k_b);
  linear_weight_grads(xb, dv, tokens, d, wk, !w.v_b.empty(), tp, r.grads.v_w, r.grads.v_b);

  // dx = dq W_q + dk W_k + dv W_v: partial over ranks (each holding its q
  // heads and one or more KV heads, replicated or not), summed once.
  const int64_t dx_depth = wq + 2 * std::max(wk, tp * hd) + tp;
  r.dx.assign(tokens * d, {});
  for (int64_t t = 0; t < tokens; ++t) {
    for (int64_t c = 0; c < d; ++c) {
      Sum sum;
      for (int64_t j = 0; j < wq; ++j)
        sum.add_product(dq[t * wq + j], exact_value(w.q_w[j * d + c]));
      for (int64_t j = 0; j < wk; ++j) {
        sum.add_product(dk[t * wk + j], exact_value(w.k_w[j * d + c]));
        sum.add_product(dv[t * wk + j], exact_value(w.v_w[j * d + c]));
      }
      r.dx[t * d + c] = sum.result(dx_depth);
    }
  }
  return r;
}

std::string check_within(const std::vector<float>& got, const BMatrix& ref, double* worst_ratio) {
  if (got.size() != ref.size()) {
    return "element count " + std::to_string(got.size()) + " != reference " +
           std::to_string(ref.size());
  }
  int64_t violations = 0, worst = 0;
  double worst_r = 0.0;
  for (size_t i = 0; i < got.size(); ++i) {
    const double err = std::fabs(static_cast<double>(got[i]) - ref[i].v);
    const double bound = ref[i].e + 1e-12 * ref[i].m;
    const double ratio = bound > 0.0 ? err / bound : (err > 0.0 ? INFINITY : 0.0);
    if (!(err <= bound)) ++violations;  // NaN too
    if (!(ratio <= worst_r)) {
      worst_r = ratio;
      worst = static_cast<int64_t>(i);
    }
  }
  if (worst_ratio != nullptr) *worst_ratio = worst_r;
  if (violations == 0) return "";
  std::ostringstream s;
  s << violations << " of " << got.size()
    << " elements outside the fp32 bound; worst at flat index " << worst << ": got " << got[worst]
    << ", reference " << ref[worst].v << ", bound " << ref[worst].e + 1e-12 * ref[worst].m
    << " (error/bound " << worst_r << ")";
  return s.str();
}

}  // namespace colrow::reference
