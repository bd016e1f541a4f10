// GPT-2's byte-level BPE: pieces from the pre-tokenizer, merged by rank.
// The merge loop is encoder.py's bpe() without its quadratic rescans: a heap
// of (rank, position) over a linked list of symbols. Each round takes every
// occurrence of the lowest-ranked pair and merges them left to right, skipping
// overlaps, exactly as encoder.py's pass over the word does.
#include "colrow/data/gpt2_tokenizer.h"

#include <algorithm>
#include <limits>

#include "colrow/core/error.h"
#include "data/bpe_files.h"
#include "data/gpt2_pretokenizer.h"

namespace colrow {
namespace {

// Pieces this long rarely repeat; the cache keeps the short ones.
constexpr size_t kMaxCachedPieceBytes = 64;
constexpr size_t kMaxCachedIds = size_t{1} << 22;  // 16 MiB of ids, then start over

uint64_t pair_key(int32_t left_id, int32_t right_id) {
  return (static_cast<uint64_t>(static_cast<uint32_t>(left_id)) << 32) |
         static_cast<uint32_t>(right_id);
}

}  // namespace

Gpt2Tokenizer::Gpt2Tokenizer(BpeVocabulary v)
    : tokens_(std::move(v.tokens)),
      source_(std::move(v.source)),
      pretokenizer_(std::make_unique<Gpt2Pretokenizer>()) {
  const std::string where = "[tokenizer] " + source_ + ": ";
  if (tokens_.size() > static_cast<size_t>(std::numeric_limits<int32_t>::max())) {
    throw InvalidInputError(where + "vocab_size (" + std::to_string(tokens_.size()) +
                            ") must fit int32 ids.");
  }
  ids_.reserve(tokens_.size());
  for (size_t id = 0; id < tokens_.size(); ++id) {
    const auto [it, fresh] = ids_.emplace(tokens_[id], static_cast<int32_t>(id));
    if (!fresh) {
      throw InvalidInputError(where + "token " + quoted_bytes(tokens_[id]) + " has two ids (" +
                              std::to_string(it->second) + " and " + std::to_string(id) +
                              "); each token must appear once.");
    }
  }
  for (int b = 0; b < 256; ++b) {
    byte_ids_[b] = token_id(std::string(1, static_cast<char>(b)));
    if (byte_ids_[b] < 0) {
      throw InvalidInputError(where + "byte " + quoted_bytes(std::string(1, static_cast<char>(b))) +
                              " has no token; a byte-level vocabulary must hold all 256 bytes.");
    }
  }
  merges_.reserve(v.merges.size());
  for (size_t rank = 0; rank < v.merges.size(); ++rank) {
    // Not a structured binding: the lambda below captures them (C++17 lets
    // no lambda capture a binding; GCC allows it, clang does not).
    const std::string& left = v.merges[rank].first;
    const std::string& right = v.merges[rank].second;
    const int32_t left_id = token_id(left);
    const int32_t right_id = token_id(right);
    const int32_t merged_id = token_id(left + right);
    const auto merge = [&] {  // for messages only
      return "merge " + std::to_string(rank) + " (" + quoted_bytes(left) + " + " +
             quoted_bytes(right) + ")";
    };
    if (left_id < 0 || right_id < 0 || merged_id < 0) {
      throw InvalidInputError(where + merge() + " must join two tokens into a token; " +
                              quoted_bytes(left_id < 0    ? left
                                           : right_id < 0 ? right
                                                          : left + right) +
                              " is not in the vocabulary.");
    }
    const Merge m{static_cast<int32_t>(rank), merged_id};
    if (!merges_.emplace(pair_key(left_id, right_id), m).second) {
      throw InvalidInputError(where + merge() + " repeats merge " +
                              std::to_string(find_merge(left_id, right_id)->rank) +
                              "; each pair must be merged once.");
    }
  }
}

Gpt2Tokenizer::~Gpt2Tokenizer() = default;

std::unique_ptr<Gpt2Tokenizer> Gpt2Tokenizer::from_vocab_and_merges(const std::string& vocab_json,
                                                                    const std::string& merges_txt) {
  return std::make_unique<Gpt2Tokenizer>(read_vocab_and_merges(vocab_json, merges_txt));
}

std::unique_ptr<Gpt2Tokenizer> Gpt2Tokenizer::from_tokenizer_json(const std::string& path) {
  return std::make_unique<Gpt2Tokenizer>(read_tokenizer_json(path));
}

int32_t Gpt2Tokenizer::token_id(const std::string& bytes) const {
  const auto it = ids_.find(bytes);
  return it == ids_.end() ? -1 : it->second;
}

const Gpt2Tokenizer::Merge* Gpt2Tokenizer::find_merge(int32_t left_id, int32_t right_id) const {
  const auto it = merges_.find(pair_key(left_id, right_id));
  return it == merges_.end() ? nullptr : &it->second;
}

std::vector<int32_t> Gpt2Tokenizer::encode(const std::string& text) const {
  std::vector<int32_t> ids;
  ids.reserve(text.size() / 3);
  const std::lock_guard<std::mutex> lock(cache_mutex_);
  pretokenizer_->split(
      text, [&](std::string_view piece) { encode_piece(piece.data(), piece.size(), ids); });
  return ids;
}

void Gpt2Tokenizer::encode_piece(const char* bytes, size_t length,
                                 std::vector<int32_t>& out) const {
  if (length == 1) {
    out.push_back(byte_ids_[static_cast<unsigned char>(bytes[0])]);
    return;
  }
  if (length > kMaxCachedPieceBytes) {
    merge_piece(bytes, length, out);
    return;
  }
  std::string key(bytes, length);
  const auto hit = cache_.find(key);
  if (hit != cache_.end()) {
    const auto [offset, count] = hit->second;
    out.insert(out.end(), cache_ids_.begin() + offset, cache_ids_.begin() + offset + count);
    return;
  }
  const size_t first = out.size();
  merge_piece(bytes, length, out);
  if (cache_ids_.size() + (out.size() - first) > kMaxCachedIds) {
    cache_.clear();
    cache_ids_.clear();
  }
  cache_.emplace(std::move(key), std::make_pair(static_cast<uint32_t>(cache_ids_.size()),
                                                static_cast<uint32_t>(out.size() - first)));
  cache_ids_.insert(cache_ids_.end(), out.begin() + first, out.end());
}

void Gpt2Tokenizer::merge_piece(const char* bytes, size_t length, std::vector<int32_t>& out) const {
  // Symbols in a doubly linked list by position; a merge keeps the left one.
  struct Symbol {
    int32_t id;
    int32_t prev;
    int32_t next;  // -1 at the ends
    bool alive;
  };
  // A ranked pair starting at symbol `left`, valid while both ids still hold.
  struct Candidate {
    int32_t rank;
    int32_t left;
    int32_t left_id;
    int32_t right_id;
    int32_t merged_id;
    bool operator>(const Candidate& o) const {
      return rank != o.rank ? rank > o.rank : left > o.left;
    }
  };
  if (length > static_cast<size_t>(std::numeric_limits<int32_t>::max())) {
    throw InvalidInputError("[tokenizer] a piece of " + std::to_string(length) +
                            " bytes (one run of letters, digits, symbols or spaces) must be "
                            "shorter than 2^31 bytes. Split the text.");
  }
  const int32_t n = static_cast<int32_t>(length);
  std::vector<Symbol> symbols(length);
  for (int32_t i = 0; i < n; ++i) {
    symbols[i] = {byte_ids_[static_cast<unsigned char>(bytes[i])], i - 1, i + 1 < n ? i + 1 : -1,
                  true};
  }
  std::vector<Candidate> heap;  // min-heap on (rank, left)
  const auto push = [&](int32_t left) {
    const int32_t right = symbols[left].next;
    if (right < 0) return;
    const Merge* m = find_merge(symbols[left].id, symbols[right].id);
    if (m == nullptr) return;
    heap.push_back({m->rank, left, symbols[left].id, symbols[right].id, m->merged_id});
    std::push_heap(heap.begin(), heap.end(), std::greater<>());
  };
  for (int32_t i = 0; i + 1 < n; ++i) push(i);

  std::vector<Candidate> round;
  std::vector<int32_t> merged;
  std::vector<int32_t> merged_in_round(length, -1);
  for (int32_t round_number = 0; !heap.empty(); ++round_number) {
    // Every occurrence of the lowest-ranked pair, left to right.
    round.clear();
    const int32_t rank = heap.front().rank;
    while (!heap.empty() && heap.front().rank == rank) {
      std::pop_heap(heap.begin(), heap.end(), std::greater<>());
      round.push_back(heap.back());
      heap.pop_back();
    }
    merged.clear();
    for (const Candidate& c : round) {
      Symbol& left = symbols[c.left];
      if (!left.alive || left.next < 0 || left.id != c.left_id) continue;  // stale or overlapped
      Symbol& right = symbols[left.next];
      if (right.id != c.right_id) continue;
      left.id = c.merged_id;
      right.alive = false;
      left.next = right.next;
      if (right.next >= 0) symbols[right.next].prev = c.left;
      merged.push_back(c.left);
      merged_in_round[c.left] = round_number;
    }
    // New neighbours of merged symbols; a pair of two merged ones once.
    for (const int32_t s : merged) {
      const int32_t prev = symbols[s].prev;
      if (prev >= 0 && merged_in_round[prev] != round_number) push(prev);
      push(s);
    }
  }
  for (int32_t s = 0; s >= 0; s = symbols[s].next) out.push_back(symbols[s].id);
}

std::string Gpt2Tokenizer::decode(const std::vector<int32_t>& ids) const {
  std::string text;
  for (size_t i = 0; i < ids.size(); ++i) {
    if (ids[i] < 0 || ids[i] >= vocab_size()) {
      throw InvalidInputError("[tokenizer] token id (" + std::to_string(ids[i]) + ") at position " +
                              std::to_string(i) + " must be in [0, " +
                              std::to_string(vocab_size()) + ") for the gpt2-bpe tokenizer of " +
                              source_ + ". Ids past the vocabulary are padding, which a trained " +
                              "model should not sample; restrict sampling to the first " +
                              std::to_string(vocab_size()) + " logits.");
    }
    text += tokens_[ids[i]];
  }
  return text;
}

}  // namespace colrow
