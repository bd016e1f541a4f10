// TokenDataset: a token sequence split into train and validation, the batch
// sampler of `colrow train` and its validation pass (the role of Megatron's
// GPTDataset and llm.c's DataLoader). The global batch of a step is a pure
// function of (seed, step): sequence i of step s starts at a position drawn
// by Philox from counter (s, i) and key seed, so it is the same at every tp
// and dp, a resumed run needs no data state but the step, and dp rank r takes
// sequences [r * batch, (r + 1) * batch) of it. No collectives.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "colrow/data/token_source.h"

namespace colrow {

// rows sequences of seq_len ids; targets[i] is the token after ids[i].
struct Batch {
  int64_t rows = 0;
  int64_t seq_len = 0;
  std::vector<int32_t> ids;      // [rows, seq_len]
  std::vector<int32_t> targets;  // [rows, seq_len]
};

class TokenDataset {
 public:
  static constexpr double kDefaultValFraction = 0.1;

  // The split is contiguous, with no overlap: tokens [0, train_size()) train,
  // the last val_size() = round(val_fraction * size) tokens validate.
  // val_fraction must lie in (0, 1) (ConfigError otherwise).
  explicit TokenDataset(std::unique_ptr<TokenSource> source,
                        double val_fraction = kDefaultValFraction);
  // Every token validates and none trains (`colrow eval` over a whole file):
  // validation_windows / validation_batches cover the file from its start.
  static TokenDataset for_evaluation(std::unique_ptr<TokenSource> source);

  const TokenSource& source() const { return *source_; }
  const std::string& path() const { return source_->path(); }
  int64_t size() const { return source_->size(); }
  int64_t train_size() const { return train_size_; }
  int64_t val_size() const { return size() - train_size_; }
  double val_fraction() const { return val_fraction_; }

  // InvalidInputError unless both splits hold at least one window of seq_len
  // inputs plus the token after them ("shorter than one window"), naming the
  // file and both lengths. train_batch and validation_batches check it too;
  // call it up front to fail before allocating a model.
  // (For an evaluation dataset only the validation split is checked.)
  void require_windows(int64_t seq_len) const;
  // InvalidInputError naming the first id >= vocab_size and its position.
  void require_ids_below(int64_t vocab_size) const;

  // Starts of the global batch of `step` (global_rows sequences of seq_len + 1
  // tokens), each uniform over the valid starts [0, train_size - seq_len] of
  // the train split: a pure function of (seed, step, index).
  std::vector<int64_t> train_starts(uint64_t seed, int64_t step, int64_t global_rows,
                                    int64_t seq_len) const;
  // dp rank dp_rank's share of the global batch of `step` (batch_per_rank x
  // dp_size sequences): rows [dp_rank * batch_per_rank, (dp_rank + 1) *
  // batch_per_rank). ids, targets: [batch_per_rank, seq_len] each.
  Batch train_batch(uint64_t seed, int64_t step, int64_t batch_per_rank, int dp_size, int dp_rank,
                    int64_t seq_len) const;

  // Windows of the validation pass: window k feeds validation tokens
  // [kT, kT + T) and predicts [kT + 1, kT + T + 1), T = seq_len, so windows do
  // not overlap and all lie in the split: (val_size - 1) / T of them, the
  // first max_windows when max_windows > 0 (as `colrow eval` counts them).
  int64_t validation_windows(int64_t seq_len, int64_t max_windows = 0) const;
  // This dp rank's windows (dp_rank, dp_rank + dp_size, ...), in batches of up
  // to batch_per_rank rows (the last may be shorter; a rank may get none).
  std::vector<Batch> validation_batches(int64_t batch_per_rank, int dp_size, int dp_rank,
                                        int64_t seq_len, int64_t max_windows = 0) const;

  // Cross-entropy in nats, per validation token, of the train split's unigram
  // distribution with add-one (Laplace) smoothing over the vocabulary:
  //   p(v) = (count_train(v) + 1) / (train_size + vocab_size),
  //   H = -(1 / val_size) * sum over every validation token x of ln p(x).
  // What a model that ignores context achieves: the bar training must clear.
  double unigram_cross_entropy(int64_t vocab_size) const;

 private:
  std::unique_ptr<TokenSource> source_;
  double val_fraction_;
  bool evaluation_only_ = false;
  int64_t train_size_ = 0;
};

}  // namespace colrow
