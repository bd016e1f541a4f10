// ParallelMLP (gelu and swiglu, with and without biases) at tp = world size
// against the unsharded double reference (support/reference.h): output, dx and
// every rank's parameter-gradient shard within fp32 error bounds; central
// finite differences; one all-reduce each way; validate() and config errors.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>

#include "colrow/core/error.h"
#include "colrow/dist/recording_communicator.h"
#include "colrow/nn/parallel_mlp.h"
#include "nn/layer_test_helpers.h"
#include "support/reference.h"
#include "support/test_world.h"

namespace colrow {
namespace {

using reference::Matrix;
using testing::block;
using testing::expect_within_bound;
using testing::to_matrix;
using testing::world;

// ffn is split over tp: divisible by 1, 2, 3 and 4.
constexpr int64_t kTokens = 6;
constexpr int64_t kModel = 24;
constexpr int64_t kFfn = 48;

MlpConfig make_config(Activation activation, bool bias, int64_t d_model = kModel,
                      int64_t ffn = kFfn) {
  MlpConfig config;
  config.name = "h.0.mlp";
  config.d_model = d_model;
  config.ffn_hidden_size = ffn;
  config.activation = activation;
  config.bias = bias;
  config.seed = 4242;
  return config;
}

std::string describe(Activation activation, bool bias) {
  return std::string(to_string(activation)) + (bias ? ", bias" : ", no bias");
}

reference::MlpKind kind_of(Activation activation) {
  switch (activation) {
    case Activation::kGeluErf:
      return reference::MlpKind::kGeluErf;
    case Activation::kSwiGlu:
      return reference::MlpKind::kSwiGlu;
    case Activation::kGelu:
      break;
  }
  return reference::MlpKind::kGelu;
}

// One projection of the MLP: its Hugging Face name, how it is split, its shape.
struct Projection {
  std::string name;  // e.g. "h.0.mlp.c_fc"
  bool column;       // column-parallel (split dim 0) or row-parallel (split dim 1)
  int64_t out, in;
};

std::vector<Projection> projections(const MlpConfig& c) {
  const std::string p = c.name + ".";
  if (c.activation != Activation::kSwiGlu) {  // GPT-2's names, either GELU
    return {{p + "c_fc", true, c.ffn_hidden_size, c.d_model},
            {p + "c_proj", false, c.d_model, c.ffn_hidden_size}};
  }
  return {{p + "gate_proj", true, c.ffn_hidden_size, c.d_model},
          {p + "up_proj", true, c.ffn_hidden_size, c.d_model},
          {p + "down_proj", false, c.d_model, c.ffn_hidden_size}};
}

// The MLP's parameters by name, checked against the expected names and order:
// each projection's weight then bias, except that SwiGLU's gate and up are
// one fused projection, whose parts' weights come first, then their biases.
std::map<std::string, Parameter*> parameters_by_name(ParallelMLP& mlp) {
  const std::vector<Projection> all = projections(mlp.config());
  const bool bias = mlp.config().bias;
  std::vector<std::string> expected;
  if (all.size() == 3) {  // gate_proj, up_proj, down_proj
    for (const std::string suffix : {".weight", ".bias"}) {
      if (suffix == ".bias" && !bias) continue;
      expected.push_back(all[0].name + suffix);
      expected.push_back(all[1].name + suffix);
    }
  } else {
    expected.push_back(all[0].name + ".weight");
    if (bias) expected.push_back(all[0].name + ".bias");
  }
  expected.push_back(all.back().name + ".weight");
  if (bias) expected.push_back(all.back().name + ".bias");
  std::vector<std::string> names;
  std::map<std::string, Parameter*> by_name;
  for (Parameter* param : mlp.parameters()) {
    names.push_back(param->name);
    by_name[param->name] = param;
  }
  EXPECT_EQ(names, expected);
  return by_name;
}

// The full weights, gathered over tp from the shards, each also checked
// bitwise against what fill_shard makes on one rank (placement and init:
// nn.Linear's default with the full fan-in of that projection).
reference::MlpWeights gather_weights(Communicator& tp, ParallelMLP& mlp) {
  std::map<std::string, Parameter*> params = parameters_by_name(mlp);
  reference::MlpWeights w;
  for (const Projection& p : projections(mlp.config())) {
    const Init init = Init::linear_default(p.in);
    const uint64_t seed = mlp.config().seed;
    Parameter* weight = params[p.name + ".weight"];
    EXPECT_NE(weight, nullptr) << p.name;
    if (weight == nullptr) continue;  // the same on every rank: no collective is skipped unevenly
    EXPECT_EQ(weight->shard.dim, p.column ? 0 : 1) << p.name;
    EXPECT_EQ(weight->shard.count, tp.size()) << p.name;
    const Tensor full_w = testing::gather_shards(tp, weight->value, p.column ? 0 : 1);
    EXPECT_TRUE(testing::same_bits(
        full_w, testing::full_parameter(p.name + ".weight", {p.out, p.in}, init, seed)))
        << p.name;
    Matrix full_b;
    if (Parameter* bias = mlp.config().bias ? params[p.name + ".bias"] : nullptr) {
      // Column-parallel biases are split with the output rows; the row-parallel
      // one is replicated (added once, after the all-reduce).
      EXPECT_EQ(bias->shard.count, p.column ? tp.size() : 1) << p.name;
      const Tensor b = p.column ? testing::gather_shards(tp, bias->value, 0) : bias->value;
      EXPECT_TRUE(
          testing::same_bits(b, testing::full_parameter(p.name + ".bias", {p.out}, init, seed)))
          << p.name;
      full_b = to_matrix(b);
    }
    const std::string& n = p.name;
    Matrix& dst_w = n.find("gate_proj") != std::string::npos ? w.gate_w
                    : p.column                               ? w.up_w
                                                             : w.down_w;
    Matrix& dst_b = n.find("gate_proj") != std::string::npos ? w.gate_b
                    : p.column                               ? w.up_b
                                                             : w.down_b;
    dst_w = to_matrix(full_w);
    dst_b = full_b;
  }
  return w;
}

// Each rank's slice of the reference gradient of projection p (weight or bias).
Matrix grad_slice(const reference::MlpWeights& grads, const Projection& p, bool bias, int tp_rank,
                  int tp_size) {
  const bool gate = p.name.find("gate_proj") != std::string::npos;
  const Matrix& full = bias ? (gate       ? grads.gate_b
                               : p.column ? grads.up_b
                                          : grads.down_b)
                            : (gate       ? grads.gate_w
                               : p.column ? grads.up_w
                                          : grads.down_w);
  if (bias) return p.column ? block(full, 1, p.out, 1, tp_rank, tp_size) : full;
  return block(full, p.out, p.in, p.column ? 0 : 1, tp_rank, tp_size);
}

// Compares every parameter gradient shard with its slice of the reference.
void expect_grads_within_bound(ParallelMLP& mlp, const reference::MlpResult& ref,
                               const reference::MlpResult& mag, int64_t terms, double factor,
                               int tp_rank, int tp_size) {
  std::map<std::string, Parameter*> params = parameters_by_name(mlp);
  for (const Projection& p : projections(mlp.config())) {
    for (bool bias : {false, true}) {
      if (bias && !mlp.config().bias) continue;
      const std::string name = p.name + (bias ? ".bias" : ".weight");
      Parameter* param = params[name];
      if (param == nullptr) continue;  // reported by parameters_by_name
      expect_within_bound(name + " grad", param->grad,
                          grad_slice(ref.grads, p, bias, tp_rank, tp_size),
                          grad_slice(mag.grads, p, bias, tp_rank, tp_size), terms, factor);
    }
  }
}

// Error bounds: the magnitude companion (reference.h) gives M for every
// output, and each fp32 result lies within 4 gamma_K M of the exact value,
// with K = d_model + ffn + tokens + 16: the longest chain of summed terms
// (forward d_model + 1 then ffn + 1; backward d_model then ffn or tokens),
// plus 16 for the bias adds, the few roundings of each activation formula, the
// fp32 constants sqrt(2/pi) and 0.044715, and libmvec's tanhf/expf (-ffast-math,
// a few ulp: see src/kernels/cpu/activation.cpp).
constexpr double kMlpFactor = 4.0;
constexpr int64_t kActivationUlps = 16;

int64_t mlp_terms(int64_t tokens, int64_t d_model, int64_t ffn) {
  return d_model + ffn + tokens + kActivationUlps;
}

TEST(ParallelMlpTest, MatchesReference) {
  Communicator& tp = world();
  const int tp_rank = tp.rank(), tp_size = tp.size();
  for (Activation activation : {Activation::kGelu, Activation::kGeluErf, Activation::kSwiGlu}) {
    for (bool bias : {true, false}) {
      SCOPED_TRACE(describe(activation, bias));
      ParallelMLP mlp(tp, make_config(activation, bias));
      const reference::MlpWeights w = gather_weights(tp, mlp);
      const Tensor x = testing::random_tensor({kTokens, kModel}, 1);
      const Tensor dy = testing::random_tensor({kTokens, kModel}, 2);

      const Tensor y = mlp.forward(x).clone();
      const Tensor dx = mlp.backward(dy).clone();

      const auto kind = kind_of(activation);
      const auto ref = reference::mlp(kind, w, to_matrix(x), to_matrix(dy), kTokens, kModel, kFfn);
      const auto mag =
          reference::mlp_magnitude(kind, w, to_matrix(x), to_matrix(dy), kTokens, kModel, kFfn);
      const int64_t terms = mlp_terms(kTokens, kModel, kFfn);
      expect_within_bound("y", y, ref.y, mag.y, terms, kMlpFactor);
      expect_within_bound("dx", dx, ref.dx, mag.dx, terms, kMlpFactor);
      expect_grads_within_bound(mlp, ref, mag, terms, kMlpFactor, tp_rank, tp_size);
    }
  }
}

// The bound above is wide (~1e-4 absolute) next to the few-ulp error of the
// activation itself, too wide to tell GELU's tanh form from its erf form
// (they differ by up to 4.7e-4 near |x| = 2.7). Identity projections remove
// the sums: every dot product has one nonzero term, so all GEMMs and the
// all-reduces are exact and y = act(x), dx = act'(x) dy up to the activation's
// own rounding, bounded by 4 gamma_16 M (16 ulps: see above). Inputs in
// [-4, 4) cover the curved part of both activations.
TEST(ParallelMlpTest, IdentityProjectionsExposeTheActivation) {
  Communicator& tp = world();
  const int tp_rank = tp.rank(), tp_size = tp.size();
  constexpr int64_t kWidth = 48;  // d_model = ffn, so the projections can be I
  Tensor identity = Tensor::zeros({kWidth, kWidth});
  for (int64_t i = 0; i < kWidth; ++i) identity(i, i) = 1.0f;
  const Matrix eye = to_matrix(identity);
  for (Activation activation : {Activation::kGelu, Activation::kGeluErf, Activation::kSwiGlu}) {
    SCOPED_TRACE(to_string(activation));
    ParallelMLP mlp(tp, make_config(activation, /*bias=*/false, kWidth, kWidth));
    reference::MlpWeights w;
    std::map<std::string, Parameter*> params = parameters_by_name(mlp);
    for (const Projection& p : projections(mlp.config())) {
      Parameter* weight = params[p.name + ".weight"];
      if (weight == nullptr) continue;  // reported by parameters_by_name
      weight->value.copy_from(identity.shard(p.column ? 0 : 1, tp_rank, tp_size));
    }
    w.up_w = w.down_w = eye;
    if (activation == Activation::kSwiGlu) w.gate_w = eye;
    Tensor x = testing::random_tensor({kTokens, kWidth}, 7);
    for (int64_t i = 0; i < x.numel(); ++i) x.data()[i] *= 4.0f;  // exact
    const Tensor dy = testing::random_tensor({kTokens, kWidth}, 8);

    const Tensor y = mlp.forward(x).clone();
    const Tensor dx = mlp.backward(dy).clone();

    const auto kind = kind_of(activation);
    const auto ref = reference::mlp(kind, w, to_matrix(x), to_matrix(dy), kTokens, kWidth, kWidth);
    const auto mag =
        reference::mlp_magnitude(kind, w, to_matrix(x), to_matrix(dy), kTokens, kWidth, kWidth);
    expect_within_bound("y = act(x)", y, ref.y, mag.y, kActivationUlps, kMlpFactor);
    expect_within_bound("dx = act'(x) dy", dx, ref.dx, mag.dx, kActivationUlps, kMlpFactor);
    // Weight gradients sum over tokens once more.
    expect_grads_within_bound(mlp, ref, mag, kTokens + kActivationUlps, kMlpFactor, tp_rank,
                              tp_size);
  }
}

TEST(ParallelMlpTest, SecondBackwardDoublesTheGradients) {
  Communicator& tp = world();
  const int tp_rank = tp.rank(), tp_size = tp.size();
  for (Activation activation : {Activation::kGelu, Activation::kGeluErf, Activation::kSwiGlu}) {
    SCOPED_TRACE(to_string(activation));
    ParallelMLP mlp(tp, make_config(activation, /*bias=*/true));
    const reference::MlpWeights w = gather_weights(tp, mlp);
    const Tensor x = testing::random_tensor({kTokens, kModel}, 3);
    const Tensor dy = testing::random_tensor({kTokens, kModel}, 4);
    mlp.forward(x);
    mlp.backward(dy);
    const Tensor dx = mlp.backward(dy).clone();

    const auto kind = kind_of(activation);
    auto ref = reference::mlp(kind, w, to_matrix(x), to_matrix(dy), kTokens, kModel, kFfn);
    auto mag =
        reference::mlp_magnitude(kind, w, to_matrix(x), to_matrix(dy), kTokens, kModel, kFfn);
    const int64_t terms = mlp_terms(kTokens, kModel, kFfn);
    // dx is returned, not accumulated: the same as after one call.
    expect_within_bound("dx", dx, ref.dx, mag.dx, terms, kMlpFactor);
    for (reference::MlpWeights* g : {&ref.grads, &mag.grads}) {
      for (Matrix* m : {&g->gate_w, &g->gate_b, &g->up_w, &g->up_b, &g->down_w, &g->down_b}) {
        for (double& v : *m) v *= 2.0;
      }
    }
    // One more addition per element: K + 1 against twice the magnitude.
    expect_grads_within_bound(mlp, ref, mag, terms + 1, kMlpFactor, tp_rank, tp_size);
  }
}

// Central differences of L = sum(y * g), g fixed (y is replicated, so L is the
// same on every rank), against the MLP's backward run with dy = g, for x and
// every parameter element. Two errors:
//  - rounding: each fp32 evaluation of L is off by at most
//    E = 4 gamma_K sum |g| M_y (K as above; M_y the magnitude forward with every
//    input and parameter grown by h, covering any one perturbation), which the
//    difference divides by 2h: E / h.
//  - truncation: h^2 / 6 |L'''|. With m the largest |entry| of x and of the
//    first layer's weights and biases (grown by h, and at least 1) and
//    S = sum_{t,j} |g_tj| sum_f |W_down[j, f]|, one scalar p entering the
//    pre-activations linearly with a coefficient of at most m gives
//      gelu:   |L'''| <= 0.78 m^3 S                (|gelu'''| <= 0.777)
//      swiglu: |L'''| <= (0.31 B + 1.5) m^3 S      (d^3[silu(a) b] =
//              silu''' a'^3 b + 3 silu'' a'^2 b', |silu'''| <= 0.31,
//              |silu''| <= 0.5, B the largest up-projection magnitude)
//    and L is linear in the down projection's weight and bias.
// Step h = 2^-5: the sum E / h + h^2 T / 6 (T the bound on |L'''|) is least
// at h^3 = 3 E / T; here E ~ 4e-5 to 6e-5 and T ~ 6 (gelu) to 13 (swiglu), so
// h ~ 0.02 to 0.03, and the tolerance is ~3e-3 against gradients of order 0.1
// to 1 (the rounding bound is pessimistic: observed errors are ~1e-5). A power
// of two keeps x +- h exact for most inputs, and the step actually applied is
// taken from the stored floats anyway.
TEST(ParallelMlpTest, BackwardMatchesFiniteDifferences) {
  Communicator& tp = world();
  const int tp_rank = tp.rank(), tp_size = tp.size();
  constexpr int64_t kT = 2, kD = 4, kF = 12;
  constexpr float kStep = 0x1p-5f;
  for (Activation activation : {Activation::kGelu, Activation::kGeluErf, Activation::kSwiGlu}) {
    SCOPED_TRACE(to_string(activation));
    ParallelMLP mlp(tp, make_config(activation, /*bias=*/true, kD, kF));
    const reference::MlpWeights w = gather_weights(tp, mlp);
    Tensor x = testing::random_tensor({kT, kD}, 31);
    const Tensor g = testing::random_tensor({kT, kD}, 32);

    auto loss = [&]() {
      const Tensor& y = mlp.forward(x);
      double sum = 0.0;
      for (int64_t t = 0; t < kT; ++t) {
        for (int64_t j = 0; j < kD; ++j) sum += static_cast<double>(y(t, j)) * g(t, j);
      }
      return sum;
    };

    mlp.forward(x);
    const Tensor dx = mlp.backward(g).clone();
    std::vector<Tensor> grads;
    for (Parameter* p : mlp.parameters()) grads.push_back(p->grad.clone());

    // Error terms, from magnitudes with every entry grown by h.
    auto grown = [&](const Matrix& m) {
      Matrix out = reference::abs(m);
      for (double& v : out) v += kStep;
      return out;
    };
    reference::MlpWeights wg;
    for (auto [dst, src] : {std::pair{&wg.gate_w, &w.gate_w},
                            {&wg.gate_b, &w.gate_b},
                            {&wg.up_w, &w.up_w},
                            {&wg.up_b, &w.up_b},
                            {&wg.down_w, &w.down_w},
                            {&wg.down_b, &w.down_b}}) {
      *dst = src->empty() ? Matrix{} : grown(*src);
    }
    const Matrix xg = grown(to_matrix(x)), gm = reference::abs(to_matrix(g));
    const auto kind = kind_of(activation);
    const auto mag = reference::mlp_magnitude(kind, wg, xg, gm, kT, kD, kF);
    double loss_error = 0.0;
    for (size_t i = 0; i < gm.size(); ++i) loss_error += gm[i] * mag.y[i];
    loss_error *= kMlpFactor * reference::gamma(mlp_terms(kT, kD, kF));

    double m = 1.0;
    for (const Matrix* v :
         std::initializer_list<const Matrix*>{&xg, &wg.gate_w, &wg.gate_b, &wg.up_w, &wg.up_b}) {
      for (double e : *v) m = std::max(m, e);
    }
    double s = 0.0;
    for (int64_t t = 0; t < kT; ++t) {
      for (int64_t j = 0; j < kD; ++j) {
        for (int64_t f = 0; f < kF; ++f) s += gm[t * kD + j] * std::fabs(w.down_w[j * kF + f]);
      }
    }
    double third = 0.78 * m * m * m * s;
    if (activation == Activation::kSwiGlu) {
      const Matrix up_mag = reference::linear_forward(xg, wg.up_w, wg.up_b, kT, kD, kF);
      const double b_max = *std::max_element(up_mag.begin(), up_mag.end());
      third = (0.31 * b_max + 1.5) * m * m * m * s;
    }
    const double fd_error = loss_error / kStep + kStep * kStep / 6.0 * third;
    const auto back_mag = reference::mlp_magnitude(kind, w, to_matrix(x), gm, kT, kD, kF);
    const double grad_scale = kMlpFactor * reference::gamma(mlp_terms(kT, kD, kF));

    auto central_difference = [&](float& value, bool active) {
      const float original = value;
      const float plus = original + kStep, minus = original - kStep;
      if (active) value = plus;
      const double l_plus = loss();
      if (active) value = minus;
      const double l_minus = loss();
      value = original;
      return (l_plus - l_minus) / (static_cast<double>(plus) - minus);
    };

    // x is replicated: perturb it on every rank at once.
    for (int64_t i = 0; i < x.numel(); ++i) {
      const double fd = central_difference(x.data()[i], true);
      EXPECT_NEAR(dx.data()[i], fd, fd_error + grad_scale * back_mag.dx[i]) << "dx[" << i << "]";
    }
    // Sharded parameters: one element of one rank's shard at a time. The
    // replicated down/c_proj bias: on every rank at once. The analytic error
    // term uses the largest gradient magnitude of the tensor (a plain bound).
    double grad_mag = 0.0;
    for (const Matrix* v : {&back_mag.grads.gate_w, &back_mag.grads.gate_b, &back_mag.grads.up_w,
                            &back_mag.grads.up_b, &back_mag.grads.down_w, &back_mag.grads.down_b}) {
      for (double e : *v) grad_mag = std::max(grad_mag, e);
    }
    const std::vector<Parameter*> params = mlp.parameters();
    for (size_t k = 0; k < params.size(); ++k) {
      Parameter& p = *params[k];
      const bool replicated = p.shard.count == 1;
      for (int r = 0; r < (replicated ? 1 : tp_size); ++r) {
        const bool mine = replicated || r == tp_rank;
        for (int64_t i = 0; i < p.value.numel(); ++i) {
          const double fd = central_difference(p.value.data()[i], mine);
          if (mine) {
            EXPECT_NEAR(grads[k].data()[i], fd, fd_error + grad_scale * grad_mag)
                << p.name << " shard " << r << " [" << i << "]";
          }
        }
      }
    }
  }
}

// Exactly one all_reduce_sum of [tokens, d_model] forward (the row-parallel
// output) and one backward (dx, summed once over swiglu's two branches),
// whatever the activation and bias.
TEST(ParallelMlpTest, IssuesOneAllReduceEachWay) {
  RecordingCommunicator tp(world());
  for (Activation activation : {Activation::kGelu, Activation::kGeluErf, Activation::kSwiGlu}) {
    for (bool bias : {true, false}) {
      SCOPED_TRACE(describe(activation, bias));
      ParallelMLP mlp(tp, make_config(activation, bias));
      EXPECT_TRUE(tp.events().empty()) << "construction communicates";
      const Tensor x = testing::random_tensor({kTokens, kModel}, 5);
      const Tensor dy = testing::random_tensor({kTokens, kModel}, 6);
      const std::vector<CollectiveEvent> one_all_reduce{{"all_reduce_sum", kTokens * kModel, 0.0}};

      tp.clear();
      mlp.forward(x);
      EXPECT_EQ(tp.events(), one_all_reduce) << "forward";
      tp.clear();
      mlp.backward(dy);
      EXPECT_EQ(tp.events(), one_all_reduce) << "backward";
      tp.clear();
    }
  }
}

TEST(ParallelMlpTest, ForwardFlopsCountEveryProjection) {
  ParallelMLP gelu(world(), make_config(Activation::kGelu, true));
  ParallelMLP swiglu(world(), make_config(Activation::kSwiGlu, true));
  EXPECT_EQ(gelu.forward_flops(kTokens), 2.0 * 2.0 * kTokens * kModel * kFfn);
  EXPECT_EQ(swiglu.forward_flops(kTokens), 3.0 * 2.0 * kTokens * kModel * kFfn);
}

// validate() is pure: the same answer on every rank for any tp, world size or not.
TEST(ParallelMlpTest, ValidateAcceptsEveryDivisorOfFfn) {
  const MlpConfig config = make_config(Activation::kSwiGlu, false, 24, 48);
  for (int tp : {1, 2, 3, 4, 6, 8, 12, 16, 24, 48}) {
    EXPECT_NO_THROW(validate(config, tp)) << "tp " << tp;
  }
}

// Runs `fn`, expecting a ConfigError whose message is exactly `expected`.
template <typename Fn>
void expect_config_error(Fn&& fn, const std::string& expected) {
  try {
    fn();
    ADD_FAILURE() << "no ConfigError; expected: " << expected;
  } catch (const ConfigError& e) {
    EXPECT_EQ(std::string(e.what()), expected);
  } catch (const std::exception& e) {
    ADD_FAILURE() << "expected ConfigError, got: " << e.what();
  }
}

TEST(ParallelMlpTest, ValidateNamesTheFieldAndTheValidTp) {
  const MlpConfig config = make_config(Activation::kGelu, true, 24, 48);
  expect_config_error([&] { validate(config, 5); },
                      "[mlp] ffn_hidden_size (48) must be divisible by tp (5). "
                      "Choose tp in {1, 2, 3, 4, 6, 8, 12, 16, 24, 48}.");
  expect_config_error([&] { validate(make_config(Activation::kGelu, true, 24, 32), 3); },
                      "[mlp] ffn_hidden_size (32) must be divisible by tp (3). "
                      "Choose tp in {1, 2, 4, 8, 16, 32}.");
  expect_config_error([&] { validate(make_config(Activation::kGelu, true, 0, 48), 1); },
                      "[mlp] d_model (0) and ffn_hidden_size (48) must be positive.");
  expect_config_error([&] { validate(make_config(Activation::kSwiGlu, true, 24, -4), 1); },
                      "[mlp] d_model (24) and ffn_hidden_size (-4) must be positive.");
}

TEST(ParallelMlpTest, ActivationNamesRoundTrip) {
  for (Activation a : {Activation::kGelu, Activation::kSwiGlu}) {
    EXPECT_EQ(parse_activation(to_string(a)), a);
  }
  EXPECT_STREQ(to_string(Activation::kGelu), "gelu");
  EXPECT_STREQ(to_string(Activation::kSwiGlu), "swiglu");
  expect_config_error([] { parse_activation("relu"); },
                      "[mlp] activation (relu) must be one of {gelu, gelu-erf, swiglu}.");
}

// Constructing at a tp that does not divide ffn: every rank throws the MLP's
// own ConfigError (not a projection's), before any parameter exists and before
// any collective, so nothing can hang.
TEST(ParallelMlpTest, FfnNotDivisibleByTpIsAConfigErrorOnEveryRank) {
  Communicator& tp = world();
  if (tp.size() == 1) GTEST_SKIP() << "every size is divisible by tp = 1";
  const BadSize* bad = bad_size_for(tp.size());
  if (bad == nullptr) GTEST_SKIP() << "no bad size listed for tp = " << tp.size();
  const std::string expected = "[mlp] ffn_hidden_size (" + std::to_string(bad->value) +
                               ") must be divisible by tp (" + std::to_string(tp.size()) +
                               "). Choose tp in " + bad->choices + ".";
  for (Activation activation : {Activation::kGelu, Activation::kGeluErf, Activation::kSwiGlu}) {
    SCOPED_TRACE(to_string(activation));
    expect_config_error(
        [&] { ParallelMLP mlp(tp, make_config(activation, true, kModel, bad->value)); }, expected);
  }
  // d_model is never split: an odd one is fine.
  ParallelMLP odd_model(tp, make_config(Activation::kGelu, true, kModel + 1, kFfn));
  tp.barrier();  // every rank got here
}

}  // namespace
}  // namespace colrow
