// The CPU cross-entropy pieces (kernels/cpu/cross_entropy.h) on one rank's
// whole vocabulary and split over emulated ranks, against a double reference
// of the label-smoothed loss and its gradient: a padded column that no real
// class owns, an ignored row, a rank with no real class, -inf logits, a NaN
// logit, the refusals of label smoothing without a vocabulary size, and
// chunks of a batch's rows (first_row, tokens) against the whole batch.
#include "kernels/cpu/cross_entropy.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "colrow/core/error.h"
#include "colrow/core/philox.h"

namespace colrow {
namespace {

namespace cpu = kernels::cpu;

constexpr int64_t kTokens = 5, kReal = 7, kPadded = 8;
constexpr float kSmoothing = 0.1f;

struct Problem {
  Tensor logits{Tensor::empty({kTokens, kPadded})};
  std::vector<int32_t> targets = {3, 0, -100, 6, 2};  // row 2 is ignored
  kernels::CrossEntropyRows rows;
  Problem() {
    const uint64_t stream = name_stream("cross_entropy_test");
    for (int64_t i = 0; i < logits.numel(); ++i) {
      logits.data()[i] = 8.0f * uniform01(1, stream, static_cast<uint64_t>(i)) - 4.0f;
    }
    rows.targets = &targets;
    rows.real = kReal;
    rows.vocab_size = kReal;
    rows.vocab_size_local = kPadded;
    rows.label_smoothing = kSmoothing;
  }
};

// loss_t = -sum_j q_j log p_j with q = (1 - a) onehot + a / V over the real
// classes; its gradient over logit j is p_j - q_j (0 on the ignored row and
// the padded column).
struct Reference {
  std::vector<double> loss, grad;
};
Reference reference(const Problem& p) {
  Reference r{std::vector<double>(kTokens, 0.0), std::vector<double>(kTokens * kPadded, 0.0)};
  for (int64_t t = 0; t < kTokens; ++t) {
    if (p.targets[t] == p.rows.ignore_index) continue;
    double m = -INFINITY, s = 0.0;
    for (int64_t j = 0; j < kReal; ++j) m = std::max(m, double{p.logits(t, j)});
    for (int64_t j = 0; j < kReal; ++j) s += std::exp(double{p.logits(t, j)} - m);
    for (int64_t j = 0; j < kReal; ++j) {
      const double log_p = double{p.logits(t, j)} - m - std::log(s);
      const double q = (j == p.targets[t] ? 1.0 - kSmoothing : 0.0) + kSmoothing / kReal;
      r.loss[t] -= q * log_p;
      r.grad[t * kPadded + j] = std::exp(log_p) - q;
    }
  }
  return r;
}

// The loss and gradient of `logits` split into `ranks` column blocks of
// `v_local`: each block's partials, stacked in rank order as the all-gather
// leaves them, combined, then each block's backward.
struct Split {
  Tensor losses, grad;
};
Split split_run(const Tensor& logits, const kernels::CrossEntropyRows& base, int64_t ranks,
                int64_t v_local) {
  const int64_t tokens = logits.size(0);
  Tensor gathered = Tensor::empty({ranks * tokens, kernels::kCrossEntropyPartials});
  auto rows_of = [&](int64_t r) {
    kernels::CrossEntropyRows rows = base;
    rows.vocab_start = r * v_local;
    rows.real = std::clamp(base.vocab_size - r * v_local, int64_t{0}, v_local);
    rows.vocab_size_local = v_local;
    return rows;
  };
  for (int64_t r = 0; r < ranks; ++r) {
    Tensor block = gathered.slice(0, r * tokens, tokens);
    cpu::cross_entropy_partials(logits.slice(1, r * v_local, v_local), rows_of(r), block);
  }
  Tensor max = Tensor::empty({tokens}), sum_exp = Tensor::empty({tokens});
  Split out{Tensor::empty({tokens}), Tensor::full({tokens, ranks * v_local}, 7.0f)};
  cpu::cross_entropy_combine(gathered, rows_of(0), max, sum_exp, out.losses);
  for (int64_t r = 0; r < ranks; ++r) {
    Tensor grad = Tensor::empty({tokens, v_local});
    cpu::cross_entropy_backward(logits.slice(1, r * v_local, v_local), rows_of(r), max, sum_exp,
                                nullptr, 1.0f, grad);
    out.grad.slice(1, r * v_local, v_local).copy_from(grad);
  }
  return out;
}

TEST(CpuCrossEntropyTest, SmoothedLossAndGradientMatchDouble) {
  const Problem p;
  const Reference want = reference(p);
  // (ranks, columns each): one rank with the padded column; two of 4; three
  // of 3, the last holding 1 real class and 2 padded; four of 3, the last
  // with no real class.
  for (const auto& [ranks, v_local] :
       {std::pair<int64_t, int64_t>{1, kPadded}, {2, 4}, {3, 3}, {4, 3}}) {
    SCOPED_TRACE(std::to_string(ranks) + " ranks");
    Tensor logits = Tensor::full({kTokens, ranks * v_local}, std::nanf(""));  // padding: never read
    logits.slice(1, 0, kReal).copy_from(p.logits.slice(1, 0, kReal));
    const Split got = split_run(logits, p.rows, ranks, v_local);
    // Logits within [-4, 4): every term is O(10) at most and the sums have 7
    // terms, so fp32's few roundings stay far below 1e-5 of the loss's size.
    for (int64_t t = 0; t < kTokens; ++t) {
      EXPECT_NEAR(got.losses.data()[t], want.loss[t], 1e-5 * std::max(1.0, want.loss[t])) << t;
      for (int64_t j = 0; j < ranks * v_local; ++j) {
        const double g = j < kReal ? want.grad[t * kPadded + j] : 0.0;
        EXPECT_NEAR(got.grad(t, j), g, 1e-6) << t << ", " << j;
      }
    }
  }
}

// A -inf logit has no mass and a finite loss (+inf under label smoothing, as
// PyTorch: a/V log p_j is -inf), also where every real logit of one rank is
// -inf (that rank's max is -inf); a NaN logit makes its row's loss NaN, on
// the rank that holds it or not, and leaves the other rows alone.
TEST(CpuCrossEntropyTest, InfiniteAndNanLogits) {
  for (const float smoothing : {0.0f, kSmoothing}) {
    Problem p;
    p.rows.label_smoothing = smoothing;
    p.logits(0, 5) = -INFINITY;                                      // row 0's target is 3
    for (int64_t j = 4; j < kReal; ++j) p.logits(1, j) = -INFINITY;  // row 1's target is 0
    p.logits(4, 6) = std::nanf("");
    for (const int64_t ranks : {1, 2}) {  // 2 ranks: columns 4..6 are rank 1's real ones
      SCOPED_TRACE(std::to_string(ranks) + " ranks, smoothing " + std::to_string(smoothing));
      const Split got = split_run(p.logits, p.rows, ranks, kPadded / ranks);
      const float* loss = got.losses.data();
      for (const int64_t row : {0, 1}) {
        if (smoothing > 0.0f) {
          EXPECT_EQ(loss[row], INFINITY) << "row " << row;
        } else {
          EXPECT_TRUE(std::isfinite(loss[row])) << "row " << row << ": " << loss[row];
        }
      }
      if (smoothing == 0.0f) {
        EXPECT_EQ(got.grad(0, 5), 0.0f);
        for (int64_t j = 4; j < kReal; ++j) EXPECT_EQ(got.grad(1, j), 0.0f) << j;
      }
      EXPECT_TRUE(std::isnan(loss[4]));
      EXPECT_TRUE(std::isfinite(loss[3])) << loss[3];
      EXPECT_EQ(loss[2], 0.0f) << "the ignored row";
    }
  }
}

TEST(CpuCrossEntropyTest, SmoothingWithoutAVocabularyIsRefused) {
  Problem p;
  p.rows.vocab_size = 0;  // unset: a / V would divide by zero
  Tensor partials = Tensor::empty({kTokens, kernels::kCrossEntropyPartials});
  Tensor max = Tensor::zeros({kTokens}), sum_exp = Tensor::full({kTokens}, 1.0f);
  Tensor losses = Tensor::empty({kTokens});
  cpu::cross_entropy_partials(p.logits, p.rows, partials);
  EXPECT_THROW(cpu::cross_entropy_combine(partials, p.rows, max, sum_exp, losses), InternalError);
  Tensor grad = Tensor::empty({kTokens, kPadded});
  EXPECT_THROW(cpu::cross_entropy_backward(p.logits, p.rows, max, sum_exp, nullptr, 1.0f, grad),
               InternalError);
  p.rows.label_smoothing = 0.0f;  // without smoothing the size is not used
  EXPECT_NO_THROW(cpu::cross_entropy_backward(p.logits, p.rows, max, sum_exp, nullptr, 1.0f, grad));
}

// The combine counts each rank's real classes from vocab_size_local, and the
// gathered rows must be whole ranks of tokens.
TEST(CpuCrossEntropyTest, CombineShapesAreChecked) {
  Problem p;
  Tensor partials = Tensor::empty({kTokens, kernels::kCrossEntropyPartials});
  cpu::cross_entropy_partials(p.logits, p.rows, partials);
  Tensor max = Tensor::empty({kTokens}), sum_exp = Tensor::empty({kTokens});
  Tensor losses = Tensor::empty({kTokens});
  kernels::CrossEntropyRows unset = p.rows;
  unset.vocab_size_local = 0;
  EXPECT_THROW(cpu::cross_entropy_combine(partials, unset, max, sum_exp, losses), InternalError);
  unset.label_smoothing = 0.0f;  // the count only weighs label smoothing's sum
  EXPECT_NO_THROW(cpu::cross_entropy_combine(partials, unset, max, sum_exp, losses));
  const Tensor ragged = Tensor::zeros({kTokens + 1, kernels::kCrossEntropyPartials});
  EXPECT_THROW(cpu::cross_entropy_combine(ragged, p.rows, max, sum_exp, losses), InternalError);
  const Tensor none = Tensor::zeros({0, kernels::kCrossEntropyPartials});
  EXPECT_THROW(cpu::cross_entropy_combine(none, p.rows, max, sum_exp, losses), InternalError)
      << "no rank's partials";
  Tensor narrow = Tensor::empty({kTokens, 2});
  EXPECT_THROW(cpu::cross_entropy_partials(p.logits, p.rows, narrow), InternalError);
}

// A chunk of the batch's rows (the output head in token chunks) reads its
// own targets, [first_row, first_row + tokens) of the batch's: its loss and
// gradient are the whole batch's rows, bit for bit, split over ranks or not.
TEST(CpuCrossEntropyTest, RowChunksAreTheBatchsRows) {
  const Problem p;
  for (const int64_t ranks : {1, 2}) {
    SCOPED_TRACE(std::to_string(ranks) + " ranks");
    const Split whole = split_run(p.logits, p.rows, ranks, kPadded / ranks);
    // Chunks of 2, 2 and 1 rows; the middle one holds the ignored row.
    for (const auto& [first, count] : {std::pair<int64_t, int64_t>{0, 2}, {2, 2}, {4, 1}}) {
      kernels::CrossEntropyRows rows = p.rows;
      rows.first_row = first;
      rows.tokens = count;
      const Split chunk = split_run(p.logits.slice(0, first, count), rows, ranks, kPadded / ranks);
      for (int64_t t = 0; t < count; ++t) {
        EXPECT_EQ(chunk.losses.data()[t], whole.losses.data()[first + t]) << first + t;
        for (int64_t j = 0; j < kPadded; ++j) {
          EXPECT_EQ(chunk.grad(t, j), whole.grad(first + t, j)) << first + t << ", " << j;
        }
      }
    }
    // The last rows by tokens < 0: from first_row to the end.
    kernels::CrossEntropyRows tail = p.rows;
    tail.first_row = 3;
    const Split rest = split_run(p.logits.slice(0, 3, 2), tail, ranks, kPadded / ranks);
    EXPECT_EQ(rest.losses.data()[1], whole.losses.data()[4]);
  }
}

// Rows past the targets, or a negative first row, are refused by every piece.
TEST(CpuCrossEntropyTest, RowChunksOutsideTheTargetsAreRefused) {
  const Problem p;
  Tensor partials = Tensor::empty({2, kernels::kCrossEntropyPartials});
  Tensor max = Tensor::zeros({2}), sum_exp = Tensor::full({2}, 1.0f), losses = Tensor::empty({2});
  Tensor grad = Tensor::empty({2, kPadded});
  const Tensor logits = p.logits.slice(0, 0, 2);
  for (const auto& [first, count] : {std::pair<int64_t, int64_t>{4, 2}, {-1, 2}, {6, -1}}) {
    SCOPED_TRACE(std::to_string(first) + ", " + std::to_string(count));
    kernels::CrossEntropyRows rows = p.rows;
    rows.first_row = first;
    rows.tokens = count;
    EXPECT_THROW(cpu::cross_entropy_partials(logits, rows, partials), InternalError);
    EXPECT_THROW(cpu::cross_entropy_combine(partials, rows, max, sum_exp, losses), InternalError);
    EXPECT_THROW(cpu::cross_entropy_backward(logits, rows, max, sum_exp, nullptr, 1.0f, grad),
                 InternalError);
  }
}

}  // namespace
}  // namespace colrow
