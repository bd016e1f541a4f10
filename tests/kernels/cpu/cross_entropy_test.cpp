// The CPU cross-entropy pieces (kernels/cpu/cross_entropy.h) on one rank's
// whole vocabulary, against a double reference of the label-smoothed loss and
// its gradient: a padded column that no real class owns, an ignored row, and
// the refusal of label smoothing without a vocabulary size.
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

TEST(CpuCrossEntropyTest, SmoothedLossAndGradientMatchDouble) {
  const Problem p;
  const Reference want = reference(p);
  Tensor max = Tensor::empty({kTokens}), sum_exp = Tensor::empty({kTokens});
  Tensor target_logit = Tensor::empty({kTokens, 2}), losses = Tensor::empty({kTokens});
  cpu::cross_entropy_local_max(p.logits, p.rows, max);
  cpu::cross_entropy_sums(p.logits, p.rows, max, sum_exp, target_logit);
  cpu::cross_entropy_loss(sum_exp, target_logit, p.rows, losses);
  Tensor grad = Tensor::full({kTokens, kPadded}, 7.0f);
  cpu::cross_entropy_backward(p.logits, p.rows, max, sum_exp, nullptr, 1.0f, grad);
  // Logits within [-4, 4): every term is O(10) at most and the sums have 7
  // terms, so fp32's few roundings stay far below 1e-5 of the loss's size.
  for (int64_t t = 0; t < kTokens; ++t) {
    EXPECT_NEAR(losses.data()[t], want.loss[t], 1e-5 * std::max(1.0, want.loss[t])) << t;
    for (int64_t j = 0; j < kPadded; ++j) {
      EXPECT_NEAR(grad(t, j), want.grad[t * kPadded + j], 1e-6) << t << ", " << j;
    }
  }
}

TEST(CpuCrossEntropyTest, SmoothingWithoutAVocabularyIsRefused) {
  Problem p;
  p.rows.vocab_size = 0;  // unset: a / V would divide by zero
  Tensor max = Tensor::empty({kTokens}), sum_exp = Tensor::full({kTokens}, 1.0f);
  Tensor target_logit = Tensor::zeros({kTokens, 2}), losses = Tensor::empty({kTokens});
  EXPECT_THROW(cpu::cross_entropy_loss(sum_exp, target_logit, p.rows, losses), InternalError);
  cpu::cross_entropy_local_max(p.logits, p.rows, max);
  Tensor grad = Tensor::empty({kTokens, kPadded});
  EXPECT_THROW(cpu::cross_entropy_backward(p.logits, p.rows, max, sum_exp, nullptr, 1.0f, grad),
               InternalError);
  p.rows.label_smoothing = 0.0f;  // without smoothing the size is not used
  EXPECT_NO_THROW(cpu::cross_entropy_backward(p.logits, p.rows, max, sum_exp, nullptr, 1.0f, grad));
}

}  // namespace
}  // namespace colrow
