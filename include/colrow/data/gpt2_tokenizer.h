// Gpt2Tokenizer: GPT-2's byte-level BPE (openai/gpt-2 encoder.py). Text is cut
// into pieces by GPT-2's regex (PCRE2, Unicode properties), each piece's bytes
// start as one token per byte and merge by rank until no ranked pair is left.
// Encoding equals GPT-2's reference encoder; text that is not valid UTF-8 is
// cut at each invalid byte, which becomes a piece of its own, so any bytes
// round-trip. Special tokens (<|endoftext|>) are decoded, never matched in text.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "colrow/data/tokenizer.h"

namespace colrow {

class Gpt2Pretokenizer;

// A byte-level BPE vocabulary with its files' byte-to-character alphabet
// already undone: every token and merge part is raw bytes.
struct BpeVocabulary {
  std::vector<std::string> tokens;                          // id -> the token's bytes
  std::vector<std::pair<std::string, std::string>> merges;  // rank -> (left, right)
  std::string source;                                       // where it came from, for messages
};

class Gpt2Tokenizer : public Tokenizer {
 public:
  // Checks the vocabulary (every byte a token, every merge's parts and result
  // tokens, no repeated token or merge): InvalidInputError naming the entry.
  explicit Gpt2Tokenizer(BpeVocabulary vocabulary);
  ~Gpt2Tokenizer() override;

  // GPT-2's own files: vocab.json (token -> id) and merges.txt (one "left
  // right" per line by rank, an optional "#version" first line).
  static std::unique_ptr<Gpt2Tokenizer> from_vocab_and_merges(const std::string& vocab_json,
                                                              const std::string& merges_txt);
  // Hugging Face's tokenizer.json: model BPE with the ByteLevel pre-tokenizer;
  // any other model, pre-tokenizer, normalizer, decoder or post-processor is
  // an InvalidInputError naming the field and its value.
  static std::unique_ptr<Gpt2Tokenizer> from_tokenizer_json(const std::string& path);

  std::vector<int32_t> encode(const std::string& text) const override;
  std::string decode(const std::vector<int32_t>& ids) const override;
  int64_t vocab_size() const override { return static_cast<int64_t>(tokens_.size()); }
  std::string name() const override { return "gpt2-bpe"; }
  // The id of the token whose bytes are `bytes`, or -1.
  int32_t token_id(const std::string& bytes) const;

 private:
  struct Merge {
    int32_t rank;
    int32_t merged_id;
  };
  // A piece's ids, appended to `out`: from the cache, else by merging.
  void encode_piece(const char* bytes, size_t length, std::vector<int32_t>& out) const;
  void merge_piece(const char* bytes, size_t length, std::vector<int32_t>& out) const;
  const Merge* find_merge(int32_t left_id, int32_t right_id) const;

  std::vector<std::string> tokens_;
  std::unordered_map<std::string, int32_t> ids_;
  int32_t byte_ids_[256];
  std::unordered_map<uint64_t, Merge> merges_;  // key: left_id << 32 | right_id
  std::string source_;
  std::unique_ptr<Gpt2Pretokenizer> pretokenizer_;

  // Pieces already merged (text repeats its words): piece -> [offset, count)
  // in cache_ids_. Cleared when it grows past a bound; encode holds the lock.
  mutable std::mutex cache_mutex_;
  mutable std::unordered_map<std::string, std::pair<uint32_t, uint32_t>> cache_;
  mutable std::vector<int32_t> cache_ids_;
};

}  // namespace colrow
