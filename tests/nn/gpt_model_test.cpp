// GptModel at tp = world size against the same model unsharded (a group of
// one on every rank, built from the same TP-invariant initialization): loss,
// every parameter (bitwise) and every gradient shard; gpt2 and llama, with
// grouped, multi-query and replicated key/value heads and a vocabulary that
// needs padding. Central finite differences confirm the unsharded gradients,
// so together they confirm the sharded ones. Checkpoints saved at tp = world
// load at tp = 1 with identical outputs and save again byte for byte.
// Backward reports the gradients it finishes (the dp overlap's signal). The
// output head and loss in token chunks give the whole batch's losses and
// gradients.
#include "colrow/nn/gpt_model.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "colrow/core/error.h"
#include "colrow/dist/local_communicator.h"
#include "colrow/dist/process_mesh.h"
#include "colrow/dist/recording_communicator.h"
#include "colrow/nn/checkpoint.h"
#include "kernels/op_trace.h"
#include "nn/model_test_cases.h"
#include "support/temp_dir.h"
#include "support/test_world.h"

namespace colrow {
namespace {

using testing::shared_temp_dir;
using testing::world;

constexpr uint64_t kSeed = 7;
constexpr int64_t kBatch = 2, kSeq = 8;

using testing::model_cases;
using testing::ModelCase;
using testing::random_ids;
using testing::small_gpt2_config;
using testing::small_llama_config;
using testing::valid_at;

// Rows [row0, row0+rows) x columns [col0, col0+cols) of the full tensor that
// this shard holds (1-d: cols = 1).
struct Block {
  int64_t row0, rows, col0, cols;
};
Block block_of(const ShardSpec& s) {
  const Shape local = s.local_shape();
  Block b{0, local[0], 0, local.size() == 2 ? local[1] : 1};
  if (s.dim == 0) b.row0 = s.offset_along_dim();
  if (s.dim == 1) b.col0 = s.offset_along_dim();
  return b;
}

// The largest |mine - reference| over the part of my shard that the
// reference's full tensor has (vocab padding differs between tp degrees),
// relative to the reference's largest magnitude; and whether values match bitwise.
struct Comparison {
  double relative_error = 0.0;
  bool bitwise = true;
};
Comparison compare_shard(const Tensor& mine, const ShardSpec& spec, const Tensor& full,
                         double scale_floor = 1e-30) {
  const Block b = block_of(spec);
  const int64_t full_rows = full.size(0), full_cols = full.ndim() == 2 ? full.size(1) : 1;
  double err = 0.0, scale = scale_floor;
  bool bitwise = true;
  for (int64_t i = 0; i < b.rows && b.row0 + i < full_rows; ++i) {
    for (int64_t j = 0; j < b.cols; ++j) {
      const float m = mine.ndim() == 2 ? mine(i, j) : mine.data()[i];
      const float r = full.ndim() == 2 ? full(b.row0 + i, b.col0 + j) : full.data()[b.row0 + i];
      err = std::max(err, std::fabs(static_cast<double>(m) - r));
      bitwise = bitwise && m == r;
    }
  }
  for (int64_t k = 0; k < full_rows * full_cols; ++k) {
    scale = std::max(scale, std::fabs(static_cast<double>(full.data()[k])));
  }
  return {err / scale, bitwise};
}

TEST(GptModelTest, ShardedMatchesUnshardedLossParametersAndGradients) {
  Communicator& tp = world();
  for (const ModelCase& c : model_cases()) {
    SCOPED_TRACE(c.name);
    if (!valid_at(c.config, tp.size())) continue;  // e.g. llama_gqa at tp 4: a config error
    GptModel sharded(tp, c.config, kSeed);
    LocalCommunicator alone;
    GptModel reference(alone, c.config, kSeed);
    const std::vector<int32_t> ids = random_ids(1, kBatch * kSeq, c.config.vocab_size);
    const std::vector<int32_t> targets = random_ids(2, kBatch * kSeq, c.config.vocab_size);
    const CrossEntropyOutput out = sharded.forward(ids, targets, kBatch, kSeq);
    sharded.backward();
    const CrossEntropyOutput ref = reference.forward(ids, targets, kBatch, kSeq);
    reference.backward();
    // fp32 sums over at most a few hundred terms, in orders that depend on tp:
    // errors of order sqrt(K) u per operation. 1e-5 on a loss near ln(300) and
    // 1e-4 of a gradient tensor's largest entry leave a wide margin over that,
    // while a missing reduction or a misplaced shard is an O(1) error.
    EXPECT_NEAR(out.mean(), ref.mean(), 1e-5 * std::fabs(ref.mean()));
    const std::vector<Parameter*> mine = sharded.parameters(), full = reference.parameters();
    ASSERT_EQ(mine.size(), full.size());
    // Some gradients are zero in exact arithmetic (a key bias shifts every
    // score of a query equally, which softmax ignores): their fp32 values are
    // pure rounding, so errors are measured against at least 1e-3 of the
    // largest gradient entry of the model.
    const double largest = testing::largest_gradient(full);
    for (size_t i = 0; i < mine.size(); ++i) {
      ASSERT_EQ(mine[i]->name, full[i]->name);
      const Comparison value = compare_shard(mine[i]->value, mine[i]->shard, full[i]->value);
      EXPECT_TRUE(value.bitwise) << mine[i]->name << ": initialization differs from tp = 1";
      const Comparison grad =
          compare_shard(mine[i]->grad, mine[i]->shard, full[i]->grad, 1e-3 * largest);
      EXPECT_LE(grad.relative_error, 1e-4) << mine[i]->name;
    }
  }
}

// Mixed precision (set_compute_dtype(kBF16)) at tp = world size against the
// fp32 model unsharded: the layers compute with bf16 copies of the fp32
// values (which stay untouched), activations and logits are bf16, the loss
// and the gradients fp32. Each activation is rounded to bf16 (2^-9 relative)
// and errors add up over the layers' dozens of roundings, so the loss is
// compared within kBf16Loss and the gradients within kBf16Grad of the
// largest gradient entry: above what the roundings give in these small models
// (printed; measured up to 5e-5 and 1.9e-2 at tp 1-4), far below the O(1) of
// a wrong dtype, a stale copy or a missing reduction. The
// loss must also differ from fp32's: the model did run in bf16.
TEST(GptModelTest, Bf16ComputeFollowsTheFp32ModelWithinBf16Rounding) {
  constexpr double kBf16Loss = 1e-3, kBf16Grad = 5e-2;
  Communicator& tp = world();
  for (const ModelCase& c : model_cases()) {
    SCOPED_TRACE(c.name);
    if (!valid_at(c.config, tp.size())) continue;
    GptModel mixed(tp, c.config, kSeed);
    mixed.set_compute_dtype(DType::kBF16);
    LocalCommunicator alone;
    GptModel reference(alone, c.config, kSeed);
    const std::vector<int32_t> ids = random_ids(1, kBatch * kSeq, c.config.vocab_size);
    const std::vector<int32_t> targets = random_ids(2, kBatch * kSeq, c.config.vocab_size);
    const CrossEntropyOutput out = mixed.forward(ids, targets, kBatch, kSeq);
    mixed.backward();
    const CrossEntropyOutput ref = reference.forward(ids, targets, kBatch, kSeq);
    reference.backward();
    EXPECT_EQ(mixed.logits_local().dtype(), DType::kBF16);
    EXPECT_NE(out.mean(), ref.mean());
    EXPECT_NEAR(out.mean(), ref.mean(), kBf16Loss * std::fabs(ref.mean()));
    const std::vector<Parameter*> mine = mixed.parameters(), full = reference.parameters();
    const double largest = testing::largest_gradient(full);
    double worst = 0.0;
    for (size_t i = 0; i < mine.size(); ++i) {
      const Parameter& p = *mine[i];
      EXPECT_EQ(p.value.dtype(), DType::kF32);
      EXPECT_EQ(p.grad.dtype(), DType::kF32);
      ASSERT_EQ(p.compute().dtype(), DType::kBF16) << p.name;
      EXPECT_TRUE(compare_shard(p.value, p.shard, full[i]->value).bitwise) << p.name;
      const std::vector<float> value = p.value.to_vector(), copy = p.compute().to_vector();
      for (size_t k = 0; k < value.size(); ++k) {
        ASSERT_LE(std::fabs(copy[k] - value[k]), std::ldexp(std::fabs(value[k]), -8)) << p.name;
      }
      const double err =
          compare_shard(p.grad, p.shard, full[i]->grad, 1e-3 * largest).relative_error;
      worst = std::max(worst, err);
      EXPECT_LE(err, kBf16Grad) << p.name;
    }
    if (tp.rank() == 0) {
      std::printf("[%s, tp %d] bf16 loss %.6f vs fp32 %.6f; worst gradient error %.2e\n", c.name,
                  tp.size(), out.mean(), ref.mean(), worst);
    }
  }
}

// Activation recomputation (set_recompute_activation): backward makes each
// MLP's activation again, into one buffer all blocks share, instead of the
// block keeping it. The activation is the same deterministic kernel on the
// same input, so the loss and every gradient equal the kept run's bit for
// bit, in fp32 and bf16, with and without sequence parallelism. Were the
// buffer read without recomputing, the first block's down projection would
// see the second block's hidden units: its weight gradient would differ.
TEST(GptModelTest, RecomputedActivationGivesTheSameLossAndGradientsBitwise) {
  Communicator& tp = world();
  for (const ModelCase& c : model_cases()) {
    if (!valid_at(c.config, tp.size())) continue;
    for (bool sp : {false, true}) {
      if (sp && kBatch * kSeq % tp.size() != 0) continue;
      for (DType dtype : {DType::kF32, DType::kBF16}) {
        SCOPED_TRACE(std::string(c.name) + (sp ? ", sequence parallel, " : ", ") +
                     dtype_name(dtype));
        GptModel kept(tp, c.config, kSeed, sp), recomputed(tp, c.config, kSeed, sp);
        recomputed.set_recompute_activation(true);
        const std::vector<int32_t> ids = random_ids(1, kBatch * kSeq, c.config.vocab_size);
        const std::vector<int32_t> targets = random_ids(2, kBatch * kSeq, c.config.vocab_size);
        std::vector<float> losses;
        for (GptModel* model : {&kept, &recomputed}) {
          model->set_compute_dtype(dtype);
          losses.push_back(model->forward(ids, targets, kBatch, kSeq).mean());
          model->backward();
        }
        EXPECT_EQ(losses[0], losses[1]);
        const std::vector<Parameter*> a = kept.parameters(), b = recomputed.parameters();
        ASSERT_EQ(a.size(), b.size());
        for (size_t i = 0; i < a.size(); ++i) {
          EXPECT_EQ(a[i]->grad.to_vector(), b[i]->grad.to_vector()) << a[i]->name;
        }
      }
    }
  }
}

// A tp communicator that counts the kernel operations queued while a started
// collective is in flight (between start_* and its wait): what overlapping
// means. Everything else passes through.
class OverlapProbe final : public Communicator {
 public:
  OverlapProbe(Communicator& inner, const kernels::OpTrace& trace) : inner_(inner), trace_(trace) {}
  int64_t ops_during_collectives() const { return ops_during_; }

  int rank() const override { return inner_.rank(); }
  int size() const override { return inner_.size(); }
  const std::string& name() const override { return inner_.name(); }
  void all_reduce_sum(Tensor& x) override { inner_.all_reduce_sum(x); }
  void all_reduce_max(Tensor& x) override { inner_.all_reduce_max(x); }
  void all_gather(const Tensor& in, Tensor& out) override { inner_.all_gather(in, out); }
  void reduce_scatter_sum(const Tensor& in, Tensor& out) override {
    inner_.reduce_scatter_sum(in, out);
  }
  void broadcast(Tensor& x, int root) override { inner_.broadcast(x, root); }
  void barrier() override { inner_.barrier(); }
  void all_reduce_sum_bf16_wire(Tensor& x) override { inner_.all_reduce_sum_bf16_wire(x); }
  void reduce_scatter_sum_bf16_wire(const Tensor& in, Tensor& out) override {
    inner_.reduce_scatter_sum_bf16_wire(in, out);
  }
  std::unique_ptr<PendingCollective> start_all_reduce_sum(Tensor& x) override {
    return watched(inner_.start_all_reduce_sum(x));
  }
  std::unique_ptr<PendingCollective> start_all_gather(const Tensor& in, Tensor& out) override {
    return watched(inner_.start_all_gather(in, out));
  }
  std::unique_ptr<PendingCollective> start_reduce_scatter_sum(const Tensor& in,
                                                              Tensor& out) override {
    return watched(inner_.start_reduce_scatter_sum(in, out));
  }
  std::unique_ptr<PendingCollective> start_send(const Tensor& x, int dst, int tag) override {
    return inner_.start_send(x, dst, tag);
  }
  void recv(Tensor& x, int src, int tag) override { inner_.recv(x, src, tag); }
  std::unique_ptr<Communicator> split(int color, int key, const std::string& name) override {
    return inner_.split(color, key, name);
  }
  bool all_ranks_failing(double timeout_seconds) override {
    return inner_.all_ranks_failing(timeout_seconds);
  }
  [[noreturn]] void abort(int exit_code) override {
    inner_.abort(exit_code);
    std::abort();  // not reached: the inner abort ends the process
  }

 private:
  class Watched final : public PendingCollective {
   public:
    Watched(std::unique_ptr<PendingCollective> inner, OverlapProbe& probe)
        : inner_(std::move(inner)), probe_(probe), ops_at_start_(probe.ops()) {}
    ~Watched() override { wait(); }
    void wait() override {
      if (!inner_) return;
      inner_->wait();
      inner_.reset();
      probe_.ops_during_ += probe_.ops() - ops_at_start_;
    }

   private:
    std::unique_ptr<PendingCollective> inner_;
    OverlapProbe& probe_;
    int64_t ops_at_start_;
  };
  int64_t ops() const { return static_cast<int64_t>(trace_.operations().size()); }
  std::unique_ptr<PendingCollective> watched(std::unique_ptr<PendingCollective> pending) {
    return std::make_unique<Watched>(std::move(pending), *this);
  }

  Communicator& inner_;
  const kernels::OpTrace& trace_;
  int64_t ops_during_ = 0;
};

TEST(GptModelTest, OverlappedTpBackwardGivesTheSameCollectivesLossAndGradientsBitwise) {
  // The default backward starts each region's input-gradient sum (and, with
  // sequence parallelism, its re-gather) and waits for it after the weight
  // GEMMs; set_overlap_tp_backward(false) waits where each starts. Both
  // must sum the same operands in the same order: the same collectives, the
  // same bits. Over Open MPI (MPI_I* calls) and shared memory (a background
  // queue that really runs while backward goes on), where a wait in the wrong
  // place would read a half-summed buffer.
  Communicator& w = world();
  const bool one_node = testing::world_on_one_node();
  for (CommKind kind : {CommKind::kMpi, CommKind::kShm}) {
    if (kind == CommKind::kShm && !one_node) continue;
    ProcessMesh mesh(w, w.size(), 1, 1, Device::cpu(), kind);
    for (const ModelCase& c : model_cases()) {
      if (!valid_at(c.config, w.size())) continue;
      for (bool sp : {false, true}) {
        if (sp && kBatch * kSeq % w.size() != 0) continue;
        SCOPED_TRACE(to_string(kind) + ", " + c.name + (sp ? ", sequence parallel" : ""));
        const kernels::OpTrace trace;
        OverlapProbe overlapped_probe(mesh.tp(), trace), blocking_probe(mesh.tp(), trace);
        RecordingCommunicator overlapped_tp(overlapped_probe), blocking_tp(blocking_probe);
        GptModel overlapped(overlapped_tp, c.config, kSeed, sp);
        GptModel blocking(blocking_tp, c.config, kSeed, sp);
        blocking.set_overlap_tp_backward(false);
        const std::vector<int32_t> ids = random_ids(5, kBatch * kSeq, c.config.vocab_size);
        const std::vector<int32_t> targets = random_ids(6, kBatch * kSeq, c.config.vocab_size);
        std::vector<float> losses;
        for (GptModel* model : {&overlapped, &blocking}) {
          for (int step = 0; step < 2; ++step) {  // the second reuses every shared buffer
            model->zero_grad();
            losses.push_back(model->forward(ids, targets, kBatch, kSeq).mean());
            model->backward();
          }
        }
        EXPECT_EQ(losses[0], losses[2]);
        EXPECT_EQ(losses[1], losses[3]);
        EXPECT_EQ(overlapped_tp.events(), blocking_tp.events());
        // Overlapping means kernels run while a collective is in flight (the
        // weight-gradient GEMMs); waiting where each starts means none do.
        EXPECT_EQ(blocking_probe.ops_during_collectives(), 0);
        if (w.size() > 1) {
          EXPECT_GT(overlapped_probe.ops_during_collectives(), 0);
        }
        const std::vector<Parameter*> a = overlapped.parameters(), b = blocking.parameters();
        ASSERT_EQ(a.size(), b.size());
        for (size_t i = 0; i < a.size(); ++i) {
          EXPECT_EQ(a[i]->grad.to_vector(), b[i]->grad.to_vector()) << a[i]->name;
        }
      }
    }
  }
}

TEST(GptModelTest, GradientsMatchCentralFiniteDifferences) {
  // Unsharded (a group of one): the test above ties every tp to it.
  for (const ModelCase& c : model_cases()) {
    SCOPED_TRACE(c.name);
    LocalCommunicator alone;
    GptModel model(alone, c.config, kSeed);
    const std::vector<int32_t> ids = random_ids(3, kBatch * kSeq, c.config.vocab_size);
    const std::vector<int32_t> targets = random_ids(4, kBatch * kSeq, c.config.vocab_size);
    model.forward(ids, targets, kBatch, kSeq);
    model.backward();
    // fp32 loss near 5.7 carries ~1e-6 of rounding; with h = 1e-2 the
    // difference quotient's rounding error is ~1e-4 and its truncation error
    // h^2 f'''/6 is of the same order for these smooth functions of O(0.02)
    // weights. Tolerance: 1e-3 absolute plus 5% of the gradient.
    constexpr float kStep = 1e-2f;
    for (Parameter* p : model.parameters()) {
      const int64_t n = p->value.numel();
      for (int64_t k : {int64_t{0}, n / 2, n - 1}) {
        float& w = p->value.data()[k];
        const float saved = w;
        w = saved + kStep;
        const double up = model.forward(ids, targets, kBatch, kSeq).mean();
        w = saved - kStep;
        const double down = model.forward(ids, targets, kBatch, kSeq).mean();
        w = saved;
        const double fd = (up - down) / (2.0 * kStep);
        const double g = p->grad.data()[k];
        EXPECT_NEAR(g, fd, 1e-3 + 0.05 * std::fabs(fd)) << p->name << "[" << k << "]";
      }
    }
  }
}

std::string read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

TEST(GptModelTest, CheckpointSavedAtTpLoadsUnshardedAndSavesAgainIdentically) {
  Communicator& tp = world();
  for (const ModelCase& c : model_cases()) {
    SCOPED_TRACE(c.name);
    if (!valid_at(c.config, tp.size())) continue;
    const std::string dir = shared_temp_dir(tp, std::string("gpt_model_test_") + c.name);
    GptModel sharded(tp, c.config, kSeed);
    save_checkpoint(sharded, dir, tp);

    LocalCommunicator alone;
    GptModel loaded(alone, c.config, /*seed=*/kSeed + 1);  // different init: the file must win
    load_checkpoint(loaded, dir);
    const std::vector<int32_t> ids = random_ids(5, kBatch * kSeq, c.config.vocab_size);
    const std::vector<int32_t> targets = random_ids(6, kBatch * kSeq, c.config.vocab_size);
    const float sharded_loss = sharded.forward(ids, targets, kBatch, kSeq).mean();
    const float loaded_loss = loaded.forward(ids, targets, kBatch, kSeq).mean();
    EXPECT_NEAR(sharded_loss, loaded_loss, 1e-5 * std::fabs(loaded_loss));
    const std::vector<Parameter*> mine = sharded.parameters(), full = loaded.parameters();
    for (size_t i = 0; i < mine.size(); ++i) {
      EXPECT_TRUE(compare_shard(mine[i]->value, mine[i]->shard, full[i]->value).bitwise)
          << mine[i]->name;
    }
    // Saving the unsharded copy again reproduces the file byte for byte.
    const std::string again = dir + "_again_rank" + std::to_string(tp.rank());
    save_checkpoint(loaded, again, alone);
    EXPECT_EQ(read_bytes(dir + "/model.safetensors"), read_bytes(again + "/model.safetensors"));
    EXPECT_EQ(read_bytes(dir + "/config.json"), read_bytes(again + "/config.json"));
    std::filesystem::remove_all(again);
    tp.barrier();
    if (tp.rank() == 0) {
      std::filesystem::remove_all(dir);
    }
  }
}

TEST(GptModelTest, CheckpointSavedAtTp2LoadsAtTp4WithTheSameLoss) {
  Communicator& world_group = world();
  if (world_group.size() != 4) GTEST_SKIP() << "needs 4 ranks: tp 2 x dp 2, then tp 4";
  ProcessMesh mesh(world_group, /*tp=*/2, /*pp=*/1, /*dp=*/2);
  for (const ModelCase& c : model_cases()) {
    SCOPED_TRACE(c.name);
    if (!valid_at(c.config, 4)) continue;
    const std::string dir =
        shared_temp_dir(world_group, std::string("gpt_model_test_") + c.name + "_tp2");
    GptModel at_tp2(mesh.tp(), c.config, kSeed);
    if (mesh.dp_rank() == 0) save_checkpoint(at_tp2, dir, mesh.tp());  // one replica saves
    world_group.barrier();
    GptModel at_tp4(world_group, c.config, kSeed + 1);
    load_checkpoint(at_tp4, dir);
    const std::vector<int32_t> ids = random_ids(8, kBatch * kSeq, c.config.vocab_size);
    const std::vector<int32_t> targets = random_ids(9, kBatch * kSeq, c.config.vocab_size);
    const float loss2 = at_tp2.forward(ids, targets, kBatch, kSeq).mean();
    const float loss4 = at_tp4.forward(ids, targets, kBatch, kSeq).mean();
    EXPECT_NEAR(loss2, loss4, 1e-5 * std::fabs(loss2));
    world_group.barrier();
    if (world_group.rank() == 0) {
      std::filesystem::remove_all(dir);
    }
  }
}

TEST(GptModelTest, IndivisibleHeadsAreAConfigErrorOnEveryRank) {
  Communicator& tp = world();
  if (tp.size() != 3) GTEST_SKIP() << "the heads below divide by 1, 2 and 4";
  ModelConfig c = small_llama_config(4, 2, 32, false);
  try {
    GptModel model(tp, c, kSeed);
    ADD_FAILURE() << "no ConfigError";
  } catch (const ConfigError& e) {
    EXPECT_STREQ(e.what(),
                 "[config] n_head (4) must be divisible by tp (3). Choose tp in {1, 2, 4}.");
  }
}

// set_on_grads_ready (the dp overlap's signal): backward reports every
// parameter whose gradient it finishes exactly once, and the gradient it
// reports is already the final one; the head's group first, then the blocks
// last-first; never the embeddings (finished last, or by the caller), nor,
// under sequence parallelism at tp > 1, the parameters summed over tp at the
// end. Unset, it reports nothing.
TEST(GptModelTest, BackwardReportsEachFinishedGradientOnce) {
  Communicator& tp = world();
  for (const ModelCase& c : model_cases()) {
    if (!valid_at(c.config, tp.size())) continue;
    for (bool sp : {false, true}) {
      if (sp && kBatch * kSeq % tp.size() != 0) continue;
      SCOPED_TRACE(std::string(c.name) + (sp ? ", sequence parallel" : ""));
      GptModel model(tp, c.config, kSeed, sp);
      const std::vector<Parameter*> params = model.parameters();
      std::vector<int> reported(params.size(), 0);
      std::vector<std::vector<float>> when_reported(params.size());
      std::vector<size_t> first_of_each_call;
      model.set_on_grads_ready([&](const std::vector<size_t>& ready) {
        ASSERT_FALSE(ready.empty());
        first_of_each_call.push_back(ready.front());
        for (size_t i : ready) {
          ASSERT_LT(i, params.size());
          ++reported[i];
          when_reported[i] = params[i]->grad.to_vector();
        }
      });
      const std::vector<int32_t> ids = random_ids(1, kBatch * kSeq, c.config.vocab_size);
      const std::vector<int32_t> targets = random_ids(2, kBatch * kSeq, c.config.vocab_size);
      model.forward(ids, targets, kBatch, kSeq);
      model.backward();
      for (size_t i = 0; i < params.size(); ++i) {
        const Parameter& p = *params[i];
        const bool embedding = &p == model.word_embeddings() || p.name == "wpe.weight";
        const bool summed_at_end = sp && tp.size() > 1 && p.sequence_parallel;
        EXPECT_EQ(reported[i], embedding || summed_at_end ? 0 : 1) << p.name;
        if (reported[i] == 1) {
          EXPECT_EQ(when_reported[i], p.grad.to_vector()) << p.name << ": reported unfinished";
        }
      }
      // The head's group (after every block), then each block before the last.
      for (size_t call = 1; call < first_of_each_call.size(); ++call) {
        EXPECT_LT(first_of_each_call[call], first_of_each_call[call - 1]) << "call " << call;
      }
      const size_t calls = first_of_each_call.size();
      // The head's group is empty when it is only the final norm, summed at the end.
      const bool head_reports = !c.config.tie_word_embeddings || !(sp && tp.size() > 1);
      EXPECT_EQ(calls, static_cast<size_t>(c.config.n_layer) + (head_reports ? 1 : 0));
      model.set_on_grads_ready({});
      model.forward(ids, targets, kBatch, kSeq);
      model.backward();
      EXPECT_EQ(first_of_each_call.size(), calls) << "reported while unset";
    }
  }
}

// The output head and loss in token chunks (set_logits_chunk_bytes) against
// all tokens at once, at tp = world size, with and without sequence
// parallelism, fp32 and bf16, ignored targets included: chunks of 3 rows over
// 16 tokens (5 of 3 and one of 1). The chunks run the same kernels on fewer
// rows, but a GEMM of 3 rows may take another kernel (OpenBLAS's small-matrix
// paths, a GPU library's heuristics) that sums each element's d_model or
// V_pad/tp products in another order, and the head weight's gradient sums
// its tokens chunk by chunk (one fp32 partial sum per chunk): fp32 rounding,
// a few ulps of each logit and of the head's input gradient, which backward
// carries into every gradient. So the losses within 1e-6 relative and each
// gradient within 1e-5 of the model's largest entry (measured at tp 1-4:
// losses within 9e-8, gradients within 5e-7; printed), while a chunk left
// out or counted twice moves the loss and the gradients by O(1/6).
TEST(GptModelTest, LogitsInChunksGiveTheSameLossesAndGradients) {
  Communicator& tp = world();
  double worst_loss = 0.0, worst_grad = 0.0;
  for (const ModelCase& c : model_cases()) {
    if (!valid_at(c.config, tp.size())) continue;
    for (const bool sp : {false, true}) {
      if (sp && kBatch * kSeq % tp.size() != 0) continue;
      for (const DType dtype : {DType::kF32, DType::kBF16}) {
        SCOPED_TRACE(std::string(c.name) + (sp ? ", sequence parallel, " : ", ") +
                     dtype_name(dtype));
        GptModel whole(tp, c.config, kSeed, sp), chunked(tp, c.config, kSeed, sp);
        whole.set_logits_chunk_bytes(0);
        const int64_t row_bytes = chunked.vocab_size_local() * dtype_bytes(dtype);
        chunked.set_logits_chunk_bytes(3 * row_bytes);
        ASSERT_EQ(logits_chunk_rows(kBatch * kSeq, row_bytes, 3 * row_bytes), 3);
        const std::vector<int32_t> ids = random_ids(1, kBatch * kSeq, c.config.vocab_size);
        std::vector<int32_t> targets = random_ids(2, kBatch * kSeq, c.config.vocab_size);
        targets[4] = targets[9] = kIgnoreIndex;  // in the second and fourth chunks
        std::vector<std::vector<float>> losses;
        for (GptModel* model : {&whole, &chunked}) {
          model->set_compute_dtype(dtype);
          const CrossEntropyOutput out = model->forward(ids, targets, kBatch, kSeq);
          EXPECT_EQ(out.counted, kBatch * kSeq - 2);
          losses.push_back(out.losses.to(Device::cpu()).to_vector());
          model->backward();
        }
        ASSERT_EQ(losses[0].size(), losses[1].size());
        for (size_t t = 0; t < losses[0].size(); ++t) {
          const double err = std::fabs(double{losses[0][t]} - losses[1][t]);
          worst_loss = std::max(worst_loss, err / std::max(1.0, double{losses[0][t]}));
          EXPECT_LE(err, 1e-6 * std::max(1.0, double{losses[0][t]})) << "token " << t;
        }
        const std::vector<Parameter*> a = whole.parameters(), b = chunked.parameters();
        ASSERT_EQ(a.size(), b.size());
        const double largest = testing::largest_gradient(a);
        for (size_t i = 0; i < a.size(); ++i) {
          const std::vector<float> ga = a[i]->grad.to_vector(), gb = b[i]->grad.to_vector();
          double err = 0.0;
          for (size_t k = 0; k < ga.size(); ++k) {
            err = std::max(err, std::fabs(double{ga[k]} - gb[k]));
          }
          worst_grad = std::max(worst_grad, err / largest);
          EXPECT_LE(err, 1e-5 * largest) << a[i]->name;
        }
      }
    }
  }
  std::printf(
      "chunked head at tp %d: losses within %.2g relative, gradients within %.2g of "
      "the largest\n",
      tp.size(), worst_loss, worst_grad);
}

// An evaluating forward in chunks computes the losses only: the same losses,
// no gradient touched, and no backward after it. A training forward in chunks
// has computed the head's gradients: a second forward before backward is
// refused (they would count twice).
TEST(GptModelTest, ChunkedForwardPassesAreKeptApart) {
  Communicator& tp = world();
  const ModelConfig config = small_gpt2_config();
  GptModel model(tp, config, kSeed);
  model.set_logits_chunk_bytes(5 * model.vocab_size_local() * 4);
  const std::vector<int32_t> ids = random_ids(1, kBatch * kSeq, config.vocab_size);
  const std::vector<int32_t> targets = random_ids(2, kBatch * kSeq, config.vocab_size);
  const std::vector<float> evaluated =
      model.forward(ids, targets, kBatch, kSeq, GptModel::Pass::kEvaluate).losses.to_vector();
  for (Parameter* p : model.parameters()) {
    for (const float g : p->grad.to_vector()) ASSERT_EQ(g, 0.0f) << p->name;
  }
  EXPECT_THROW(model.backward(), InternalError);
  EXPECT_EQ(model.forward(ids, targets, kBatch, kSeq).losses.to_vector(), evaluated);
  EXPECT_THROW(model.forward(ids, targets, kBatch, kSeq), InternalError);
  model.backward();
  EXPECT_THROW(model.backward(), InternalError) << "a second backward of one forward";
  EXPECT_NO_THROW(model.forward(ids, targets, kBatch, kSeq, GptModel::Pass::kEvaluate));
  EXPECT_THROW(model.set_logits_chunk_bytes(-1), ConfigError);
}

// Under sequence parallelism the head region's partial input gradient lives
// in a buffer every SP region shares; a chunked training forward keeps its dh
// in the model's own until backward, so another model's forward and backward
// in between (two pipeline stages' replicas, or any caller's) leave it alone:
// A's gradients are those of A trained alone, bit for bit.
TEST(GptModelTest, ChunkedHeadGradientsOutliveAnotherModelsBackward) {
  Communicator& tp = world();
  if (kBatch * kSeq % tp.size() != 0) GTEST_SKIP() << "sequence parallelism needs tokens % tp";
  const ModelConfig config = small_gpt2_config();
  GptModel alone(tp, config, kSeed, /*sequence_parallel=*/true);
  GptModel a(tp, config, kSeed, true), b(tp, config, kSeed + 1, true);
  for (GptModel* m : {&alone, &a, &b}) m->set_logits_chunk_bytes(3 * m->vocab_size_local() * 4);
  const std::vector<int32_t> ids = random_ids(1, kBatch * kSeq, config.vocab_size);
  const std::vector<int32_t> targets = random_ids(2, kBatch * kSeq, config.vocab_size);
  const std::vector<int32_t> other = random_ids(3, kBatch * kSeq, config.vocab_size);
  alone.forward(ids, targets, kBatch, kSeq);
  alone.backward();
  a.forward(ids, targets, kBatch, kSeq);
  b.forward(other, other, kBatch, kSeq);
  b.backward();
  a.backward();
  const std::vector<Parameter*> want = alone.parameters(), got = a.parameters();
  for (size_t i = 0; i < want.size(); ++i) {
    EXPECT_EQ(got[i]->grad.to_vector(), want[i]->grad.to_vector()) << got[i]->name;
  }
}

TEST(GptModelTest, BadIdsAndShapesAreInvalidInput) {
  LocalCommunicator alone;
  GptModel model(alone, small_gpt2_config(), kSeed);
  std::vector<int32_t> ids(kBatch * kSeq, 1), targets(kBatch * kSeq, 1);
  EXPECT_THROW(model.forward(ids, targets, kBatch, kSeq + 1), InvalidInputError);
  ids[3] = 300;  // == vocab_size: outside the real vocabulary
  EXPECT_THROW(model.forward(ids, targets, kBatch, kSeq), InvalidInputError);
  std::vector<int32_t> long_ids(40, 1), long_targets(40, 1);  // seq 40 > 32 positions
  EXPECT_THROW(model.forward(long_ids, long_targets, 1, 40), InvalidInputError);
}

}  // namespace
}  // namespace colrow
