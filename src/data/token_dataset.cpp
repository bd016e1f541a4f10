// Train/validation split, the (seed, step) batch sampler and the validation
// windows over a TokenSource.
#include "colrow/data/token_dataset.h"

#include <algorithm>
#include <cmath>
#include <functional>

#include "colrow/core/error.h"
#include "colrow/core/philox.h"

namespace colrow {
namespace {

constexpr int64_t kScanChunk = int64_t{1} << 16;

void require_positive(const char* field, int64_t value) {
  if (value < 1) {
    throw ConfigError(std::string("[data] ") + field + " (" + std::to_string(value) +
                      ") must be positive.");
  }
}

void require_dp(int dp_size, int dp_rank) {
  require_positive("dp_size", dp_size);
  if (dp_rank < 0 || dp_rank >= dp_size) {
    throw ConfigError("[data] dp_rank (" + std::to_string(dp_rank) + ") must lie in [0, dp_size (" +
                      std::to_string(dp_size) + ")).");
  }
}

// Calls visit(position, id) for every id of [start, start + count), read in
// chunks so a memory-mapped file is never copied whole.
void scan(const TokenSource& source, int64_t start, int64_t count,
          const std::function<void(int64_t, int32_t)>& visit) {
  std::vector<int32_t> chunk(static_cast<size_t>(std::min(count, kScanChunk)));
  for (int64_t first = start; first < start + count; first += kScanChunk) {
    const int64_t n = std::min(kScanChunk, start + count - first);
    source.copy(first, n, chunk.data());
    for (int64_t i = 0; i < n; ++i) visit(first + i, chunk[i]);
  }
}

}  // namespace

TokenDataset::TokenDataset(std::unique_ptr<TokenSource> source, double val_fraction)
    : source_(std::move(source)), val_fraction_(val_fraction) {
  COLROW_CHECK(source_ != nullptr, "TokenDataset needs a source");
  if (!(val_fraction > 0.0 && val_fraction < 1.0)) {
    throw ConfigError("[data] val_fraction (" + std::to_string(val_fraction) +
                      ") must lie strictly between 0 and 1.");
  }
  // Rounded, not floored: 0.29 * 100 is 28.999... in double.
  train_size_ = size() - std::llround(val_fraction * static_cast<double>(size()));
}

TokenDataset TokenDataset::for_evaluation(std::unique_ptr<TokenSource> source) {
  TokenDataset data(std::move(source));
  data.train_size_ = 0;
  data.evaluation_only_ = true;
  return data;
}

void TokenDataset::require_windows(int64_t seq_len) const {
  require_positive("seq_len", seq_len);
  const std::string window = "one window (seq_len " + std::to_string(seq_len) +
                             " + the token it predicts = " + std::to_string(seq_len + 1) +
                             " tokens)";
  if (!evaluation_only_ && train_size() < seq_len + 1) {
    throw InvalidInputError("[data] the train split of " + path() + " (" +
                            std::to_string(train_size()) + " of its " + std::to_string(size()) +
                            " tokens) is shorter than " + window +
                            ". Use a longer file or a smaller --seq-len.");
  }
  if (val_size() < seq_len + 1) {
    throw InvalidInputError("[data] the validation split of " + path() + " (the last " +
                            std::to_string(val_size()) + " of its " + std::to_string(size()) +
                            " tokens) is shorter than " + window +
                            ". Use a longer file or a smaller --seq-len.");
  }
}

void TokenDataset::require_ids_below(int64_t vocab_size) const {
  scan(*source_, 0, size(), [&](int64_t position, int32_t id) {
    if (id < 0 || id >= vocab_size) {
      throw InvalidInputError("[data] token id (" + std::to_string(id) + ") at position " +
                              std::to_string(position) + " of " + path() +
                              " must be < vocab_size (" + std::to_string(vocab_size) +
                              "). Was the file made with this model's tokenizer?");
    }
  });
}

std::vector<int64_t> TokenDataset::train_starts(uint64_t seed, int64_t step, int64_t global_rows,
                                                int64_t seq_len) const {
  if (step < 0) {
    throw ConfigError("[data] step (" + std::to_string(step) + ") must be non-negative.");
  }
  require_positive("global batch", global_rows);
  require_windows(seq_len);
  // Valid starts 0 .. train_size - (seq_len + 1): the window and its last
  // target stay inside the train split.
  const uint64_t starts = static_cast<uint64_t>(train_size() - seq_len);
  const PhiloxKey key = {static_cast<uint32_t>(seed), static_cast<uint32_t>(seed >> 32)};
  std::vector<int64_t> out(static_cast<size_t>(global_rows));
  for (int64_t i = 0; i < global_rows; ++i) {
    const uint64_t s = static_cast<uint64_t>(step), j = static_cast<uint64_t>(i);
    const PhiloxCounter r =
        philox4x32_10({static_cast<uint32_t>(s), static_cast<uint32_t>(s >> 32),
                       static_cast<uint32_t>(j), static_cast<uint32_t>(j >> 32)},
                      key);
    // 64 random bits scaled to [0, starts) by a 128-bit multiply: the bias is
    // below starts / 2^64, far under anything a training run can see.
    const uint64_t x = (static_cast<uint64_t>(r[1]) << 32) | r[0];
    out[i] = static_cast<int64_t>((static_cast<unsigned __int128>(x) * starts) >> 64);
  }
  return out;
}

Batch TokenDataset::train_batch(uint64_t seed, int64_t step, int64_t batch_per_rank, int dp_size,
                                int dp_rank, int64_t seq_len) const {
  require_positive("batch", batch_per_rank);
  require_dp(dp_size, dp_rank);
  // Every rank draws the whole global batch's starts (a few hashes each) and
  // reads only its own rows.
  const std::vector<int64_t> starts = train_starts(seed, step, batch_per_rank * dp_size, seq_len);
  Batch b;
  b.rows = batch_per_rank;
  b.seq_len = seq_len;
  b.ids.resize(static_cast<size_t>(batch_per_rank * seq_len));
  b.targets.resize(b.ids.size());
  std::vector<int32_t> window(static_cast<size_t>(seq_len + 1));
  for (int64_t row = 0; row < batch_per_rank; ++row) {
    source_->copy(starts[dp_rank * batch_per_rank + row], seq_len + 1, window.data());
    std::copy(window.begin(), window.end() - 1, b.ids.begin() + row * seq_len);
    std::copy(window.begin() + 1, window.end(), b.targets.begin() + row * seq_len);
  }
  return b;
}

int64_t TokenDataset::validation_windows(int64_t seq_len, int64_t max_windows) const {
  require_windows(seq_len);
  const int64_t windows = (val_size() - 1) / seq_len;
  return max_windows > 0 ? std::min(windows, max_windows) : windows;
}

std::vector<Batch> TokenDataset::validation_batches(int64_t batch_per_rank, int dp_size,
                                                    int dp_rank, int64_t seq_len,
                                                    int64_t max_windows) const {
  require_positive("batch", batch_per_rank);
  require_dp(dp_size, dp_rank);
  const int64_t windows = validation_windows(seq_len, max_windows);
  std::vector<int64_t> mine;  // this dp rank's windows: dp_rank, dp_rank + dp_size, ...
  for (int64_t k = dp_rank; k < windows; k += dp_size) mine.push_back(k);
  std::vector<Batch> batches;
  std::vector<int32_t> window(static_cast<size_t>(seq_len + 1));
  for (size_t first = 0; first < mine.size(); first += static_cast<size_t>(batch_per_rank)) {
    Batch b;
    b.rows = std::min<int64_t>(batch_per_rank, static_cast<int64_t>(mine.size() - first));
    b.seq_len = seq_len;
    b.ids.resize(static_cast<size_t>(b.rows * seq_len));
    b.targets.resize(b.ids.size());
    for (int64_t row = 0; row < b.rows; ++row) {
      source_->copy(train_size() + mine[first + row] * seq_len, seq_len + 1, window.data());
      std::copy(window.begin(), window.end() - 1, b.ids.begin() + row * seq_len);
      std::copy(window.begin() + 1, window.end(), b.targets.begin() + row * seq_len);
    }
    batches.push_back(std::move(b));
  }
  return batches;
}

double TokenDataset::unigram_cross_entropy(int64_t vocab_size) const {
  require_positive("vocab_size", vocab_size);
  if (val_size() < 1) {
    throw InvalidInputError("[data] the validation split of " + path() + " (" +
                            std::to_string(size()) + " tokens x val_fraction " +
                            std::to_string(val_fraction_) + ") is empty. Use a longer file.");
  }
  require_ids_below(vocab_size);
  std::vector<int64_t> counts(static_cast<size_t>(vocab_size), 0);
  scan(*source_, 0, train_size(), [&](int64_t, int32_t id) { ++counts[id]; });
  // ln p(v) with add-one smoothing: no validation token has probability 0.
  const double log_total = std::log(static_cast<double>(train_size() + vocab_size));
  double sum = 0.0;
  scan(*source_, train_size(), val_size(), [&](int64_t, int32_t id) {
    sum += std::log(static_cast<double>(counts[id] + 1)) - log_total;
  });
  return -sum / static_cast<double>(val_size());
}

}  // namespace colrow
