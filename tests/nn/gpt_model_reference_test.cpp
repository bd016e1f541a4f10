// GptModel at tp = world size against an independent double-precision
// reference of the whole model (support/gpt_reference.h, which shares no code
// with colrow): the loss of every token and every rank's shard of every
// parameter gradient; gpt2 (tied head, biases, learned positions; tanh or
// exact GELU) and llama with grouped, multi-query and (at tp 4) replicated
// key/value heads, RoPE scaled as llama3 and linear, biases as llama's flags
// and qwen2 have them, and mistral's and qwen2's sliding windows; with a
// vocabulary that needs padding and a few ignored targets. For the features a
// small error could hide (rope scaling, the window, the GELU form), each case
// also checks that the reference of the nearest wrong model (window off by
// one, another rope band, the tanh GELU) misses the test's own bounds, so the
// test cannot pass with the feature ignored or misplaced.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "colrow/core/error.h"
#include "colrow/nn/gpt_model.h"
#include "colrow/nn/rope_scaling.h"
#include "nn/model_test_cases.h"
#include "support/attention_reference.h"
#include "support/gpt_reference.h"
#include "support/test_world.h"

namespace colrow {
namespace {

using reference::Matrix;
using reference::NamedTensors;
using testing::random_ids;
using testing::valid_at;
using testing::world;

constexpr uint64_t kSeed = 11;
constexpr int64_t kBatch = 2, kSeq = 8;
constexpr int32_t kIgnoreIndex = -100;

ModelConfig gpt2_config() {
  ModelConfig c = model_preset("gpt2-tiny");
  c.n_layer = 2;
  c.n_head = c.n_kv_head = 12;
  c.d_model = 48;
  c.head_dim = 4;
  c.ffn_hidden_size = 96;
  c.vocab_size = 300;  // pads to 384, 512, 384, 512 at tp 1..4
  c.max_position_embeddings = 16;
  return c;
}

ModelConfig llama_config(int n_head, int n_kv_head, bool tied, int64_t head_dim = 4) {
  ModelConfig c = model_preset("llama-tiny");
  c.n_layer = 2;
  c.n_head = n_head;
  c.n_kv_head = n_kv_head;
  c.d_model = 48;
  c.head_dim = head_dim;  // n_head x head_dim need not be d_model (HF's head_dim)
  c.ffn_hidden_size = 96;
  c.vocab_size = 300;
  c.max_position_embeddings = 16;
  c.tie_word_embeddings = tied;
  return c;
}

// head_dim 8 and theta 10^4: inv_freq = 10^4^(-2i/8) = {1, 0.1, 0.01, 0.001},
// wavelengths 2 pi / inv_freq = {6.28, 62.8, 628, 6283}. With factor 8,
// low_freq_factor 1, high_freq_factor 4 and original_max_position_embeddings
// 128: low_freq_wavelen = 128 / 1 = 128, high_freq_wavelen = 128 / 4 = 32, so
//   i = 0: 6.28 < 32          kept      inv_freq 1
//   i = 1: 32 <= 62.8 <= 128  smoothed  smooth = (128 / 62.83 - 1) / 3 = 0.346,
//                                       0.654 x 0.1 / 8 + 0.346 x 0.1 = 0.0428
//   i = 2, 3: > 128           scaled    0.01 / 8, 0.001 / 8
// every band of the formula. (original 64 would put 62.8 in the band too, but
// only just: smooth = 0.006, and the smoothed frequency would be within 2% of
// the scaled one -- a model that scaled it would still pass. 128 puts it in
// the middle, and the band's alternatives below check it is told apart.)
ModelConfig llama3_rope_config() {
  ModelConfig c = llama_config(12, 12, false, 8);
  c.rope_theta = 10000.0;
  c.rope_scaling.type = RopeType::kLlama3;
  c.rope_scaling.factor = 8.0;
  c.rope_scaling.low_freq_factor = 1.0;
  c.rope_scaling.high_freq_factor = 4.0;
  c.rope_scaling.original_max_position_embeddings = 128;
  return c;
}

ModelConfig linear_rope_config() {
  ModelConfig c = llama_config(12, 4, true, 8);
  c.rope_scaling.type = RopeType::kLinear;
  c.rope_scaling.factor = 4.0;
  return c;
}

ModelConfig llama_biases_config() {
  ModelConfig c = llama_config(12, 2, false);  // tp 4: replicated KV heads with their biases
  c.model_type = "llama";
  c.attention_qkv_bias = c.attention_output_bias = c.mlp_bias = true;
  return c;
}

ModelConfig qwen2_config(int n_kv_head, bool tied) {
  ModelConfig c = llama_config(12, n_kv_head, tied);
  c.model_type = "qwen2";
  c.attention_qkv_bias = true;
  c.attention_output_bias = c.mlp_bias = false;
  return c;
}

ModelConfig mistral_window_config() {
  ModelConfig c = llama_config(12, 4, false);
  c.model_type = "mistral";
  c.sliding_window = 3;  // < kSeq: positions 3..7 lose their first keys
  c.max_window_layers = 0;
  return c;
}

ModelConfig qwen2_window_upper_layers_config() {
  ModelConfig c = qwen2_config(12, false);
  c.sliding_window = 3;
  c.max_window_layers = 1;  // layer 0 attends fully, layer 1 within the window
  return c;
}

ModelConfig gpt2_gelu_exact_config() {
  ModelConfig c = gpt2_config();
  c.gelu_exact = true;
  return c;
}

// A model close to the case's but wrong in the feature under test: the test
// requires that its reference misses the test's bounds by at least `margin`
// (max over token losses and gradient tensors of difference / bound).
struct Alternative {
  const char* what;
  std::function<void(reference::GptSpec&)> change;
  double margin;
};

struct Case {
  const char* name;
  ModelConfig config;
  std::vector<Alternative> alternatives = {};
};

// Alternatives one bound apart already fail the test; rope and window ones are
// required to miss by 10x (they miss by hundreds). The tanh GELU differs from
// the exact one by at most 4.7e-4 in value and 8.7e-4 in slope (near |z| = 2),
// about the size of the gradient bound (3e-4 of a tensor's largest entry), so
// no whole-model test at these bounds tells them apart by a wide margin: it
// is required to miss by 1x (an fp32 model errs by ~1e-6 of the scales, far
// below that, so computing tanh would still fail).
std::vector<Case> cases() {
  const auto rope_type = [](const char* type) {
    return [type](reference::GptSpec& s) { s.rope_type = type; };
  };
  const auto original = [](int64_t n) {
    return [n](reference::GptSpec& s) { s.original_max_position_embeddings = n; };
  };
  const auto window = [](int64_t w) {
    return [w](reference::GptSpec& s) { s.sliding_window = w; };
  };
  return {
      {"gpt2", gpt2_config()},
      {"llama_gqa", llama_config(12, 6, false)},      // groups of 2; tp 4 invalid
      {"llama_mqa_tied", llama_config(12, 1, true)},  // one KV head on every rank
      {"llama_replicated_kv",
       llama_config(12, 2, false)},  // tp 4: each KV head on 2 ranks; tp 3 invalid
      {"llama_rope_llama3",
       llama3_rope_config(),
       {{"unscaled rope", rope_type("default"), 10.0},
        {"every band scaled (linear)", rope_type("linear"), 10.0},
        // original 60: 62.8 > 60 is scaled, 6.28 < 15 kept: only band 1 changes.
        {"band 1 scaled, not smoothed", original(60), 10.0},
        // original 256: 62.8 < 64 is kept, 628 > 256 scaled: only band 1 changes.
        {"band 1 kept, not smoothed", original(256), 10.0}}},
      {"llama_rope_linear", linear_rope_config(), {{"unscaled rope", rope_type("default"), 10.0}}},
      {"llama_biases", llama_biases_config()},
      {"qwen2", qwen2_config(6, true)},  // tp 4 invalid
      {"mistral_window",
       mistral_window_config(),
       {{"no window", window(0), 10.0},
        {"window 2 (one key fewer)", window(2), 10.0},
        {"window 4 (one key more)", window(4), 10.0}}},
      {"qwen2_window_upper_layers",
       qwen2_window_upper_layers_config(),
       {{"no window", window(0), 10.0},
        {"window in every layer", [](reference::GptSpec& s) { s.max_window_layers = 0; }, 10.0},
        {"window 4 (one key more)", window(4), 10.0}}},
      {"gpt2_gelu_exact",
       gpt2_gelu_exact_config(),
       {{"tanh GELU", [](reference::GptSpec& s) { s.gelu_exact = false; }, 1.0}}},
  };
}

reference::GptSpec spec_of(const ModelConfig& c) {
  reference::GptSpec s;
  s.llama = c.family == ModelFamily::kLlama;
  s.vocab_size = c.vocab_size;
  s.d_model = c.d_model;
  s.head_dim = c.head_dim;
  s.ffn_hidden_size = c.ffn_hidden_size;
  s.n_layer = c.n_layer;
  s.n_head = c.n_head;
  s.n_kv_head = c.n_kv_head;
  s.norm_eps = c.norm_eps;
  s.rope_theta = c.rope_theta;
  s.rope_type = to_string(c.rope_scaling.type);  // HF's rope_type names
  s.rope_factor = c.rope_scaling.factor;
  s.low_freq_factor = c.rope_scaling.low_freq_factor;
  s.high_freq_factor = c.rope_scaling.high_freq_factor;
  s.original_max_position_embeddings = c.rope_scaling.original_max_position_embeddings;
  s.tie_word_embeddings = c.family == ModelFamily::kGpt2 || c.tie_word_embeddings;
  s.qkv_bias = c.attention_qkv_bias;
  s.output_bias = c.attention_output_bias;
  s.mlp_bias = c.mlp_bias;
  s.gelu_exact = c.gelu_exact;
  s.sliding_window = c.sliding_window;
  s.max_window_layers = c.max_window_layers;
  return s;
}

// The rows x columns of the full tensor (a vector is [n, 1]) that a shard holds.
struct Block {
  int64_t row0, rows, col0, cols, full_rows, full_cols;
};
Block block_of(const ShardSpec& s) {
  const Shape local = s.local_shape();
  Block b{0,
          local[0],
          0,
          local.size() == 2 ? local[1] : 1,
          s.full_shape[0],
          s.full_shape.size() == 2 ? s.full_shape[1] : 1};
  (s.dim == 0 ? b.row0 : b.col0) = s.offset_along_dim();
  return b;
}

// The full value of a parameter from every rank's shard: one all_gather of the
// shards (equal shapes on every rank) and one of the shard indices. A block
// held by several ranks (replicated, or a replicated KV head) must be the same
// on all of them. Rows at or beyond `rows` (vocab padding) are dropped.
Matrix gather_full(Communicator& tp, const Parameter& p, int64_t rows) {
  const Tensor local = p.value.is_contiguous() ? p.value : p.value.clone();
  const int64_t n = local.numel(), size = tp.size();
  Tensor shards = Tensor::empty({size, n});
  tp.all_gather(local.view({1, n}), shards);
  Tensor indices = Tensor::empty({size});
  tp.all_gather(Tensor::from_vector({1}, {static_cast<float>(p.shard.index)}), indices);
  Block b = block_of(p.shard);
  Matrix full(b.full_rows * b.full_cols, std::nan(""));
  const std::vector<float> all = shards.to_vector(), index = indices.to_vector();
  for (int64_t r = 0; r < size; ++r) {
    ShardSpec s = p.shard;
    s.index = static_cast<int>(index[r]);
    b = block_of(s);
    for (int64_t i = 0; i < b.rows; ++i) {
      for (int64_t j = 0; j < b.cols; ++j) {
        double& dst = full[(b.row0 + i) * b.full_cols + b.col0 + j];
        const double got = all[r * n + i * b.cols + j];
        EXPECT_TRUE(std::isnan(dst) || dst == got) << p.name << ": replicas differ";
        dst = got;
      }
    }
  }
  full.resize(std::min(rows, b.full_rows) * b.full_cols);
  for (double e : full) EXPECT_FALSE(std::isnan(e)) << p.name << ": a block no rank holds";
  return full;
}

// Writes the full value `full` (already exact in fp32) into my shard.
void scatter_full(const Matrix& full, Parameter& p) {
  const Block b = block_of(p.shard);
  float* dst = p.value.data();
  for (int64_t i = 0; i < b.rows && b.row0 + i < static_cast<int64_t>(full.size()) / b.full_cols;
       ++i) {
    for (int64_t j = 0; j < b.cols; ++j) {
      dst[i * b.cols + j] = static_cast<float>(full[(b.row0 + i) * b.full_cols + b.col0 + j]);
    }
  }
}

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() &&
         s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}
bool is_vocab(const std::string& name) {
  return name == "wte.weight" || name == "model.embed_tokens.weight" || name == "lm_head.weight";
}
bool is_norm(const std::string& name) {
  return name.find("ln_") != std::string::npos || name.find("norm") != std::string::npos;
}

// The model's initialization (biases 0, norm weights 1, weights N(0, 0.02))
// leaves biases and norm scales untested and attention nearly uniform. So,
// the same on every rank: biases U(-0.5, 0.5), norm weights 1 + U(-0.5, 0.5),
// and the projection weights times 8 (exact in fp32); embeddings stay.
void perturb(const std::string& name, Matrix& full, std::mt19937_64& gen) {
  std::uniform_real_distribution<float> u(-0.5f, 0.5f);
  if (is_norm(name) && ends_with(name, ".weight")) {
    for (double& e : full) e = static_cast<double>(1.0f + u(gen));
  } else if (ends_with(name, ".bias")) {
    for (double& e : full) e = static_cast<double>(u(gen));
  } else if (!is_vocab(name) && name != "wpe.weight") {
    for (double& e : full) e *= 8.0;
  }
}

// The test's bounds, derived in the error budget below: token losses within
// kLossRelative of the mean loss; a gradient tensor within kGradRelative of
// its largest entry plus kGradFloor of the model's largest gradient.
constexpr double kLossRelative = 3e-5, kGradRelative = 3e-4, kGradFloor = 3e-5;

double max_abs(const Matrix& m) {
  double scale = 0.0;
  for (double e : m) scale = std::max(scale, std::fabs(e));
  return scale;
}

double model_scale_of(const reference::GptReferenceResult& ref) {
  double scale = 0.0;
  for (const auto& [name, g] : ref.grads) scale = std::max(scale, max_abs(g));
  return scale;
}

// How far `other` lies from `ref` in units of the test's bounds (around ref):
// the largest of |token loss difference| / loss bound and, per gradient
// element, |difference| / its tensor's bound. Above 1, a model computing
// `other` exactly fails the test.
double distance_in_bounds(const reference::GptReferenceResult& ref,
                          const reference::GptReferenceResult& other, std::string* where) {
  double worst = 0.0;
  const double loss_bound = kLossRelative * std::fabs(ref.mean);
  for (size_t t = 0; t < ref.losses.size(); ++t) {
    const double d = std::fabs(ref.losses[t] - other.losses[t]) / loss_bound;
    if (d > worst) {
      worst = d;
      *where = "loss of token " + std::to_string(t);
    }
  }
  const double model_scale = model_scale_of(ref);
  for (const auto& [name, g] : ref.grads) {
    const auto it = other.grads.find(name);
    if (it == other.grads.end()) continue;  // a parameter of one model only
    const double bound = kGradRelative * max_abs(g) + kGradFloor * model_scale;
    for (size_t i = 0; i < g.size(); ++i) {
      const double d = std::fabs(g[i] - it->second[i]) / bound;
      if (d > worst) {
        worst = d;
        *where = "gradient of " + name;
      }
    }
  }
  return worst;
}

TEST(GptModelReferenceTest, LossAndEveryGradientShardMatchDoubleReference) {
  Communicator& tp = world();
  for (const Case& c : cases()) {
    SCOPED_TRACE(c.name);
    if (!valid_at(c.config, tp.size())) {
      // llama_gqa and qwen2 at tp 4 (6 KV heads neither divide by nor
      // replicate to 4), llama_replicated_kv, llama_rope_linear,
      // llama_biases and mistral_window at tp 3 (2 or 4 KV heads):
      // validate() rejects them (ConfigError).
      if (tp.rank() == 0)
        std::printf("note: %s skipped at tp %d (invalid configuration)\n", c.name, tp.size());
      continue;
    }
    GptModel model(tp, c.config, kSeed);
    NamedTensors params;
    std::mt19937_64 gen(5);
    for (Parameter* p : model.parameters()) {
      Matrix full = gather_full(tp, *p, c.config.vocab_size);
      perturb(p->name, full, gen);
      scatter_full(full, *p);
      params[p->name] = full;
    }
    const std::vector<int32_t> ids = random_ids(1, kBatch * kSeq, c.config.vocab_size);
    std::vector<int32_t> targets = random_ids(2, kBatch * kSeq, c.config.vocab_size);
    targets[3] = targets[kSeq + 5] = kIgnoreIndex;

    const CrossEntropyOutput out = model.forward(ids, targets, kBatch, kSeq);
    model.backward();
    const reference::GptReferenceResult ref =
        reference::gpt_forward_backward(spec_of(c.config), params, ids, targets, kBatch, kSeq);

    // Error budget, u = 2^-24 = 6e-8. Each stage of the model sums K products
    // in fp32 and so errs by at most gamma_K ~ K u times the sum of their
    // magnitudes (Higham eq. 3.5): K = d_model (48) for the norms, q/k/v/o and
    // up/gate projections and their input gradients, ffn (96) for the down
    // projection, head_dim (4) and seq (8) inside attention, tokens (16) for
    // every weight gradient, and the vocabulary (300) only in the head and the
    // loss. Forward and backward pass through about 40 stages (2 blocks x 8
    // each way, plus embedding, final norm, head and loss): at most
    // ~30 x 96 u + 4 x 300 u ~ 2.5e-4 of the magnitudes, to first order (the
    // norms rescale errors and values alike; activations pass errors on with
    // gains near 1). The largest entries of each tensor are where magnitudes
    // and values are of one size, so:
    //   gradients: 3e-4 of the tensor's largest reference entry, plus a floor
    //              of 3e-5 of the model's largest gradient for tensors that are
    //              (nearly) zero in exact arithmetic -- the key bias shifts all
    //              scores of a query equally, softmax ignores it, and its fp32
    //              gradient is rounding of the size of the other gradients;
    //   losses:    3e-5 of the mean loss (the loss stages add 300 u each to
    //              logits of order 1; the loss is ~6).
    // Observed: ~1e-6 of each scale. A wrong reduction, a misplaced shard or a
    // missing term is an O(1) error; a 1% change of rope_theta in the
    // reference already exceeds these bounds.
    // (kLossRelative, kGradRelative, kGradFloor above.)
    //
    // The features a small error could hide: the reference of each nearest
    // wrong model (Case::alternatives) must miss these bounds, by its margin.
    const reference::GptSpec spec = spec_of(c.config);
    for (const Alternative& a : c.alternatives) {
      reference::GptSpec other = spec;
      a.change(other);
      std::string where;
      const double distance = distance_in_bounds(
          ref, reference::gpt_forward_backward(other, params, ids, targets, kBatch, kSeq), &where);
      EXPECT_GE(distance, a.margin) << "the reference with " << a.what
                                    << " is within the test's bounds: the test cannot tell it "
                                       "apart (closest at "
                                    << where << ")";
      if (tp.rank() == 0)
        std::printf("%s tp %d: with %s the reference misses the bounds by %.3g (%s)\n", c.name,
                    tp.size(), a.what, distance, where.c_str());
    }

    ASSERT_EQ(out.counted, ref.counted);
    EXPECT_NEAR(out.mean(), ref.mean, kLossRelative * std::fabs(ref.mean));
    const std::vector<float> losses = out.losses.to_vector();
    ASSERT_EQ(losses.size(), ref.losses.size());
    for (size_t t = 0; t < losses.size(); ++t) {
      EXPECT_NEAR(losses[t], ref.losses[t], kLossRelative * std::fabs(ref.mean)) << "token " << t;
    }

    const double model_scale = model_scale_of(ref);
    const std::vector<Parameter*> mine = model.parameters();
    EXPECT_EQ(mine.size(), ref.grads.size());
    double worst = 0.0;
    std::string worst_name;
    for (Parameter* p : mine) {
      SCOPED_TRACE(p->name);
      const auto it = ref.grads.find(p->name);
      ASSERT_NE(it, ref.grads.end()) << "the reference has no gradient named " << p->name;
      const Matrix& full = it->second;
      if (p->name.find("k_proj.weight") != std::string::npos) {  // the layout under test
        const int kv_count = c.config.n_kv_head < tp.size() ? c.config.n_kv_head : tp.size();
        EXPECT_EQ(p->shard.count, kv_count);
      }
      const Block b = block_of(p->shard);
      const int64_t real_rows = static_cast<int64_t>(full.size()) / b.full_cols;
      ASSERT_EQ(real_rows, is_vocab(p->name) ? c.config.vocab_size : b.full_rows);
      const double scale = max_abs(full);
      const double bound = kGradRelative * scale + kGradFloor * model_scale;
      const Tensor grad = p->grad.is_contiguous() ? p->grad : p->grad.clone();
      const float* g = grad.data();
      double err = 0.0;
      int64_t padded_nonzero = 0;
      for (int64_t i = 0; i < b.rows; ++i) {
        for (int64_t j = 0; j < b.cols; ++j) {
          const double got = g[i * b.cols + j];
          if (b.row0 + i >= real_rows) {  // vocab padding: never a probability, never a gradient
            padded_nonzero += got != 0.0;
            continue;
          }
          err = std::max(err, std::fabs(got - full[(b.row0 + i) * b.full_cols + b.col0 + j]));
        }
      }
      EXPECT_EQ(padded_nonzero, 0);
      EXPECT_LE(err, bound) << "scale " << scale << ", model scale " << model_scale;
      if (err / bound > worst) {
        worst = err / bound;
        worst_name = p->name;
      }
    }
    if (tp.rank() == 0)
      std::printf(
          "%s tp %d: loss %.6f (reference %.6f), worst gradient error %.3g of its bound (%s)\n",
          c.name, tp.size(), out.mean(), ref.mean, worst, worst_name.c_str());
  }
}

// The llama3 case's frequencies fall in the bands its comment says (so the
// whole-model case exercises all three), and colrow's table of them is the
// reference's: both are computed in double from the same formulas, so a few
// ulp apart (1e-14 relative), while any misplaced band or term is off by
// percents.
TEST(GptModelReferenceTest, RopeInverseFrequenciesMatchReference) {
  for (const ModelConfig& c : {llama3_rope_config(), linear_rope_config()}) {
    const reference::GptSpec s = spec_of(c);
    SCOPED_TRACE(s.rope_type);
    reference::RopeScalingSpec scaling;
    scaling.type = s.rope_type;
    scaling.factor = s.rope_factor;
    scaling.low_freq_factor = s.low_freq_factor;
    scaling.high_freq_factor = s.high_freq_factor;
    scaling.original_max_position_embeddings = s.original_max_position_embeddings;
    const std::vector<double> ref = reference::rope_inv_freq(s.head_dim, s.rope_theta, scaling);
    const std::vector<double> got =
        rope_inverse_frequencies(c.head_dim, c.rope_theta, c.rope_scaling);
    ASSERT_EQ(got.size(), ref.size());
    for (size_t i = 0; i < ref.size(); ++i) {
      EXPECT_NEAR(got[i], ref[i], 1e-14 * ref[i]) << "frequency " << i;
    }
    ASSERT_EQ(ref.size(), 4u);
    const double unscaled[4] = {1.0, 0.1, 0.01, 0.001};
    if (s.rope_type == "linear") {
      for (int i = 0; i < 4; ++i) EXPECT_NEAR(ref[i], unscaled[i] / 4.0, 1e-14 * ref[i]);
      continue;
    }
    EXPECT_NEAR(ref[0], 1.0, 1e-14);                         // kept
    EXPECT_GT(ref[1], 1.2 * unscaled[1] / 8.0);              // smoothed: 0.0428, well between
    EXPECT_LT(ref[1], 0.8 * unscaled[1]);                    //   0.0125 and 0.1
    EXPECT_NEAR(ref[2], unscaled[2] / 8.0, 1e-14 * ref[2]);  // scaled
    EXPECT_NEAR(ref[3], unscaled[3] / 8.0, 1e-14 * ref[3]);  // scaled
  }
}

}  // namespace
}  // namespace colrow
