// GPT-2's vocab.json + merges.txt and Hugging Face's tokenizer.json, parsed
// into raw-byte vocabularies (nlohmann::json for the JSON).
#include "data/bpe_files.h"

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "colrow/core/error.h"

namespace colrow {
namespace {

using nlohmann::json;

// GPT-2's bytes_to_unicode, inverted: code point -> byte. Printable Latin-1
// bytes stand for themselves; the other 68 take code points 256, 257, ...
class ByteLevelAlphabet {
 public:
  ByteLevelAlphabet() {
    byte_of_.fill(-1);
    int next = 256;
    for (int b = 0; b < 256; ++b) {
      const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE;
      byte_of_[printable ? b : next++] = b;
    }
  }
  // The bytes `chars` (UTF-8) spells, or false when a character is outside
  // the alphabet.
  bool to_bytes(const std::string& chars, std::string& bytes) const {
    bytes.clear();
    for (size_t i = 0; i < chars.size(); ++i) {
      const auto lead = static_cast<unsigned char>(chars[i]);
      int code_point = lead;
      if (lead >= 0x80) {  // the alphabet needs at most two UTF-8 bytes
        if ((lead & 0xE0) != 0xC0 || i + 1 == chars.size()) return false;
        const auto next = static_cast<unsigned char>(chars[++i]);
        if ((next & 0xC0) != 0x80) return false;
        code_point = ((lead & 0x1F) << 6) | (next & 0x3F);
      }
      if (code_point >= static_cast<int>(byte_of_.size()) || byte_of_[code_point] < 0) return false;
      bytes.push_back(static_cast<char>(byte_of_[code_point]));
    }
    return true;
  }

 private:
  std::array<int, 256 + 68> byte_of_;
};

const ByteLevelAlphabet& alphabet() {
  static const ByteLevelAlphabet instance;
  return instance;
}

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    throw InvalidInputError("[tokenizer] cannot read " + path + ": " + std::strerror(errno) + ".");
  }
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

json parse_json(const std::string& path) {
  try {
    return json::parse(read_file(path));
  } catch (const json::exception& e) {  // parse_error, and out_of_range for a number like 1e999
    throw InvalidInputError("[tokenizer] " + path + " is not valid JSON: " + e.what() + ".");
  }
}

// A field's value for a message: strings bare, anything else as JSON.
std::string shown(const json& value) {
  return value.is_string() ? value.get<std::string>() : value.dump();
}

std::string token_bytes(const std::string& chars, const std::string& where) {
  std::string bytes;
  if (!alphabet().to_bytes(chars, bytes)) {
    throw InvalidInputError("[tokenizer] " + where + " (" + quoted_bytes(chars) +
                            ") must be spelled in GPT-2's byte-level alphabet (one printable "
                            "character per byte). Is this a byte-level BPE vocabulary?");
  }
  return bytes;
}

// vocab: {"token": id, ...} with ids 0..N-1, each once.
std::vector<std::string> vocab_tokens(const json& vocab, const std::string& where) {
  if (!vocab.is_object() || vocab.empty()) {
    throw InvalidInputError("[tokenizer] " + where + " must be a non-empty object of token: id.");
  }
  std::vector<std::string> tokens(vocab.size());
  std::vector<bool> seen(vocab.size(), false);
  for (const auto& [chars, id_value] : vocab.items()) {
    const int64_t id = id_value.is_number_integer() ? id_value.get<int64_t>() : -1;
    if (id < 0 || id >= static_cast<int64_t>(tokens.size()) || seen[id]) {
      throw InvalidInputError("[tokenizer] " + where + ": the id (" + shown(id_value) +
                              ") of token " + quoted_bytes(chars) + " must be an integer in [0, " +
                              std::to_string(tokens.size()) +
                              ") used once: ids must number the tokens 0..N-1.");
    }
    seen[id] = true;
    tokens[id] = token_bytes(chars, where + " token");
  }
  return tokens;
}

// "left right" -> raw bytes of both parts.
std::pair<std::string, std::string> merge_parts(const std::string& line, const std::string& where) {
  const size_t space = line.find(' ');
  if (space == 0 || space == std::string::npos || space + 1 == line.size() ||
      line.find(' ', space + 1) != std::string::npos) {
    throw InvalidInputError("[tokenizer] " + where + " (" + quoted_bytes(line) +
                            ") must be two tokens separated by one space.");
  }
  return {token_bytes(line.substr(0, space), where), token_bytes(line.substr(space + 1), where)};
}

// A field that must be null or absent, or (given a type) an object of that type.
void require_type(const json& root, const std::string& field, const char* type,
                  const std::string& path) {
  const auto it = root.find(field);
  if (it == root.end() || it->is_null()) return;
  const json kind = it->is_object() ? it->value("type", json()) : *it;
  if (type == nullptr || kind != type) {
    throw InvalidInputError("[tokenizer] " + path + ": " + field + ".type (" + shown(kind) +
                            ") must be " + (type != nullptr ? std::string(type) + " or " : "") +
                            "null: colrow reads GPT-2's byte-level BPE only.");
  }
}

// An optional setting that must keep the value GPT-2 uses.
void require_value(const json& object, const std::string& prefix, const char* key,
                   const json& expected, const std::string& path) {
  const auto it = object.find(key);
  if (it == object.end() || it->is_null() || *it == expected) return;
  throw InvalidInputError("[tokenizer] " + path + ": " + prefix + key + " (" + shown(*it) +
                          ") must be " + expected.dump() +
                          " as in GPT-2: colrow does not implement other settings.");
}

}  // namespace

std::string quoted_bytes(const std::string& bytes) {
  std::string out = "\"";
  for (const char c : bytes) {
    const auto b = static_cast<unsigned char>(c);
    if (b >= 0x20 && b < 0x7F && b != '"' && b != '\\') {
      out.push_back(c);
    } else {
      char hex[8];
      std::snprintf(hex, sizeof(hex), "\\x%02x", b);
      out += hex;
    }
  }
  return out + "\"";
}

BpeVocabulary read_vocab_and_merges(const std::string& vocab_json, const std::string& merges_txt) {
  BpeVocabulary v;
  v.source = vocab_json + " + " + merges_txt;
  v.tokens = vocab_tokens(parse_json(vocab_json), vocab_json);
  std::istringstream lines(read_file(merges_txt));
  std::string line;
  for (int64_t number = 1; std::getline(lines, line); ++number) {
    if (!line.empty() && line.back() == '\r') line.pop_back();
    // As openai/gpt-2 and Hugging Face read it: "#version" opens the file.
    if (number == 1 && line.rfind("#version", 0) == 0) continue;
    if (line.empty() && lines.peek() == EOF) break;  // the final newline
    v.merges.push_back(merge_parts(line, merges_txt + " line " + std::to_string(number)));
  }
  return v;
}

BpeVocabulary read_tokenizer_json(const std::string& path) {
  const json root = parse_json(path);
  if (!root.is_object()) throw InvalidInputError("[tokenizer] " + path + " must be a JSON object.");
  const json model = root.value("model", json());
  const json model_type = model.is_object() ? model.value("type", json()) : model;
  if (model_type != "BPE") {
    throw InvalidInputError("[tokenizer] " + path + ": model.type (" + shown(model_type) +
                            ") must be BPE: colrow reads GPT-2's byte-level BPE only.");
  }
  if (!model.is_object()) {  // "model": "BPE": no vocab, no merges (value() would throw)
    throw InvalidInputError("[tokenizer] " + path + ": model (" + model.dump() +
                            ") must be an object holding type, vocab and merges.");
  }
  const json pre = root.value("pre_tokenizer", json());
  const json pre_type = pre.is_object() ? pre.value("type", json()) : pre;
  if (pre_type != "ByteLevel") {
    throw InvalidInputError("[tokenizer] " + path + ": pre_tokenizer.type (" + shown(pre_type) +
                            ") must be ByteLevel: colrow reads GPT-2's byte-level BPE only.");
  }
  require_value(pre, "pre_tokenizer.", "add_prefix_space", false, path);
  require_value(pre, "pre_tokenizer.", "use_regex", true, path);
  require_type(root, "normalizer", nullptr, path);
  require_type(root, "decoder", "ByteLevel", path);
  require_type(root, "post_processor", "ByteLevel", path);
  require_value(model, "model.", "dropout", 0.0, path);
  require_value(model, "model.", "continuing_subword_prefix", "", path);
  require_value(model, "model.", "end_of_word_suffix", "", path);
  require_value(model, "model.", "byte_fallback", false, path);
  require_value(model, "model.", "ignore_merges", false, path);

  BpeVocabulary v;
  v.source = path;
  v.tokens = vocab_tokens(model.value("vocab", json()), path + ": model.vocab");
  const json merges = model.value("merges", json::array());
  if (!merges.is_array()) {
    throw InvalidInputError("[tokenizer] " + path + ": model.merges must be an array.");
  }
  for (size_t rank = 0; rank < merges.size(); ++rank) {
    const json& m = merges[rank];
    const std::string where = path + ": model.merges[" + std::to_string(rank) + "]";
    if (m.is_string()) {
      v.merges.push_back(merge_parts(m.get<std::string>(), where));
    } else if (m.is_array() && m.size() == 2 && m[0].is_string() && m[1].is_string()) {
      v.merges.emplace_back(token_bytes(m[0].get<std::string>(), where),
                            token_bytes(m[1].get<std::string>(), where));
    } else {
      throw InvalidInputError("[tokenizer] " + where + " (" + shown(m) +
                              ") must be \"left right\" or [\"left\", \"right\"].");
    }
  }
  // Added tokens are literal text (not byte-level spelled). Decoding needs
  // those outside the vocabulary; their ids must extend it without gaps.
  std::vector<std::pair<int64_t, std::string>> added;
  for (const json& t : root.value("added_tokens", json::array())) {
    const json id = t.is_object() ? t.value("id", json()) : json();
    const json content = t.is_object() ? t.value("content", json()) : json();
    if (!id.is_number_integer() || id.get<int64_t>() < 0 || !content.is_string()) {
      throw InvalidInputError("[tokenizer] " + path + ": added_tokens entry (" + t.dump() +
                              ") must have an integer id >= 0 and a string content.");
    }
    added.emplace_back(id.get<int64_t>(), content.get<std::string>());
  }
  std::sort(added.begin(), added.end());
  for (const auto& [id, content] : added) {
    const int64_t size = static_cast<int64_t>(v.tokens.size());
    std::string in_vocab;
    if (id < size && alphabet().to_bytes(content, in_vocab) && v.tokens[id] == in_vocab) continue;
    if (id != size) {
      throw InvalidInputError("[tokenizer] " + path + ": added token " + quoted_bytes(content) +
                              " has id (" + std::to_string(id) +
                              ") but must be its vocab entry's " + "id or the next free one (" +
                              std::to_string(size) + ").");
    }
    v.tokens.push_back(content);
  }
  return v;
}

}  // namespace colrow
