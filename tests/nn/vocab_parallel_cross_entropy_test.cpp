// VocabParallelCrossEntropy at tp = world size, classes split over the ranks:
// literature values (exact split and with padded classes, which hold junk
// logits and must change nothing), random logits with ignored rows and label
// smoothing against the double reference (support/vocab_reference.h) within
// fp32 bounds, the three backward variants, central finite differences, the
// same loss bits on every rank, exactly one small all-gather forward (none at tp 1) and
// none backward, ignore_index, bad targets and configuration errors.
#include "colrow/nn/vocab_parallel_cross_entropy.h"

#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "colrow/core/error.h"
#include "colrow/dist/recording_communicator.h"
#include "colrow/nn/vocab_parallel_embedding.h"
#include "nn/layer_test_helpers.h"
#include "nn/same_on_every_rank.h"
#include "support/test_world.h"
#include "support/vocab_reference.h"

namespace colrow {
namespace {

using reference::Matrix;
using testing::world;

// Padded classes get this logit: were they not masked, they would dominate.
constexpr float kJunk = 1000.0f;
// Roundings allowed against the reference magnitudes (vocab_reference.h: one
// per operation along the longest path, counted in the magnitude, times 2 for
// the O(u^2) terms); expect_within_bound allows gamma_k M >= k u M.
constexpr int64_t kRoundings = 2;

// [tokens, padded] with the real logits in the first `vocab` columns and junk after.
Tensor padded_logits(const std::vector<float>& real, int64_t tokens, int64_t vocab,
                     int64_t padded) {
  Tensor full = Tensor::full({tokens, padded}, kJunk);
  for (int64_t t = 0; t < tokens; ++t) {
    for (int64_t j = 0; j < vocab; ++j) full(t, j) = real[t * vocab + j];
  }
  return full;
}

Tensor my_columns(Communicator& tp, const Tensor& full) {
  return full.shard(1, tp.rank(), tp.size()).clone();
}

Matrix as_matrix(const std::vector<float>& v) {
  return Matrix(v.begin(), v.end());
}

// Literature values, computed with PyTorch's F.cross_entropy in float64.
struct LiteratureCase {
  const char* name;
  std::vector<float> logits;
  int64_t tokens, vocab;
  std::vector<int32_t> targets;
  double label_smoothing;  // the layer gets the nearest float (0.1f: 1.5e-9 off,
                           // moving the loss by 1e-9, far inside the bound)
  std::vector<double> losses;
};

const LiteratureCase kLiterature[] = {
    {"3 classes",
     {1, 2, 3, 0.5f, -0.5f, 1.0f},
     2,
     3,
     {2, 0},
     0.0f,
     {0.4076059644443806, 1.1041306053367284}},
    {"8 classes", {0, 1, 2, 3, 4, 5, 6, 7}, 1, 8, {3}, 0.0, {4.458339626479005}},
    {"8 classes, smoothing 0.1", {0, 1, 2, 3, 4, 5, 6, 7}, 1, 8, {3}, 0.1, {4.408339626479005}},
};

// Each case with the classes split exactly (multiple 1: 3 classes pad to 4 at
// tp 2 and 4, 8 to 9 at tp 3) and with Megatron's padding (multiple 128).
TEST(VocabParallelCrossEntropyTest, LiteratureCasesAtThisTp) {
  Communicator& tp = world();
  for (const LiteratureCase& c : kLiterature) {
    for (int64_t multiple : {1, 128}) {
      SCOPED_TRACE(std::string(c.name) + ", padding multiple " + std::to_string(multiple));
      const int64_t padded = padded_vocab_size(c.vocab, tp.size(), multiple);
      VocabParallelCrossEntropy ce(tp, c.vocab, padded, static_cast<float>(c.label_smoothing));
      const Tensor full = padded_logits(c.logits, c.tokens, c.vocab, padded);
      const CrossEntropyOutput out = ce.forward(my_columns(tp, full), c.targets);
      const auto ref = reference::cross_entropy(as_matrix(c.logits), c.targets, c.tokens, c.vocab,
                                                c.label_smoothing, -100, tp.size());
      for (int64_t t = 0; t < c.tokens; ++t) {
        EXPECT_NEAR(ref.losses[t], c.losses[t], 1e-14) << "the reference itself, row " << t;
      }
      testing::expect_within_bound("losses", out.losses, c.losses, ref.loss_mag, kRoundings);
      double mean = 0.0, mean_mag = 0.0;
      for (int64_t t = 0; t < c.tokens; ++t) mean += c.losses[t] / c.tokens;
      for (int64_t t = 0; t < c.tokens; ++t) mean_mag += ref.loss_mag[t] / c.tokens;
      EXPECT_NEAR(out.mean(), mean, reference::gamma(kRoundings + 1) * mean_mag);
      EXPECT_EQ(out.counted, c.tokens);
      EXPECT_TRUE(testing::same_on_every_rank(tp, out.losses));
      EXPECT_TRUE(testing::same_on_every_rank(tp, out.mean()));
    }
  }
}

// The gradient written over the logits is the separate one, bit for bit, in
// fp32 and bf16, with ignored rows and smoothing; it is the logits' storage.
TEST(VocabParallelCrossEntropyTest, GradientInPlaceEqualsTheSeparateOne) {
  Communicator& tp = world();
  constexpr int64_t kTokens = 9, kVocab = 37;
  const std::vector<int32_t> targets = {0, 36, 7, -100, 25, 13, 13, -100, 1};
  const int64_t padded = padded_vocab_size(kVocab, tp.size(), 8);
  const Tensor full = testing::random_tensor({kTokens, padded}, 33);
  for (DType dtype : {DType::kF32, DType::kBF16}) {
    for (float smoothing : {0.0f, 0.1f}) {
      SCOPED_TRACE(std::string(dtype_name(dtype)) + ", smoothing " + std::to_string(smoothing));
      const Tensor mine = my_columns(tp, full).clone().to(dtype);
      VocabParallelCrossEntropy separate(tp, kVocab, padded, smoothing);
      const CrossEntropyOutput a = separate.forward(mine, targets);
      const std::vector<float> want = separate.backward().to_vector();
      EXPECT_EQ(mine.to_vector(), my_columns(tp, full).to(dtype).to_vector()) << "logits kept";

      Tensor given = mine.clone();
      VocabParallelCrossEntropy in_place(tp, kVocab, padded, smoothing);
      in_place.set_gradient_in_place(true);
      const CrossEntropyOutput b = in_place.forward(given, targets);
      EXPECT_EQ(a.mean(), b.mean());
      const Tensor& got = in_place.backward();
      EXPECT_EQ(got.raw_data(), given.raw_data()) << "not written over the logits";
      EXPECT_EQ(got.dtype(), dtype);
      EXPECT_EQ(got.to_vector(), want);
      // A second backward would read the gradient as logits: refused.
      EXPECT_THROW(in_place.backward(), InternalError);
      // A second step on fresh logits: the same again.
      Tensor again = mine.clone();
      in_place.forward(again, targets);
      EXPECT_EQ(in_place.backward().to_vector(), want);
      // Off again: the gradient goes to the layer's own buffer, never into the
      // earlier logits, which stay the caller's (refilled with the logits, so
      // a gradient landing there shows).
      again.copy_from(mine);
      in_place.set_gradient_in_place(false);
      Tensor third = mine.clone();
      in_place.forward(third, targets);
      const Tensor& separate_again = in_place.backward();
      EXPECT_NE(separate_again.raw_data(), again.raw_data()) << "written into earlier logits";
      EXPECT_NE(separate_again.raw_data(), third.raw_data()) << "written over the logits";
      EXPECT_EQ(separate_again.to_vector(), want);
      EXPECT_EQ(again.to_vector(), mine.to_vector());
      EXPECT_EQ(third.to_vector(), mine.to_vector());
    }
  }
}

// Random logits in [-4, 4) over 50 classes, targets everywhere in the
// vocabulary, two rows ignored; with and without smoothing; exact split
// (multiple 1) and padded (multiple 8). Loss, mean and dlogits against the
// reference; padded columns and ignored rows exactly zero; the same bits on
// every rank.
TEST(VocabParallelCrossEntropyTest, RandomLogitsMatchReference) {
  Communicator& tp = world();
  constexpr int64_t kTokens = 12, kVocab = 50;
  const std::vector<int32_t> targets = {0, 49, 7, -100, 25, 13, 13, 38, -100, 1, 48, 30};
  const Tensor real = testing::random_tensor({kTokens, kVocab}, 21);
  std::vector<float> values = real.to_vector();
  for (float& v : values) v *= 4.0f;
  for (float smoothing : {0.0f, 0.1f}) {
    for (int64_t multiple : {1, 8}) {
      SCOPED_TRACE("smoothing " + std::to_string(smoothing) + ", multiple " +
                   std::to_string(multiple));
      const int64_t padded = padded_vocab_size(kVocab, tp.size(), multiple);
      VocabParallelCrossEntropy ce(tp, kVocab, padded, smoothing);
      EXPECT_EQ(ce.vocab_size_local(), padded / tp.size());
      EXPECT_EQ(ce.vocab_start(), tp.rank() * padded / tp.size());
      const Tensor full = padded_logits(values, kTokens, kVocab, padded);
      const Tensor local = my_columns(tp, full);
      const CrossEntropyOutput out = ce.forward(local, targets);
      const auto ref = reference::cross_entropy(as_matrix(values), targets, kTokens, kVocab,
                                                smoothing, -100, tp.size());
      testing::expect_within_bound("losses", out.losses, ref.losses, ref.loss_mag, kRoundings);
      double mean_mag = 0.0;
      for (double m : ref.loss_mag) mean_mag += m / ref.counted;
      EXPECT_NEAR(out.mean(), ref.mean, reference::gamma(kRoundings + 1) * mean_mag);
      EXPECT_EQ(out.counted, 10);
      EXPECT_EQ(out.losses.to_vector()[3], 0.0f);
      EXPECT_EQ(out.losses.to_vector()[8], 0.0f);
      EXPECT_TRUE(testing::same_on_every_rank(tp, out.losses));
      EXPECT_TRUE(testing::same_on_every_rank(tp, out.mean()));

      // backward(): the mean's gradient, 1/counted per row.
      auto check_grad = [&](const Tensor& dlogits_local, const std::vector<double>& scale,
                            const char* what) {
        SCOPED_TRACE(what);
        const Tensor gathered = testing::gather_shards(tp, dlogits_local, 1);
        Matrix want = ref.dlogits, mag = ref.dlogits_mag;
        for (int64_t t = 0; t < kTokens; ++t) {
          for (int64_t j = 0; j < kVocab; ++j) {
            want[t * kVocab + j] *= scale[t];
            mag[t * kVocab + j] *= std::fabs(scale[t]);
          }
        }
        testing::expect_within_bound("dlogits", gathered.slice(1, 0, kVocab), want, mag,
                                     kRoundings);
        const Tensor pad = gathered.slice(1, kVocab, padded - kVocab);
        testing::expect_bitwise("padded columns", pad, Matrix(pad.numel(), 0.0));
        for (int64_t t : {3, 8}) {
          testing::expect_bitwise("ignored row", gathered.slice(0, t, 1),
                                  Matrix(gathered.size(1), 0.0));
        }
      };
      check_grad(ce.backward(), std::vector<double>(kTokens, 1.0 / 10), "backward()");
      check_grad(ce.backward(3.0f), std::vector<double>(kTokens, 3.0), "backward(3)");
      const Tensor dloss = testing::random_tensor({kTokens}, 22);
      const std::vector<float> dl = dloss.to_vector();
      check_grad(ce.backward(dloss), std::vector<double>(dl.begin(), dl.end()), "backward(dloss)");
    }
  }
}

// Logits far from 0 and far apart: a large common offset (the max shift),
// one dominant class 200 above the rest (every other exp underflows past the
// e^-87 cutoff), the first classes 500 below the rest (at tp > 1 whole ranks
// hold only them: their local max sits far below the global one), all equal,
// a -inf logit (a masked class: probability exactly 0), and the first half of
// the classes -inf (at tp > 1 whole ranks hold only -inf). Against the
// reference, with smoothing (the logit sums) and without.
TEST(VocabParallelCrossEntropyTest, ExtremeLogits) {
  Communicator& tp = world();
  constexpr int64_t kTokens = 6, kVocab = 24;
  const std::vector<int32_t> targets = {3, 7, 20, 11, 5, 20};
  std::vector<float> values = testing::random_tensor({kTokens, kVocab}, 61).to_vector();
  for (int64_t j = 0; j < kVocab; ++j) {
    values[0 * kVocab + j] += 1000.0f;
    if (j == 9) values[1 * kVocab + j] = 200.0f;
    if (j < 12) values[2 * kVocab + j] -= 500.0f;
    values[3 * kVocab + j] = 0.5f;
    if (j < 12) values[5 * kVocab + j] = -INFINITY;
  }
  values[4 * kVocab + 2] = -INFINITY;
  for (float smoothing : {0.0f, 0.1f}) {
    SCOPED_TRACE("smoothing " + std::to_string(smoothing));
    // Smoothing puts weight on every class, so over a -inf logit the loss is
    // +inf (as PyTorch's); those rows are checked apart.
    const std::vector<int64_t> rows =
        smoothing > 0 ? std::vector<int64_t>{0, 1, 2, 3} : std::vector<int64_t>{0, 1, 2, 3, 4, 5};
    const int64_t padded = padded_vocab_size(kVocab, tp.size(), 1);
    VocabParallelCrossEntropy ce(tp, kVocab, padded, smoothing);
    const Tensor full = padded_logits(values, kTokens, kVocab, padded);
    const CrossEntropyOutput out = ce.forward(my_columns(tp, full), targets);
    const Tensor grad = testing::gather_shards(tp, ce.backward(1.0f), 1);
    const auto ref = reference::cross_entropy(as_matrix(values), targets, kTokens, kVocab,
                                              smoothing, -100, tp.size());
    const std::vector<float> losses = out.losses.to_vector();
    for (int64_t t : rows) {
      EXPECT_NEAR(losses[t], ref.losses[t], reference::gamma(kRoundings) * ref.loss_mag[t])
          << "row " << t;
      for (int64_t j = 0; j < kVocab; ++j) {
        EXPECT_NEAR(grad(t, j), ref.dlogits[t * kVocab + j],
                    reference::gamma(kRoundings) * ref.dlogits_mag[t * kVocab + j])
            << "row " << t << ", class " << j;
      }
    }
    if (smoothing > 0) {
      EXPECT_EQ(losses[4], INFINITY) << "smoothing over a -inf logit";
      EXPECT_EQ(losses[5], INFINITY) << "smoothing over -inf logits";
    } else {
      EXPECT_EQ(grad(4, 2), 0.0f) << "a -inf logit has probability 0";
      for (int64_t j = 0; j < 12; ++j) EXPECT_EQ(grad(5, j), 0.0f) << "class " << j;
    }
    EXPECT_TRUE(testing::same_on_every_rank(tp, out.losses));
  }
}

// A NaN logit (a diverged run) makes that row's loss and gradient NaN on
// every rank and leaves the other rows as they were. Under the sanitizers
// this once was undefined behaviour (the fast exp built 2^n from NaN's
// integer conversion), which scripts/sanitize.sh reports.
TEST(VocabParallelCrossEntropyTest, NanLogitStaysInItsRow) {
  Communicator& tp = world();
  constexpr int64_t kTokens = 3, kVocab = 24;
  const std::vector<int32_t> targets = {3, 7, 20};
  std::vector<float> values = testing::random_tensor({kTokens, kVocab}, 62).to_vector();
  const std::vector<float> clean = values;
  values[1 * kVocab + 5] = NAN;
  const int64_t padded = padded_vocab_size(kVocab, tp.size(), 1);
  VocabParallelCrossEntropy ce(tp, kVocab, padded, 0.0f);
  const CrossEntropyOutput out =
      ce.forward(my_columns(tp, padded_logits(values, kTokens, kVocab, padded)), targets);
  const Tensor grad = testing::gather_shards(tp, ce.backward(1.0f), 1);
  VocabParallelCrossEntropy clean_ce(tp, kVocab, padded, 0.0f);
  const CrossEntropyOutput clean_out =
      clean_ce.forward(my_columns(tp, padded_logits(clean, kTokens, kVocab, padded)), targets);
  const Tensor clean_grad = testing::gather_shards(tp, clean_ce.backward(1.0f), 1);
  const std::vector<float> losses = out.losses.to_vector();
  const std::vector<float> clean_losses = clean_out.losses.to_vector();
  EXPECT_TRUE(std::isnan(losses[1]));
  for (int64_t j = 0; j < kVocab; ++j) EXPECT_TRUE(std::isnan(grad(1, j))) << "class " << j;
  for (int64_t t : {0, 2}) {
    EXPECT_EQ(losses[t], clean_losses[t]) << "row " << t;
    for (int64_t j = 0; j < kVocab; ++j) EXPECT_EQ(grad(t, j), clean_grad(t, j)) << "row " << t;
  }
}

// Central differences of the mean loss (fp32, from forward) for every logit
// of every rank's shard, one rank's element at a time (every rank evaluates
// the loss, which is a collective), against backward(). Errors:
//  - rounding: each fp32 mean errs by at most E = gamma(3) mean_t M_t; the
//    difference divides two such errors by 2h: E / h (doubled for the move of
//    M with the perturbation);
//  - truncation: estimated on the double reference by Richardson,
//    4/3 |D(h) - D(h/2)|, doubled;
//  - the backward's rounding, gamma(2) M_dlogit / counted.
// Padded logits are never read: their difference must be exactly 0, as their
// gradient. h = 2^-6 keeps x +- h exact for these inputs.
TEST(VocabParallelCrossEntropyTest, BackwardMatchesFiniteDifferences) {
  Communicator& tp = world();
  constexpr int64_t kTokens = 3, kVocab = 5;
  constexpr float kStep = 0x1p-6f;
  const std::vector<int32_t> targets = {4, -100, 0};
  const Tensor real = testing::random_tensor({kTokens, kVocab}, 31);
  for (float smoothing : {0.0f, 0.1f}) {
    SCOPED_TRACE("smoothing " + std::to_string(smoothing));
    const int64_t padded = padded_vocab_size(kVocab, tp.size(), 1);
    VocabParallelCrossEntropy ce(tp, kVocab, padded, smoothing);
    const Tensor full = padded_logits(real.to_vector(), kTokens, kVocab, padded);
    Tensor local = my_columns(tp, full);
    ce.forward(local, targets);
    const Tensor grad = testing::gather_shards(tp, ce.backward(), 1);
    const std::vector<float> base = real.to_vector();
    const auto ref = reference::cross_entropy(as_matrix(base), targets, kTokens, kVocab, smoothing,
                                              -100, tp.size());
    double mean_mag = 0.0;
    for (double m : ref.loss_mag) mean_mag += m / ref.counted;
    const double rounding = 2.0 * reference::gamma(kRoundings + 1) * mean_mag / kStep;
    auto reference_mean = [&](int64_t t, int64_t j, double h) {
      Matrix m = as_matrix(base);
      m[t * kVocab + j] += h;
      return reference::cross_entropy(m, targets, kTokens, kVocab, smoothing, -100).mean;
    };
    auto reference_difference = [&](int64_t t, int64_t j, double h) {
      return (reference_mean(t, j, h) - reference_mean(t, j, -h)) / (2.0 * h);
    };

    const int64_t v_local = padded / tp.size();
    for (int owner = 0; owner < tp.size(); ++owner) {
      for (int64_t t = 0; t < kTokens; ++t) {
        for (int64_t jl = 0; jl < v_local; ++jl) {
          const int64_t j = owner * v_local + jl;
          float* v = tp.rank() == owner ? &local(t, jl) : nullptr;
          const float original = v ? *v : 0.0f;
          if (v) *v = original + kStep;
          const double plus = ce.forward(local, targets).mean();
          if (v) *v = original - kStep;
          const double minus = ce.forward(local, targets).mean();
          if (v) *v = original;
          const double fd = (plus - minus) / (2.0 * kStep);
          if (j >= kVocab) {
            EXPECT_EQ(fd, 0.0) << "padded class " << j << " changed the loss";
            EXPECT_EQ(grad(t, j), 0.0f) << "padded class " << j << " has a gradient";
            continue;
          }
          const double truncation =
              2.0 * 4.0 / 3.0 *
              std::fabs(reference_difference(t, j, kStep) - reference_difference(t, j, kStep / 2));
          const double tol =
              rounding + truncation +
              reference::gamma(kRoundings) * ref.dlogits_mag[t * kVocab + j] / ref.counted;
          EXPECT_NEAR(grad(t, j), fd, tol) << "row " << t << ", class " << j;
        }
      }
    }
  }
}

// Forward: one all_gather of the [tokens, 4] partials (max, sum of exps,
// target logit, logit sum), none on a group of one. Never an all-gather of
// logits. Backward: nothing.
TEST(VocabParallelCrossEntropyTest, OneSmallAllGatherForwardNoneBackward) {
  RecordingCommunicator tp(world());
  constexpr int64_t kTokens = 6, kVocab = 40;
  const std::vector<int32_t> targets = {1, 2, 3, -100, 39, 0};
  for (float smoothing : {0.0f, 0.1f}) {
    SCOPED_TRACE("smoothing " + std::to_string(smoothing));
    const int64_t padded = padded_vocab_size(kVocab, tp.size());
    VocabParallelCrossEntropy ce(tp, kVocab, padded, smoothing);
    EXPECT_TRUE(tp.events().empty()) << "construction communicates";
    const Tensor full = padded_logits(testing::random_tensor({kTokens, kVocab}, 41).to_vector(),
                                      kTokens, kVocab, padded);
    const Tensor local = my_columns(tp, full);
    tp.clear();
    ce.forward(local, targets);
    std::vector<CollectiveEvent> expected;
    if (tp.size() > 1) expected.push_back({"all_gather", 4 * kTokens, 0.0});
    EXPECT_EQ(tp.events(), expected) << "forward";
    tp.clear();
    ce.backward();
    ce.backward(0.5f);
    ce.backward(Tensor::full({kTokens}, 1.0f));
    EXPECT_TRUE(tp.events().empty()) << "backward communicates";
  }
}

// Rows whose target is ignore_index: zero loss, zero gradient, not counted.
// All rows ignored: the mean is NaN (PyTorch's 0/0) and the gradient zero.
TEST(VocabParallelCrossEntropyTest, IgnoredRows) {
  Communicator& tp = world();
  constexpr int64_t kTokens = 4, kVocab = 12;
  const int64_t padded = padded_vocab_size(kVocab, tp.size(), 1);
  const Tensor full = padded_logits(testing::random_tensor({kTokens, kVocab}, 51).to_vector(),
                                    kTokens, kVocab, padded);
  const Tensor local = my_columns(tp, full);

  // A custom ignore_index inside the vocabulary: class 7 is never a target.
  VocabParallelCrossEntropy ce(tp, kVocab, padded, 0.0f, /*ignore_index=*/7);
  const CrossEntropyOutput some = ce.forward(local, {7, 3, 7, 11});
  EXPECT_EQ(some.counted, 2);
  const std::vector<float> losses = some.losses.to_vector();
  EXPECT_EQ(losses[0], 0.0f);
  EXPECT_EQ(losses[2], 0.0f);
  EXPECT_GT(losses[1], 0.0f);
  EXPECT_FLOAT_EQ(some.mean(), (losses[1] + losses[3]) / 2.0f);
  const Tensor grad = testing::gather_shards(tp, ce.backward(), 1);
  for (int64_t j = 0; j < padded; ++j) {
    EXPECT_EQ(grad(0, j), 0.0f);
    EXPECT_EQ(grad(2, j), 0.0f);
  }

  VocabParallelCrossEntropy default_ignore(tp, kVocab, padded);
  EXPECT_EQ(default_ignore.ignore_index(), -100);
  const CrossEntropyOutput none = default_ignore.forward(local, {-100, -100, -100, -100});
  EXPECT_EQ(none.counted, 0);
  EXPECT_TRUE(std::isnan(none.mean()));
  for (float v : none.losses.to_vector()) EXPECT_EQ(v, 0.0f);
  for (float v : default_ignore.backward().to_vector()) EXPECT_EQ(v, 0.0f);
}

// loss_sum adds in double, token by token; mean_loss divides once and rounds
// once; anything but fp32 [tokens] is an InternalError, even with nothing
// counted.
TEST(VocabParallelCrossEntropyTest, LossSumAndMean) {
  // An fp32 running sum would drop the 2^-30 terms; the double keeps them.
  const Tensor losses = Tensor::from_vector({5}, {1.0f, 0x1p-30f, 0.0f, 0x1p-30f, 3.0f});
  EXPECT_EQ(loss_sum(losses), 4.0 + 0x1p-29);
  EXPECT_EQ(mean_loss(losses, 3), static_cast<float>((4.0 + 0x1p-29) / 3.0));
  EXPECT_TRUE(std::isnan(mean_loss(losses, 0)));
  EXPECT_THROW(loss_sum(Tensor::zeros({2, 3})), InternalError);
  EXPECT_THROW(mean_loss(Tensor::zeros({2, 3}), 0), InternalError);
  EXPECT_THROW(loss_sum(Tensor::zeros({4}).to(DType::kBF16)), InternalError);
}

template <typename E, typename Fn>
void expect_error(Fn&& fn, const std::string& expected) {
  try {
    fn();
    ADD_FAILURE() << "no exception; expected: " << expected;
  } catch (const E& e) {
    EXPECT_EQ(std::string(e.what()), expected);
  } catch (const std::exception& e) {
    ADD_FAILURE() << "wrong exception kind: " << e.what();
  }
}

// A target outside the vocabulary (padded classes included) that is not
// ignore_index: the same InvalidInputError on every rank, before any collective.
TEST(VocabParallelCrossEntropyTest, BadTargetIsInvalidInputOnEveryRankBeforeAnyCollective) {
  RecordingCommunicator tp(world());
  constexpr int64_t kVocab = 10;
  const int64_t padded = padded_vocab_size(kVocab, tp.size());  // > 10: padded classes exist
  VocabParallelCrossEntropy ce(tp, kVocab, padded);
  const Tensor local = Tensor::zeros({3, padded / tp.size()});
  expect_error<InvalidInputError>(
      [&] {
        ce.forward(local, {1, 10, 2});
      },
      "[cross_entropy] target (10) at position 1 must be in [0, vocab_size (10)) or be "
      "ignore_index (-100). Check that the labels match the model's vocabulary.");
  expect_error<InvalidInputError>(
      [&] {
        ce.forward(local, {-1, 0, 0});
      },
      "[cross_entropy] target (-1) at position 0 must be in [0, vocab_size (10)) or be "
      "ignore_index (-100). Check that the labels match the model's vocabulary.");
  EXPECT_TRUE(tp.events().empty()) << "a collective ran before the check";
  EXPECT_THROW(ce.forward(Tensor::zeros({2, padded / tp.size()}), {1, 2, 3}), InternalError);
  EXPECT_THROW(ce.forward(Tensor::zeros({3, padded / tp.size() + 1}), {1, 2, 3}), InternalError);
  tp.barrier();  // every rank got here: nothing is left waiting
}

TEST(VocabParallelCrossEntropyTest, ConfigErrors) {
  Communicator& tp = world();
  const int n = tp.size();
  const int64_t padded = padded_vocab_size(10, n);
  expect_error<ConfigError>(
      [&] { VocabParallelCrossEntropy ce(tp, 10, padded, 1.5f); },
      "[cross_entropy] label_smoothing (1.5) must be in [0, 1]. Use 0 for none, 0.1 as is common.");
  expect_error<ConfigError>(
      [&] { VocabParallelCrossEntropy ce(tp, 10, padded, -0.1f); },
      "[cross_entropy] label_smoothing (-0.1) must be in [0, 1]. Use 0 for none, 0.1 as is "
      "common.");
  EXPECT_THROW(VocabParallelCrossEntropy(tp, 10, padded, NAN), ConfigError);
  expect_error<ConfigError>([&] { VocabParallelCrossEntropy ce(tp, 0, padded); },
                            "[cross_entropy] vocab_size (0) must be positive.");
  expect_error<ConfigError>(
      [&] { VocabParallelCrossEntropy ce(tp, 50257, 50000); },
      "[cross_entropy] padded_vocab_size (50000) must be >= vocab_size (50257). Use "
      "padded_vocab_size(vocab_size, tp) = " +
          std::to_string(padded_vocab_size(50257, n)) + ".");
  if (const BadSize* bad = bad_size_for(n)) {
    expect_error<ConfigError>([&] { VocabParallelCrossEntropy ce(tp, bad->value, bad->value); },
                              "[cross_entropy] padded_vocab_size (" + std::to_string(bad->value) +
                                  ") must be divisible by tp (" + std::to_string(n) +
                                  "). Choose tp in " + bad->choices + ".");
  }
  tp.barrier();  // every rank got here
}

}  // namespace
}  // namespace colrow
