// The unsharded double-precision reference: plain loops, row-major index math,
// nothing shared with src/. Slow on purpose; the tests use tiny shapes.
#include "support/reference.h"

#include <cmath>

namespace colrow::reference {
namespace {

constexpr double kGeluK = 0.79788456080286535588;  // sqrt(2 / pi)
constexpr double kGeluC = 0.044715;
constexpr double kInvSqrt2 = 0.70710678118654752440;    // 1 / sqrt(2)
constexpr double kInvSqrt2Pi = 0.39894228040143267794;  // 1 / sqrt(2 pi)

bool is_gelu(MlpKind kind) {
  return kind == MlpKind::kGelu || kind == MlpKind::kGeluErf;
}

double gelu_of(MlpKind kind, double z) {
  return kind == MlpKind::kGeluErf ? gelu_erf(z) : gelu(z);
}

double gelu_grad_of(MlpKind kind, double z) {
  return kind == MlpKind::kGeluErf ? gelu_erf_grad(z) : gelu_grad(z);
}

double sigmoid(double x) {
  return 1.0 / (1.0 + std::exp(-x));
}

// Each activation and, in magnitude mode, its bounding proxy (see reference.h).
struct Activations {
  Matrix a;  // gate pre-activation (swiglu) or the only pre-activation z (gelu)
  Matrix b;  // up pre-activation (swiglu only)
  Matrix h;  // activation output: [tokens, ffn]
};

Activations activate(MlpKind kind, const MlpWeights& w, const Matrix& x, bool magnitude,
                     int64_t tokens, int64_t d_model, int64_t ffn) {
  Activations act;
  if (is_gelu(kind)) {
    act.a = linear_forward(x, w.up_w, w.up_b, tokens, d_model, ffn);
    act.h.resize(act.a.size());
    for (size_t i = 0; i < act.a.size(); ++i) {
      act.h[i] = magnitude ? act.a[i] : gelu_of(kind, act.a[i]);
    }
  } else {
    act.a = linear_forward(x, w.gate_w, w.gate_b, tokens, d_model, ffn);
    act.b = linear_forward(x, w.up_w, w.up_b, tokens, d_model, ffn);
    act.h.resize(act.a.size());
    for (size_t i = 0; i < act.a.size(); ++i) {
      act.h[i] = (magnitude ? act.a[i] : silu(act.a[i])) * act.b[i];
    }
  }
  return act;
}

MlpResult run_mlp(MlpKind kind, const MlpWeights& w, const Matrix& x, const Matrix& dy,
                  bool magnitude, int64_t tokens, int64_t d_model, int64_t ffn) {
  const bool has_bias = !w.down_b.empty();
  const Activations act = activate(kind, w, x, magnitude, tokens, d_model, ffn);
  MlpResult r;
  r.y = linear_forward(act.h, w.down_w, w.down_b, tokens, ffn, d_model);

  LinearGrads down = linear_backward(act.h, w.down_w, dy, has_bias, tokens, ffn, d_model);
  r.grads.down_w = down.dw;
  r.grads.down_b = down.db;
  const Matrix& dh = down.dx;  // [tokens, ffn]

  if (is_gelu(kind)) {
    Matrix dz(dh.size());
    for (size_t i = 0; i < dz.size(); ++i) {
      dz[i] = dh[i] * (magnitude ? 1.0 + act.a[i] : gelu_grad_of(kind, act.a[i]));
    }
    LinearGrads up = linear_backward(x, w.up_w, dz, has_bias, tokens, d_model, ffn);
    r.grads.up_w = up.dw;
    r.grads.up_b = up.db;
    r.dx = up.dx;
    return r;
  }
  Matrix da(dh.size()), db(dh.size());
  for (size_t i = 0; i < dh.size(); ++i) {
    const double a = act.a[i], b = act.b[i];
    da[i] = dh[i] * b * (magnitude ? 1.0 + a : silu_grad(a));
    db[i] = dh[i] * (magnitude ? a : silu(a));
  }
  LinearGrads gate = linear_backward(x, w.gate_w, da, has_bias, tokens, d_model, ffn);
  LinearGrads up = linear_backward(x, w.up_w, db, has_bias, tokens, d_model, ffn);
  r.grads.gate_w = gate.dw;
  r.grads.gate_b = gate.db;
  r.grads.up_w = up.dw;
  r.grads.up_b = up.db;
  r.dx.resize(gate.dx.size());
  for (size_t i = 0; i < r.dx.size(); ++i) r.dx[i] = gate.dx[i] + up.dx[i];
  return r;
}

}  // namespace

Matrix abs(const Matrix& a) {
  Matrix out(a.size());
  for (size_t i = 0; i < a.size(); ++i) out[i] = std::fabs(a[i]);
  return out;
}

double gamma(int64_t terms) {
  const double ku = static_cast<double>(terms) * kUnitRoundoff;
  return ku / (1.0 - ku);
}

Matrix linear_forward(const Matrix& x, const Matrix& w, const Matrix& b, int64_t tokens, int64_t in,
                      int64_t out) {
  Matrix y(tokens * out);
  for (int64_t t = 0; t < tokens; ++t) {
    for (int64_t o = 0; o < out; ++o) {
      double sum = b.empty() ? 0.0 : b[o];
      for (int64_t i = 0; i < in; ++i) sum += x[t * in + i] * w[o * in + i];
      y[t * out + o] = sum;
    }
  }
  return y;
}

LinearGrads linear_backward(const Matrix& x, const Matrix& w, const Matrix& dy, bool has_bias,
                            int64_t tokens, int64_t in, int64_t out) {
  LinearGrads g;
  g.dx.assign(tokens * in, 0.0);
  g.dw.assign(out * in, 0.0);
  for (int64_t t = 0; t < tokens; ++t) {
    for (int64_t o = 0; o < out; ++o) {
      const double d = dy[t * out + o];
      for (int64_t i = 0; i < in; ++i) {
        g.dx[t * in + i] += d * w[o * in + i];
        g.dw[o * in + i] += d * x[t * in + i];
      }
    }
  }
  if (has_bias) {
    g.db.assign(out, 0.0);
    for (int64_t t = 0; t < tokens; ++t) {
      for (int64_t o = 0; o < out; ++o) g.db[o] += dy[t * out + o];
    }
  }
  return g;
}

double gelu(double x) {
  return 0.5 * x * (1.0 + std::tanh(kGeluK * (x + kGeluC * x * x * x)));
}

double gelu_grad(double x) {
  const double t = std::tanh(kGeluK * (x + kGeluC * x * x * x));
  return 0.5 * (1.0 + t) + 0.5 * x * (1.0 - t * t) * kGeluK * (1.0 + 3.0 * kGeluC * x * x);
}

double gelu_erf(double x) {
  return 0.5 * x * (1.0 + std::erf(x * kInvSqrt2));
}

double gelu_erf_grad(double x) {
  return 0.5 * (1.0 + std::erf(x * kInvSqrt2)) + x * kInvSqrt2Pi * std::exp(-0.5 * x * x);
}

double silu(double x) {
  return x * sigmoid(x);
}

double silu_grad(double x) {
  const double s = sigmoid(x);
  return s * (1.0 + x * (1.0 - s));
}

MlpResult mlp(MlpKind kind, const MlpWeights& w, const Matrix& x, const Matrix& dy, int64_t tokens,
              int64_t d_model, int64_t ffn) {
  return run_mlp(kind, w, x, dy, /*magnitude=*/false, tokens, d_model, ffn);
}

MlpResult mlp_magnitude(MlpKind kind, const MlpWeights& w, const Matrix& x, const Matrix& dy,
                        int64_t tokens, int64_t d_model, int64_t ffn) {
  MlpWeights m;
  m.gate_w = abs(w.gate_w);
  m.gate_b = abs(w.gate_b);
  m.up_w = abs(w.up_w);
  m.up_b = abs(w.up_b);
  m.down_w = abs(w.down_w);
  m.down_b = abs(w.down_b);
  return run_mlp(kind, m, abs(x), abs(dy), /*magnitude=*/true, tokens, d_model, ffn);
}

}  // namespace colrow::reference
