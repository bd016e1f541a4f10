// ParallelAttention at tp = world size against the unsharded double reference
// (support/attention_reference): output, dx and every rank's parameter and
// gradient shard for GPT-2-style MHA with biases, LLaMA-style GQA with RoPE,
// MQA and replicated KV heads (tp > n_kv_head), with an explicit head_dim,
// batch 2 so that sequence boundaries count. Error bounds are the reference's
// rigorous fp32 bounds (see attention_reference.h). Also: gradient
// accumulation over two backward calls, central differences of the whole
// layer, the exact collectives each way (replica all-reduces included),
// buffer reuse, validate() messages and ConfigErrors on every rank.
#include "colrow/nn/parallel_attention.h"

#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <string>
#include <vector>

#include "colrow/core/error.h"
#include "colrow/dist/recording_communicator.h"
#include "nn/layer_test_helpers.h"
#include "support/attention_reference.h"
#include "support/test_world.h"

namespace colrow {
namespace {

using reference::BMatrix;
using reference::check_within;
using reference::Matrix;
using testing::random_tensor;
using testing::same_bits;
using testing::to_matrix;
using testing::world;

constexpr double kU = reference::kUnitRoundoff;

struct Case {
  std::string what;
  AttentionConfig config;
  int64_t batch = 2, seq = 5;
};

AttentionConfig make_config(int64_t d_model, int n_head, int n_kv_head, int64_t head_dim, bool bias,
                            bool rope, double theta = 10000.0) {
  AttentionConfig c;
  c.name = "model.layers.0.self_attn";
  c.d_model = d_model;
  c.n_head = n_head;
  c.n_kv_head = n_kv_head;
  c.head_dim = head_dim;
  c.qkv_bias = c.output_bias = bias;
  c.rope = rope;
  c.rope_theta = theta;
  c.seed = 1234;
  return c;
}

// Qwen2's layout: biases on q, k and v, none on o_proj.
AttentionConfig qkv_bias_only(AttentionConfig c) {
  c.output_bias = false;
  return c;
}

bool valid_at(const AttentionConfig& c, int tp) {
  try {
    validate(c, tp);
    return true;
  } catch (const ConfigError&) {
    return false;
  }
}

// 12 query heads (split at tp 1, 2, 3, 4); KV heads split, grouped, shared
// by all (MQA) or replicated (2 KV heads at tp 4; 1 at every tp > 1).
// Cases invalid at this tp (e.g. 4 KV heads at tp 3) are left out.
std::vector<Case> cases(int tp) {
  std::vector<Case> all{
      {"gpt2: MHA, biases, no rope", make_config(48, 12, 0, 0, true, false)},
      {"llama: GQA 12/4, rope", make_config(48, 12, 4, 0, false, true)},
      {"llama: GQA 12/6, rope", make_config(48, 12, 6, 0, false, true)},
      {"llama: GQA 12/3, rope theta 5e5", make_config(48, 12, 3, 0, false, true, 500000.0)},
      {"MQA 12/1, rope, biases", make_config(48, 12, 1, 0, true, true)},
      {"qwen2: GQA 12/4, rope, q/k/v biases only",
       qkv_bias_only(make_config(48, 12, 4, 0, true, true))},
      {"GQA 12/2, rope (replicated at tp 4)", make_config(48, 12, 2, 0, false, true)},
      {"explicit head_dim 6 != 40 / 12, GQA 12/12, rope, biases",
       make_config(40, 12, 12, 6, true, true)},
  };
  std::vector<Case> out;
  for (const Case& c : all) {
    if (valid_at(c.config, tp)) out.push_back(c);
  }
  return out;
}

int kv_heads(const AttentionConfig& c) {
  return c.n_kv_head == 0 ? c.n_head : c.n_kv_head;
}
int64_t head_dim(const AttentionConfig& c) {
  return c.head_dim == 0 ? c.d_model / c.n_head : c.head_dim;
}

// One parameter as the test expects it, derived from the design (not from
// the library): name, full shape, split dim, the part this rank holds, fan-in.
struct Expected {
  std::string name;
  Shape full;
  int dim, index, count;
  int64_t fan_in;
};

std::vector<Expected> expected_parameters(const AttentionConfig& c, int tp_rank, int tp_size) {
  const int64_t d = c.d_model, hd = head_dim(c), nkv = kv_heads(c);
  const int64_t wq = c.n_head * hd, wk = nkv * hd;
  // Split KV heads: block tp_rank of tp. Replicated (tp > nkv): the KV head
  // this rank's query heads read, tp_rank / (tp / nkv), of nkv blocks.
  const bool replicated = nkv % tp_size != 0;
  const int kv_index = replicated ? tp_rank / (tp_size / static_cast<int>(nkv)) : tp_rank;
  const int kv_count = replicated ? static_cast<int>(nkv) : tp_size;
  const std::string p = c.name + ".";
  // q, k and v are one fused projection: their weights, then their biases
  // (each fused group's parts together, as the optimizer's flat buffer
  // needs); then o_proj's weight and bias.
  std::vector<Expected> out;
  const std::vector<std::string> qkv = {"q_proj", "k_proj", "v_proj"};
  const Shape qkv_rows[] = {{wq}, {wk}, {wk}};
  const int index[] = {tp_rank, kv_index, kv_index}, count[] = {tp_size, kv_count, kv_count};
  for (size_t i = 0; i < qkv.size(); ++i) {
    out.push_back({p + qkv[i] + ".weight", {qkv_rows[i][0], d}, 0, index[i], count[i], d});
  }
  for (size_t i = 0; c.qkv_bias && i < qkv.size(); ++i) {
    out.push_back({p + qkv[i] + ".bias", qkv_rows[i], 0, index[i], count[i], d});
  }
  out.push_back({p + "o_proj.weight", {d, wq}, 1, tp_rank, tp_size, wq});
  if (c.output_bias) out.push_back({p + "o_proj.bias", {d}, 0, 0, 1, wq});
  return out;
}

Tensor part(const Tensor& full, const Expected& e) {
  return full.shard(e.dim, e.index, e.count);
}

// The full weights (what fill_shard makes on one rank), after checking that
// each parameter has the expected name, placement and value bits.
reference::AttentionWeights reference_weights(ParallelAttention& attn, int tp_rank, int tp_size) {
  const AttentionConfig& c = attn.config();
  const std::vector<Expected> expected = expected_parameters(c, tp_rank, tp_size);
  const std::vector<Parameter*> params = attn.parameters();
  EXPECT_EQ(params.size(), expected.size());
  std::map<std::string, Matrix> full;
  for (size_t i = 0; i < expected.size() && i < params.size(); ++i) {
    const Expected& e = expected[i];
    const Parameter& p = *params[i];
    EXPECT_EQ(p.name, e.name);
    EXPECT_EQ(p.shard.full_shape, e.full) << e.name;
    EXPECT_EQ(p.shard.dim, e.dim) << e.name;
    EXPECT_EQ(p.shard.index, e.index) << e.name;
    EXPECT_EQ(p.shard.count, e.count) << e.name;
    const Tensor t =
        testing::full_parameter(e.name, e.full, Init::linear_default(e.fan_in), c.seed);
    EXPECT_TRUE(same_bits(p.value, part(t, e))) << e.name << " value";
    full[e.name] = to_matrix(t);
  }
  const std::string p = c.name + ".";
  reference::AttentionWeights w;
  w.q_w = full[p + "q_proj.weight"];
  w.k_w = full[p + "k_proj.weight"];
  w.v_w = full[p + "v_proj.weight"];
  w.o_w = full[p + "o_proj.weight"];
  if (c.qkv_bias) {
    w.q_b = full[p + "q_proj.bias"];
    w.k_b = full[p + "k_proj.bias"];
    w.v_b = full[p + "v_proj.bias"];
  }
  if (c.output_bias) w.o_b = full[p + "o_proj.bias"];
  return w;
}

reference::AttentionSpec spec_of(const AttentionConfig& c, int64_t batch, int64_t seq, int tp) {
  reference::AttentionSpec s;
  s.batch = batch;
  s.seq = seq;
  s.d_model = c.d_model;
  s.n_head = c.n_head;
  s.n_kv_head = kv_heads(c);
  s.head_dim = head_dim(c);
  s.rope = c.rope;
  s.rope_theta = c.rope_theta;
  s.tp = tp;
  return s;
}

// The reference gradient of a parameter, by name, as a full [rows, cols] matrix.
const BMatrix& grad_of(const reference::AttentionGrads& g, const std::string& name) {
  static const std::vector<std::pair<std::string, BMatrix reference::AttentionGrads::*>> kFields{
      {"q_proj.weight", &reference::AttentionGrads::q_w},
      {"q_proj.bias", &reference::AttentionGrads::q_b},
      {"k_proj.weight", &reference::AttentionGrads::k_w},
      {"k_proj.bias", &reference::AttentionGrads::k_b},
      {"v_proj.weight", &reference::AttentionGrads::v_w},
      {"v_proj.bias", &reference::AttentionGrads::v_b},
      {"o_proj.weight", &reference::AttentionGrads::o_w},
      {"o_proj.bias", &reference::AttentionGrads::o_b}};
  for (const auto& [suffix, field] : kFields) {
    if (name.size() >= suffix.size() &&
        name.compare(name.size() - suffix.size(), suffix.size(), suffix) == 0) {
      return g.*field;
    }
  }
  static const BMatrix kNone;
  ADD_FAILURE() << "no reference gradient for " << name;
  return kNone;
}

// The part `e` of a full row-major reference matrix (a vector is [n]).
BMatrix part(const BMatrix& full, const Expected& e) {
  const int64_t rows = e.full[0], cols = e.full.size() > 1 ? e.full[1] : 1;
  const int64_t r0 = e.dim == 0 ? e.index * rows / e.count : 0;
  const int64_t nr = e.dim == 0 ? rows / e.count : rows;
  const int64_t c0 = e.dim == 1 ? e.index * cols / e.count : 0;
  const int64_t nc = e.dim == 1 ? cols / e.count : cols;
  BMatrix out;
  for (int64_t i = r0; i < r0 + nr; ++i) {
    for (int64_t j = c0; j < c0 + nc; ++j) out.push_back(full[i * cols + j]);
  }
  return out;
}

void expect_grads_within(ParallelAttention& attn, const reference::AttentionGrads& ref, int tp_rank,
                         int tp_size) {
  const std::vector<Expected> expected = expected_parameters(attn.config(), tp_rank, tp_size);
  const std::vector<Parameter*> params = attn.parameters();
  for (size_t i = 0; i < expected.size() && i < params.size(); ++i) {
    EXPECT_EQ(check_within(params[i]->grad.to_vector(),
                           part(grad_of(ref, expected[i].name), expected[i])),
              "")
        << expected[i].name << " grad";
  }
}

TEST(ParallelAttentionTest, MatchesReference) {
  Communicator& tp = world();
  const int tp_rank = tp.rank(), tp_size = tp.size();
  for (const Case& c : cases(tp_size)) {
    SCOPED_TRACE(c.what);
    ParallelAttention attn(tp, c.config);
    const reference::AttentionWeights w = reference_weights(attn, tp_rank, tp_size);
    const int64_t tokens = c.batch * c.seq;
    const Tensor x = random_tensor({tokens, c.config.d_model}, 1);
    const Tensor dy = random_tensor({tokens, c.config.d_model}, 2);

    const Tensor y = attn.forward(x, c.batch, c.seq).clone();
    const Tensor dx = attn.backward(dy).clone();

    const auto ref = reference::attention_layer(spec_of(c.config, c.batch, c.seq, tp_size), w,
                                                to_matrix(x), to_matrix(dy));
    EXPECT_EQ(check_within(y.to_vector(), ref.y), "") << "y";
    EXPECT_EQ(check_within(dx.to_vector(), ref.dx), "") << "dx";
    expect_grads_within(attn, ref.grads, tp_rank, tp_size);
  }
}

// Gradients accumulate over backward calls, and a replicated KV head's
// replica sum covers each call's share once (not the running total again):
// after two calls every gradient is twice the reference, within twice its
// bound plus the rounding of the one extra addition.
TEST(ParallelAttentionTest, SecondBackwardDoublesTheGradients) {
  Communicator& tp = world();
  const int tp_rank = tp.rank(), tp_size = tp.size();
  for (const Case& c : cases(tp_size)) {
    SCOPED_TRACE(c.what);
    ParallelAttention attn(tp, c.config);
    const reference::AttentionWeights w = reference_weights(attn, tp_rank, tp_size);
    const int64_t tokens = c.batch * c.seq;
    const Tensor x = random_tensor({tokens, c.config.d_model}, 3);
    const Tensor dy = random_tensor({tokens, c.config.d_model}, 4);
    attn.forward(x, c.batch, c.seq);
    attn.backward(dy);
    const Tensor dx = attn.backward(dy).clone();

    auto ref = reference::attention_layer(spec_of(c.config, c.batch, c.seq, tp_size), w,
                                          to_matrix(x), to_matrix(dy));
    EXPECT_EQ(check_within(dx.to_vector(), ref.dx), "") << "dx is returned, not accumulated";
    for (BMatrix* g : {&ref.grads.q_w, &ref.grads.q_b, &ref.grads.k_w, &ref.grads.k_b,
                       &ref.grads.v_w, &ref.grads.v_b, &ref.grads.o_w, &ref.grads.o_b}) {
      for (reference::Bounded& b : *g) {
        b = {2 * b.v, 2 * b.m, 2 * b.e + kU * (2 * b.m + 2 * b.e)};
      }
    }
    expect_grads_within(attn, ref.grads, tp_rank, tp_size);
  }
}

// Central differences of L = sum(y * g) (y is replicated, so every rank has
// L) for every entry of x and three entries of every parameter. An entry of
// a sharded parameter is perturbed on the rank(s) holding it, all at once
// (replicas of a KV head and the replicated o_proj bias included), so the
// layer stays one function. As in the kernel test, with D the fp32 quotient,
// D* the exact function's (the reference at the perturbed points) and L' the
// exact derivative:  |grad - D| <= e(grad) + |L' - D*| + (E+ + E-) / (2h),
// E = sum |g| e(y) at each point. Nothing is estimated.
TEST(ParallelAttentionTest, BackwardMatchesFiniteDifferences) {
  Communicator& tp = world();
  const int tp_rank = tp.rank(), tp_size = tp.size();
  constexpr int64_t kBatch = 2, kSeq = 3;
  constexpr float kStep = 0x1p-5f;
  const std::vector<Case> tiny{
      {"MQA 12/1 (replicated at tp > 1), rope, biases", make_config(8, 12, 1, 2, true, true)},
      {"MHA 12/12, no rope, biases", make_config(8, 12, 12, 2, true, false)}};
  for (const Case& c : tiny) {
    SCOPED_TRACE(c.what);
    ParallelAttention attn(tp, c.config);
    reference::AttentionWeights w = reference_weights(attn, tp_rank, tp_size);
    const int64_t tokens = kBatch * kSeq, d = c.config.d_model;
    Tensor x = random_tensor({tokens, d}, 31);
    const Tensor g = random_tensor({tokens, d}, 32);
    const reference::AttentionSpec spec = spec_of(c.config, kBatch, kSeq, tp_size);

    attn.forward(x, kBatch, kSeq);
    const Tensor dx = attn.backward(g).clone();
    const auto ref = reference::attention_layer(spec, w, to_matrix(x), to_matrix(g));

    auto loss = [&](double* exact, double* error) {
      const Tensor& y = attn.forward(x, kBatch, kSeq);
      const auto r = reference::attention_layer(spec, w, to_matrix(x), to_matrix(g));
      double sum = 0.0;
      *exact = *error = 0.0;
      for (int64_t i = 0; i < y.numel(); ++i) {
        sum += static_cast<double>(y.data()[i]) * g.data()[i];
        *exact += r.y[i].v * g.data()[i];
        *error += std::fabs(g.data()[i]) * r.y[i].e;
      }
      return sum;
    };
    // Perturbs `value` (when this rank holds it) and `full_value` (the
    // reference's copy) by +-h, and expects `grad` within the bound above.
    auto check = [&](float* value, double* full_value, bool mine, double grad,
                     const reference::Bounded& grad_ref, const std::string& what) {
      float original = full_value != nullptr ? static_cast<float>(*full_value) : *value;
      const float plus = original + kStep, minus = original - kStep;
      double exact_plus, exact_minus, e_plus, e_minus;
      if (mine) *value = plus;
      if (full_value != nullptr) *full_value = plus;
      const double l_plus = loss(&exact_plus, &e_plus);
      if (mine) *value = minus;
      if (full_value != nullptr) *full_value = minus;
      const double l_minus = loss(&exact_minus, &e_minus);
      if (mine) *value = original;
      if (full_value != nullptr) *full_value = original;
      const double step = static_cast<double>(plus) - minus;
      const double fd = (l_plus - l_minus) / step;
      const double truncation = std::fabs((exact_plus - exact_minus) / step - grad_ref.v);
      if (mine) {
        EXPECT_NEAR(grad, fd, grad_ref.e + truncation + (e_plus + e_minus) / step) << what;
      }
    };

    // x is replicated: perturbed on every rank (the reference reads x itself).
    for (int64_t i = 0; i < x.numel(); ++i) {
      check(&x.data()[i], nullptr, true, dx.data()[i], ref.dx[i], "dx[" + std::to_string(i) + "]");
    }
    // Three entries of each parameter, by full index: first, middle, last.
    const std::vector<Expected> expected = expected_parameters(attn.config(), tp_rank, tp_size);
    const std::vector<Parameter*> params = attn.parameters();
    std::vector<Tensor> grads;
    for (Parameter* p : params) grads.push_back(p->grad.clone());
    std::map<std::string, Matrix*> full{{"q_proj.weight", &w.q_w}, {"q_proj.bias", &w.q_b},
                                        {"k_proj.weight", &w.k_w}, {"k_proj.bias", &w.k_b},
                                        {"v_proj.weight", &w.v_w}, {"v_proj.bias", &w.v_b},
                                        {"o_proj.weight", &w.o_w}, {"o_proj.bias", &w.o_b}};
    for (size_t k = 0; k < expected.size() && k < params.size(); ++k) {
      const Expected& e = expected[k];
      Matrix* m = full[e.name.substr(c.config.name.size() + 1)];
      const int64_t rows = e.full[0], cols = e.full.size() > 1 ? e.full[1] : 1;
      const int64_t numel = rows * cols;
      const BMatrix& grad_ref = grad_of(ref.grads, e.name);
      for (int64_t flat : {int64_t{0}, numel / 2, numel - 1}) {
        const int64_t row = flat / cols, col = flat % cols;
        const int64_t along = e.dim == 0 ? row : col;
        const int64_t part_size = (e.dim == 0 ? rows : cols) / e.count;
        const bool mine = along / part_size == e.index;
        const int64_t local = e.dim == 0 ? (row - e.index * part_size) * cols + col
                                         : row * part_size + (col - e.index * part_size);
        float* value = mine ? &params[k]->value.data()[local] : nullptr;
        const double grad = mine ? grads[k].data()[local] : 0.0;
        check(value, &(*m)[flat], mine, grad, grad_ref[flat],
              e.name + "[" + std::to_string(flat) + "] on tp rank " + std::to_string(tp_rank));
      }
    }
  }
}

// One all-reduce of [tokens, d_model] each way over tp. With replicated KV
// heads, backward also all-reduces k_proj's and v_proj's weight gradients
// over the replica group, as one tensor (their rows are adjacent in the fused
// projection), then their biases' likewise; forward uses it not at all.
TEST(ParallelAttentionTest, IssuesTheExpectedCollectives) {
  RecordingCommunicator tp(world());
  const int tp_size = tp.size();
  for (const Case& c : cases(tp_size)) {
    SCOPED_TRACE(c.what);
    ParallelAttention attn(tp, c.config);
    EXPECT_TRUE(tp.events().empty()) << "construction communicates over tp (beyond the split)";
    const int nkv = kv_heads(c.config);
    const bool replicated = tp_size > nkv;
    auto* replicas = dynamic_cast<RecordingCommunicator*>(attn.kv_replica_group());
    EXPECT_EQ(replicas != nullptr, replicated);
    if (replicas != nullptr) {
      EXPECT_EQ(replicas->size(), tp_size / nkv);
    }
    const int64_t tokens = c.batch * c.seq, d = c.config.d_model, hd = head_dim(c.config);
    const Tensor x = random_tensor({tokens, d}, 5);
    const Tensor dy = random_tensor({tokens, d}, 6);
    const std::vector<CollectiveEvent> one_all_reduce{{"all_reduce_sum", tokens * d, 0.0}};
    // One KV head per rank when replicated: k_proj's and v_proj's hd rows each.
    std::vector<CollectiveEvent> replica_sums{{"all_reduce_sum", 2 * hd * d, 0.0}};
    if (c.config.qkv_bias) replica_sums.push_back({"all_reduce_sum", 2 * hd, 0.0});

    tp.clear();
    attn.forward(x, c.batch, c.seq);
    EXPECT_EQ(tp.events(), one_all_reduce) << "forward";
    if (replicas != nullptr) {
      EXPECT_TRUE(replicas->events().empty()) << "forward, replicas";
    }
    tp.clear();
    attn.backward(dy);
    EXPECT_EQ(tp.events(), one_all_reduce) << "backward";
    if (replicas != nullptr) {
      EXPECT_EQ(replicas->events(), replica_sums) << "backward, replicas";
    }
    tp.clear();
  }
}

// Buffers are sized on the first call of a shape and reused after it.
TEST(ParallelAttentionTest, ReusesItsBuffers) {
  Communicator& tp = world();
  ParallelAttention attn(tp, make_config(48, 12, 0, 0, false, true));
  const Tensor x = random_tensor({10, 48}, 7);
  const float* y_data = attn.forward(x, 2, 5).data();
  const float* saved_data = attn.attention_saved().data();
  const float* dx_data = attn.backward(x).data();
  EXPECT_EQ(attn.forward(x, 2, 5).data(), y_data);
  EXPECT_EQ(attn.attention_saved().data(), saved_data);
  EXPECT_EQ(attn.backward(x).data(), dx_data);
  EXPECT_EQ(attn.attention_saved().shape(), (Shape{2, 12 / tp.size(), 5, 5}));
  // Another split of the same tokens into sequences gives different results.
  const Tensor y_2x5 = attn.forward(x, 2, 5).clone();
  const Tensor y_1x10 = attn.forward(x, 1, 10).clone();
  EXPECT_FALSE(same_bits(y_2x5, y_1x10));
  EXPECT_EQ(attn.attention_saved().shape(), (Shape{1, 12 / tp.size(), 10, 10}));
}

TEST(ParallelAttentionTest, BadShapesThrowOnEveryRankBeforeAnyCollective) {
  Communicator& tp = world();
  ParallelAttention attn(tp, make_config(48, 12, 0, 0, false, true));
  EXPECT_THROW(attn.forward(Tensor::zeros({10, 48}), 3, 3), InvalidInputError);
  EXPECT_THROW(attn.forward(Tensor::zeros({10, 40}), 2, 5), InvalidInputError);
  EXPECT_THROW(attn.forward(Tensor::zeros({0, 48}), 0, 5), InvalidInputError);
  EXPECT_THROW(attn.backward(Tensor::zeros({10, 48})), InternalError) << "before any forward";
  attn.forward(Tensor::zeros({10, 48}), 2, 5);
  EXPECT_THROW(attn.backward(Tensor::zeros({12, 48})), InvalidInputError) << "dy of another shape";
  tp.barrier();  // every rank got here
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

// validate() is pure: the same answer on every rank, for any tp.
TEST(ParallelAttentionTest, ValidateAcceptsExactlyTheCompatibleTp) {
  // 12 query heads, 4 KV heads: tp must divide 12 and divide 4 or be a multiple of 4.
  const AttentionConfig gqa = make_config(48, 12, 4, 0, false, true);
  for (int tp = 1; tp <= 24; ++tp) {
    const bool ok = 12 % tp == 0 && (4 % tp == 0 || tp % 4 == 0);
    EXPECT_EQ(valid_at(gqa, tp), ok) << "tp " << tp;
  }
}

TEST(ParallelAttentionTest, ValidateNamesBothNumbersAndTheFix) {
  const std::string kv_rule =
      ": tp must divide n_kv_head or be a multiple of it (KV heads are split or replicated "
      "whole).";
  expect_config_error(
      [] { validate(make_config(48, 12, 3, 0, false, true), 2); },
      "[attention] n_kv_head (3) and tp (2)" + kv_rule + " Choose tp in {1, 3, 6, 12}.");
  expect_config_error(
      [] { validate(make_config(48, 12, 2, 0, false, true), 3); },
      "[attention] n_kv_head (2) and tp (3)" + kv_rule + " Choose tp in {1, 2, 4, 6, 12}.");
  expect_config_error([] { validate(make_config(48, 12, 4, 0, false, true), 5); },
                      "[attention] n_head (12) must be divisible by tp (5). "
                      "Choose tp in {1, 2, 4, 12}.");
  expect_config_error([] { validate(make_config(48, 12, 5, 0, false, false), 1); },
                      "[attention] n_head (12) must be divisible by n_kv_head (5). "
                      "Choose n_kv_head in {1, 2, 3, 4, 6, 12}.");
  expect_config_error([] { validate(make_config(50, 12, 0, 0, true, false), 1); },
                      "[attention] d_model (50) must be divisible by n_head (12) when head_dim "
                      "is 0 (d_model / n_head). Set head_dim, or choose n_head in "
                      "{1, 2, 5, 10, 25, 50}.");
  expect_config_error([] { validate(make_config(40, 8, 0, 5, false, true), 1); },
                      "[attention] head_dim (5) must be even with rope (it rotates pairs i, "
                      "i + head_dim/2).");
  expect_config_error([] { validate(make_config(48, 12, 0, 0, false, true, 0.0), 1); },
                      "[attention] rope_theta (0.000000) must be positive.");
  expect_config_error(
      [] {
        AttentionConfig c = make_config(48, 12, 0, 0, false, true);
        c.rope_scaling.type = RopeType::kLinear;
        c.rope_scaling.factor = 0.0;
        validate(c, 1);
      },
      "[config] rope_scaling.factor (0) must be positive.");
  expect_config_error(
      [] {
        AttentionConfig c = make_config(48, 12, 0, 0, false, true);
        c.window = -3;
        validate(c, 1);
      },
      "[attention] window (-3) must be >= 0 (0: fully causal).");
  expect_config_error([] { validate(make_config(0, 12, 0, 0, true, false), 1); },
                      "[attention] d_model (0) and n_head (12) must be positive.");
  expect_config_error([] { validate(make_config(48, 12, -1, 0, true, false), 1); },
                      "[attention] n_kv_head (-1) must be positive, or 0 for n_head (12).");
  expect_config_error([] { validate(make_config(48, 12, 0, -2, true, false), 1); },
                      "[attention] head_dim (-2) must be positive, or 0 for d_model / n_head.");
  // Odd head_dim is fine without rope; d_model need not be n_head * head_dim.
  EXPECT_NO_THROW(validate(make_config(40, 8, 0, 5, false, false), 1));
}

// At this world size, a head layout that does not fit: every rank throws the
// same ConfigError before any collective or allocation, so nothing hangs.
TEST(ParallelAttentionTest, IncompatibleTpIsAConfigErrorOnEveryRank) {
  Communicator& tp = world();
  if (tp.size() == 1) GTEST_SKIP() << "every head layout fits tp = 1";
  struct Bad {
    int tp, n_head, n_kv_head;
    std::string message;
  };
  const std::string kv_rule =
      ": tp must divide n_kv_head or be a multiple of it (KV heads are split or replicated "
      "whole).";
  const std::vector<Bad> bad{
      {2, 12, 3, "[attention] n_kv_head (3) and tp (2)" + kv_rule + " Choose tp in {1, 3, 6, 12}."},
      {2, 9, 9, "[attention] n_head (9) must be divisible by tp (2). Choose tp in {1, 3, 9}."},
      {3, 12, 2,
       "[attention] n_kv_head (2) and tp (3)" + kv_rule + " Choose tp in {1, 2, 4, 6, 12}."},
      {3, 8, 8, "[attention] n_head (8) must be divisible by tp (3). Choose tp in {1, 2, 4, 8}."},
      {4, 12, 6,
       "[attention] n_kv_head (6) and tp (4)" + kv_rule + " Choose tp in {1, 2, 3, 6, 12}."},
      {4, 6, 6, "[attention] n_head (6) must be divisible by tp (4). Choose tp in {1, 2, 3, 6}."},
  };
  int checked = 0;
  for (const Bad& b : bad) {
    if (b.tp != tp.size()) continue;
    ++checked;
    expect_config_error(
        [&] {
          ParallelAttention attn(tp,
                                 make_config(4 * b.n_head, b.n_head, b.n_kv_head, 0, false, true));
        },
        b.message);
  }
  EXPECT_GT(checked, 0) << "no bad layout listed for tp = " << tp.size();
  tp.barrier();  // every rank got here
}

}  // namespace
}  // namespace colrow
