// TokenDataset: the contiguous train/validation split, the (seed, step) batch
// sampler (the same global batch at every dp, split by rank, never touching
// validation), the validation windows, and the unigram baseline against a
// hand-computed value. Sources here hold token i = i, so every id says where
// it came from.
#include "colrow/data/token_dataset.h"

#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <memory>
#include <numeric>
#include <set>
#include <string>
#include <vector>

#include "colrow/core/error.h"

namespace colrow {
namespace {

class VectorSource : public TokenSource {
 public:
  explicit VectorSource(std::vector<int32_t> tokens) : tokens_(std::move(tokens)) {}
  const std::string& path() const override { return path_; }
  int64_t size() const override { return static_cast<int64_t>(tokens_.size()); }
  void copy(int64_t start, int64_t count, int32_t* out) const override {
    ASSERT_TRUE(start >= 0 && start + count <= size()) << start << " + " << count;
    std::copy(tokens_.begin() + start, tokens_.begin() + start + count, out);
  }

 private:
  std::string path_ = "mem.txt";
  std::vector<int32_t> tokens_;
};

// Tokens 0, 1, ..., n - 1.
TokenDataset positions(int64_t n, double val_fraction = TokenDataset::kDefaultValFraction) {
  std::vector<int32_t> t(static_cast<size_t>(n));
  std::iota(t.begin(), t.end(), 0);
  return TokenDataset(std::make_unique<VectorSource>(std::move(t)), val_fraction);
}

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

TEST(TokenDatasetTest, SplitIsContiguousWithTheLastFractionValidating) {
  const TokenDataset d = positions(1000);
  EXPECT_EQ(d.train_size(), 900);
  EXPECT_EQ(d.val_size(), 100);
  EXPECT_EQ(positions(1005).val_size(), 101);      // round(100.5)
  EXPECT_EQ(positions(100, 0.29).val_size(), 29);  // 0.29 * 100 is 28.999... in double
  EXPECT_EQ(positions(10, 0.25).train_size(), 7);  // round(2.5) = 3
  for (double bad : {0.0, 1.0, -0.1, 1.5, std::nan("")}) {
    EXPECT_THROW(positions(100, bad), ConfigError) << bad;
  }
}

TEST(TokenDatasetTest, TrainBatchIsTheSameGlobalBatchAtEveryDp) {
  const TokenDataset d = positions(5000);
  const int64_t T = 16, B = 3;
  for (int dp : {2, 3, 4}) {
    const Batch global = d.train_batch(7, 11, B * dp, 1, 0, T);
    std::vector<int32_t> ids, targets;
    for (int r = 0; r < dp; ++r) {
      const Batch part = d.train_batch(7, 11, B, dp, r, T);
      EXPECT_EQ(part.rows, B);
      EXPECT_EQ(part.seq_len, T);
      ASSERT_EQ(part.ids.size(), static_cast<size_t>(B * T));
      ids.insert(ids.end(), part.ids.begin(), part.ids.end());
      targets.insert(targets.end(), part.targets.begin(), part.targets.end());
    }
    EXPECT_EQ(ids, global.ids) << "dp " << dp;
    EXPECT_EQ(targets, global.targets) << "dp " << dp;
  }
}

TEST(TokenDatasetTest, TrainBatchIsAPureFunctionOfSeedAndStep) {
  const TokenDataset d = positions(100000);
  const Batch a = d.train_batch(1, 5, 4, 2, 1, 32);
  const Batch again = positions(100000).train_batch(1, 5, 4, 2, 1, 32);
  EXPECT_EQ(a.ids, again.ids);
  EXPECT_EQ(a.targets, again.targets);
  EXPECT_NE(a.ids, d.train_batch(1, 6, 4, 2, 1, 32).ids);
  EXPECT_NE(a.ids, d.train_batch(2, 5, 4, 2, 1, 32).ids);
  EXPECT_NE(a.ids, d.train_batch(1, 5, 4, 2, 0, 32).ids);
  // Steps past 2^32 still get their own counter.
  EXPECT_NE(d.train_starts(1, int64_t{1} << 32, 8, 32), d.train_starts(1, 0, 8, 32));
}

TEST(TokenDatasetTest, TargetsAreIdsShiftedByOneInsideTheTrainSplit) {
  // 40 train tokens and T = 8: valid starts 0..31 (a window and its last
  // target are 9 tokens), drawn often enough that every one, the first and
  // last included, appears, and no window reaches the validation split
  // (ids >= 40).
  const TokenDataset d = positions(50, 0.2);
  ASSERT_EQ(d.train_size(), 40);
  const int64_t T = 8, rows = 4;
  std::set<int32_t> seen;
  for (int64_t step = 0; step < 300; ++step) {
    const Batch b = d.train_batch(123, step, rows, 1, 0, T);
    const std::vector<int64_t> starts = d.train_starts(123, step, rows, T);
    for (int64_t r = 0; r < rows; ++r) {
      const int32_t start = b.ids[r * T];
      EXPECT_EQ(start, starts[r]);
      for (int64_t t = 0; t < T; ++t) {
        EXPECT_EQ(b.ids[r * T + t], start + t);
        EXPECT_EQ(b.targets[r * T + t], start + t + 1);
      }
      EXPECT_LT(b.targets[r * T + T - 1], d.train_size());
      seen.insert(start);
    }
  }
  EXPECT_EQ(seen.size(), 32u);
  EXPECT_EQ(*seen.begin(), 0);
  EXPECT_EQ(*seen.rbegin(), 31);
}

TEST(TokenDatasetTest, ValidationWindowsCoverTheSplitRoundRobinOverDp) {
  // 900 train + 100 validation tokens, T = 8: (100 - 1) / 8 = 12 windows,
  // window k = tokens [900 + 8k, 908 + 8k) predicting one further on.
  const TokenDataset d = positions(1000);
  const int64_t T = 8;
  EXPECT_EQ(d.validation_windows(T), 12);
  EXPECT_EQ(d.validation_windows(T, 5), 5);
  EXPECT_EQ(d.validation_windows(T, 50), 12);
  for (int64_t cap : {int64_t{0}, int64_t{5}}) {
    const int64_t windows = d.validation_windows(T, cap);
    for (int dp : {1, 2, 3, 4}) {
      std::vector<int> hits(static_cast<size_t>(windows), 0);
      for (int r = 0; r < dp; ++r) {
        const std::vector<Batch> batches = d.validation_batches(2, dp, r, T, cap);
        int64_t next = r;  // this rank's windows: r, r + dp, ...
        for (const Batch& b : batches) {
          EXPECT_GE(b.rows, 1);
          EXPECT_LE(b.rows, 2);
          EXPECT_EQ(b.seq_len, T);
          for (int64_t row = 0; row < b.rows; ++row, next += dp) {
            ASSERT_LT(next, windows);
            ++hits[next];
            for (int64_t t = 0; t < T; ++t) {
              EXPECT_EQ(b.ids[row * T + t], 900 + next * T + t);
              EXPECT_EQ(b.targets[row * T + t], 900 + next * T + t + 1);
            }
          }
        }
        EXPECT_GE(next, windows) << "rank " << r << " of dp " << dp << " missed windows";
      }
      EXPECT_EQ(hits, std::vector<int>(static_cast<size_t>(windows), 1)) << "dp " << dp;
    }
  }
  // A rank past the last window gets no batches.
  EXPECT_TRUE(positions(100, 0.2).validation_batches(1, 4, 3, 8).empty());  // 19 / 8 = 2 windows
}

// colrow eval's view of a file: every token validates, windows start at token
// 0 (window k = [kT, kT + T) predicting one further on), and no train split is
// asked for even when the file holds exactly one window.
TEST(TokenDatasetTest, ForEvaluationWindowsCoverTheWholeFile) {
  std::vector<int32_t> t(9);
  std::iota(t.begin(), t.end(), 0);
  const TokenDataset d = TokenDataset::for_evaluation(std::make_unique<VectorSource>(t));
  EXPECT_EQ(d.train_size(), 0);
  EXPECT_EQ(d.val_size(), 9);
  EXPECT_EQ(d.validation_windows(4), 2);  // (9 - 1) / 4
  const std::vector<Batch> batches = d.validation_batches(8, 1, 0, 4);
  ASSERT_EQ(batches.size(), 1u);
  EXPECT_EQ(batches[0].ids, (std::vector<int32_t>{0, 1, 2, 3, 4, 5, 6, 7}));
  EXPECT_EQ(batches[0].targets, (std::vector<int32_t>{1, 2, 3, 4, 5, 6, 7, 8}));
  EXPECT_EQ(d.validation_windows(8), 1);  // one window, no train split needed
  EXPECT_NE(error_of([&] { d.validation_windows(9); }).find("validation split"), std::string::npos);
}

TEST(TokenDatasetTest, SplitsShorterThanOneWindowNameTheFileAndBothLengths) {
  const TokenDataset d = positions(20);  // 18 train, 2 validation
  EXPECT_EQ(error_of([&] { d.require_windows(4); }),
            "[data] the validation split of mem.txt (the last 2 of its 20 tokens) is shorter "
            "than one window (seq_len 4 + the token it predicts = 5 tokens). Use a longer file "
            "or a smaller --seq-len.");
  EXPECT_EQ(error_of([&] { d.train_batch(0, 0, 1, 1, 0, 18); }),
            "[data] the train split of mem.txt (18 of its 20 tokens) is shorter than one window "
            "(seq_len 18 + the token it predicts = 19 tokens). Use a longer file or a smaller "
            "--seq-len.");
  EXPECT_NE(error_of([&] { d.validation_batches(1, 1, 0, 4); }).find("shorter than one window"),
            std::string::npos);
  EXPECT_NO_THROW(d.require_windows(1));
  EXPECT_THROW(d.train_batch(0, 0, 1, 1, 0, 0), ConfigError);   // seq_len 0
  EXPECT_THROW(d.train_batch(0, 0, 0, 1, 0, 4), ConfigError);   // batch 0
  EXPECT_THROW(d.train_batch(0, 0, 1, 2, 2, 4), ConfigError);   // dp_rank 2 of 2
  EXPECT_THROW(d.train_batch(0, -1, 1, 1, 0, 4), ConfigError);  // step -1
}

TEST(TokenDatasetTest, UnigramBaselineMatchesTheHandValue) {
  // vocab 4; train 0 0 0 1 1 2 0 0 (counts 5, 2, 1, 0), validation 3 1.
  // Add-one: p(3) = 1 / (8 + 4), p(1) = 3 / 12, so
  // H = -(ln(1/12) + ln(1/4)) / 2 = ln(48) / 2 = 1.935600505...
  const TokenDataset d(
      std::make_unique<VectorSource>(std::vector<int32_t>{0, 0, 0, 1, 1, 2, 0, 0, 3, 1}), 0.2);
  ASSERT_EQ(d.val_size(), 2);
  EXPECT_NEAR(d.unigram_cross_entropy(4), 1.9356005054539456, 1e-12);
  // Tokens 0..7 twice, split at 0.5: train 0..7 and validation 0..7, so every
  // p(v) = (1 + 1) / (8 + 8) = 1/8 and H = ln 8.
  std::vector<int32_t> u;
  for (int rep = 0; rep < 2; ++rep) {
    for (int v = 0; v < 8; ++v) u.push_back(v);
  }
  EXPECT_NEAR(TokenDataset(std::make_unique<VectorSource>(u), 0.5).unigram_cross_entropy(8),
              std::log(8.0), 1e-12);
  EXPECT_EQ(error_of([&] { d.unigram_cross_entropy(3); }),
            "[data] token id (3) at position 8 of mem.txt must be < vocab_size (3). Was the file "
            "made with this model's tokenizer?");
}

}  // namespace
}  // namespace colrow
