// SafetensorsReader: validates a safetensors header against the file's size and
// reads blocks of tensors as fp32, one pread per contiguous run of bytes.
// Issues no collective but verify_checksums (one all_gather).
#include "colrow/io/safetensors.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <nlohmann/json.hpp>
#include <set>
#include <vector>

#include "colrow/core/error.h"
#include "io/posix_file.h"
#include "io/region.h"
#include "io/safetensors_format.h"
#include "io/tensor_checksums.h"

static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__,
              "safetensors data are little-endian; a big-endian host needs byte swaps here");

namespace colrow {
namespace {

using nlohmann::json;
using safetensors::Encoding;
using safetensors::kLengthFieldBytes;

// Elements decoded per pread when converting (bounds the staging buffer).
constexpr int64_t kDecodeChunk = int64_t{1} << 20;

// A JSON value for a message, shortened.
std::string excerpt(const json& value) {
  std::string text = value.dump();
  if (text.size() > 60) text = text.substr(0, 57) + "...";
  return text;
}

// A non-negative integer that fits in uint64 (JSON numbers beyond parse as floats).
bool is_count(const json& value) {
  return value.is_number_unsigned();
}

struct EntryParser {
  std::string where;  // "[safetensors] <file>: tensor \"<name>\""

  const json& field(const json& entry, const char* key) const {
    const auto it = entry.find(key);
    if (it == entry.end()) {
      throw InvalidInputError(where + ": \"" + key + "\" is missing; every tensor entry needs " +
                              "\"dtype\", \"shape\" and \"data_offsets\".");
    }
    return *it;
  }

  TensorInfo parse(const std::string& name, const json& entry) const {
    if (!entry.is_object()) {
      throw InvalidInputError(where + ": entry (" + excerpt(entry) +
                              ") must be a JSON object with \"dtype\", \"shape\" and "
                              "\"data_offsets\".");
    }
    TensorInfo info;
    info.name = name;
    const json& dtype = field(entry, "dtype");
    if (!dtype.is_string()) {
      throw InvalidInputError(where + ": \"dtype\" (" + excerpt(dtype) +
                              ") must be a string such as \"F32\".");
    }
    info.dtype = dtype.get<std::string>();
    if (safetensors::find_dtype(info.dtype) == nullptr) {
      throw InvalidInputError(where + ": dtype (" + info.dtype +
                              ") must be a safetensors dtype. colrow reads " +
                              safetensors::readable_dtype_names() + "; it also knows " +
                              safetensors::unreadable_dtype_names() + " but cannot read them.");
    }
    const json& shape = field(entry, "shape");
    const bool shape_ok =
        shape.is_array() && std::all_of(shape.begin(), shape.end(), [](const json& d) {
          return is_count(d) && d.get<uint64_t>() <= uint64_t{INT64_MAX};
        });
    if (!shape_ok) {
      throw InvalidInputError(where + ": \"shape\" (" + excerpt(shape) +
                              ") must be an array of non-negative integers.");
    }
    uint64_t numel = 1;
    bool overflow = false;
    for (const json& d : shape) {
      info.shape.push_back(d.get<int64_t>());
      overflow = overflow || __builtin_mul_overflow(numel, d.get<uint64_t>(), &numel);
    }
    if (overflow || numel > uint64_t{INT64_MAX} / 8) {
      throw InvalidInputError(where + ": shape " + shape_to_string(info.shape) +
                              " has more elements than a file can hold.");
    }
    const json& offsets = field(entry, "data_offsets");
    if (!offsets.is_array() || offsets.size() != 2 || !is_count(offsets[0]) ||
        !is_count(offsets[1])) {
      throw InvalidInputError(where + ": \"data_offsets\" (" + excerpt(offsets) +
                              ") must be an array of two non-negative integers [begin, end].");
    }
    info.begin = offsets[0].get<uint64_t>();
    info.end = offsets[1].get<uint64_t>();
    return info;
  }
};

std::map<std::string, std::string> parse_metadata(const std::string& where, const json& value) {
  if (!value.is_object()) {
    throw InvalidInputError(where + "\"__metadata__\" (" + excerpt(value) +
                            ") must be a JSON object of strings.");
  }
  std::map<std::string, std::string> out;
  for (const auto& [key, v] : value.items()) {
    if (!v.is_string()) {
      throw InvalidInputError(where + "\"__metadata__\" value of \"" + key + "\" (" + excerpt(v) +
                              ") must be a string.");
    }
    out.emplace(key, v.get<std::string>());
  }
  return out;
}

std::string byte_range(const TensorInfo& t) {
  return "bytes [" + std::to_string(t.begin) + ", " + std::to_string(t.end) + ")";
}

}  // namespace

SafetensorsReader::SafetensorsReader(const std::string& path) : path_(path) {
  fd_ = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd_ < 0) {
    throw InvalidInputError("[safetensors] cannot open " + path + ": " + errno_text(errno) +
                            ". Check the checkpoint path.");
  }
  try {
    read_header();
  } catch (...) {
    ::close(fd_);
    fd_ = -1;
    throw;
  }
}

SafetensorsReader::~SafetensorsReader() {
  if (fd_ >= 0) ::close(fd_);
}

SafetensorsReader::SafetensorsReader(SafetensorsReader&& other) noexcept
    : path_(std::move(other.path_)),
      fd_(other.fd_),
      data_start_(other.data_start_),
      tensors_(std::move(other.tensors_)),
      metadata_(std::move(other.metadata_)) {
  other.fd_ = -1;
}

SafetensorsReader& SafetensorsReader::operator=(SafetensorsReader&& other) noexcept {
  if (this != &other) {
    if (fd_ >= 0) ::close(fd_);
    path_ = std::move(other.path_);
    fd_ = other.fd_;
    data_start_ = other.data_start_;
    tensors_ = std::move(other.tensors_);
    metadata_ = std::move(other.metadata_);
    other.fd_ = -1;
  }
  return *this;
}

std::string SafetensorsReader::where(const std::string& name) const {
  return "[safetensors] " + path_ + ": tensor \"" + name + "\"";
}

void SafetensorsReader::read_header() {
  const std::string file = "[safetensors] " + path_ + ": ";
  struct stat st;
  if (::fstat(fd_, &st) != 0) {
    throw InvalidInputError(file + "cannot stat: " + errno_text(errno));
  }
  if (!S_ISREG(st.st_mode)) {
    throw InvalidInputError(file + "must be a regular file. Check the checkpoint path.");
  }
  const uint64_t file_bytes = static_cast<uint64_t>(st.st_size);
  if (file_bytes < kLengthFieldBytes) {
    throw InvalidInputError(file + "file size (" + std::to_string(file_bytes) +
                            " bytes) must be at least 8 (the header length). The file is "
                            "truncated or not a safetensors file.");
  }
  auto read_exactly = [&](void* buffer, size_t bytes, uint64_t offset) {
    const int err = pread_full(fd_, buffer, bytes, offset);
    if (err == kEndOfFile) {
      throw InvalidInputError(file + "the file ended while reading its header; it is truncated.");
    }
    if (err != 0) throw InvalidInputError(file + "cannot read the header: " + errno_text(err));
  };
  unsigned char length_field[kLengthFieldBytes];
  read_exactly(length_field, sizeof length_field, 0);
  const uint64_t header_bytes = safetensors::load_le64(length_field);
  if (header_bytes > file_bytes - kLengthFieldBytes) {
    throw InvalidInputError(file + "header length (" + std::to_string(header_bytes) +
                            " bytes) must fit in the file after the length field (" +
                            std::to_string(file_bytes - kLengthFieldBytes) +
                            " bytes). The file is truncated or not a safetensors file.");
  }
  if (header_bytes > safetensors::kMaxHeaderBytes) {
    throw InvalidInputError(file + "header length (" + std::to_string(header_bytes) +
                            " bytes) must be at most " +
                            std::to_string(safetensors::kMaxHeaderBytes) +
                            " bytes. The file is not a safetensors file.");
  }
  std::string text(header_bytes, '\0');
  read_exactly(&text[0], text.size(), kLengthFieldBytes);
  data_start_ = kLengthFieldBytes + header_bytes;
  const uint64_t buffer_bytes = file_bytes - data_start_;

  // Parse, noting top-level keys seen twice (nlohmann would keep the last).
  std::set<std::string> keys;
  std::string repeated;
  json header;
  try {
    header = json::parse(text, [&](int depth, json::parse_event_t event, json& parsed) {
      if (depth == 1 && event == json::parse_event_t::key && repeated.empty() &&
          !keys.insert(parsed.get<std::string>()).second) {
        repeated = parsed.get<std::string>();
      }
      return true;
    });
  } catch (const json::exception& e) {
    throw InvalidInputError(file + "header is not valid JSON (" + e.what() +
                            "). The file is corrupt or not a safetensors file.");
  }
  if (!header.is_object()) {
    throw InvalidInputError(file + "header (" + excerpt(header) + ") must be a JSON object.");
  }
  if (!repeated.empty()) {
    throw InvalidInputError(file + "key \"" + repeated +
                            "\" appears twice in the header; each tensor must appear once.");
  }

  for (const auto& [name, value] : header.items()) {
    if (name == "__metadata__") {
      metadata_ = parse_metadata(file, value);
      continue;
    }
    TensorInfo info = EntryParser{where(name)}.parse(name, value);
    const auto* dtype = safetensors::find_dtype(info.dtype);
    if (info.begin > info.end) {
      throw InvalidInputError(where(name) + ": data_offsets begin (" + std::to_string(info.begin) +
                              ") must be at most end (" + std::to_string(info.end) + ").");
    }
    // numel < 2^60 and bits <= 64: neither product overflows.
    const uint64_t numel = static_cast<uint64_t>(info.numel());
    const uint64_t bits = dtype->bits % 8 == 0 ? 0 : numel * dtype->bits;  // sub-byte dtypes
    const uint64_t span = dtype->bits % 8 == 0 ? numel * (dtype->bits / 8) : bits / 8;
    if (bits % 8 != 0 || info.end - info.begin != span) {
      throw InvalidInputError(where(name) + ": data_offsets span (" +
                              std::to_string(info.end - info.begin) +
                              " bytes) must equal its shape " + shape_to_string(info.shape) +
                              " of " + info.dtype + " (" + std::to_string(info.numel()) +
                              " elements of " + std::to_string(dtype->bits) + " bits).");
    }
    if (info.end > buffer_bytes) {
      throw InvalidInputError(where(name) + ": data_offsets end (" + std::to_string(info.end) +
                              ") must be within the data buffer (" + std::to_string(buffer_bytes) +
                              " bytes). The file is truncated or its header is corrupt.");
    }
    tensors_.emplace(name, std::move(info));
  }

  // No two tensors may share a byte (empty tensors hold none).
  std::vector<const TensorInfo*> by_offset;
  for (const auto& [name, info] : tensors_) {
    if (info.end > info.begin) by_offset.push_back(&info);
  }
  std::sort(by_offset.begin(), by_offset.end(), [](const TensorInfo* a, const TensorInfo* b) {
    return a->begin < b->begin || (a->begin == b->begin && a->name < b->name);
  });
  const TensorInfo* reach = nullptr;  // the tensor ending last so far
  for (const TensorInfo* t : by_offset) {
    if (reach != nullptr && t->begin < reach->end) {
      throw InvalidInputError(file + "tensors \"" + reach->name + "\" (" + byte_range(*reach) +
                              ") and \"" + t->name + "\" (" + byte_range(*t) +
                              ") must not overlap in the data buffer. The header is corrupt.");
    }
    if (reach == nullptr || t->end > reach->end) reach = t;
  }
}

const TensorInfo& SafetensorsReader::info(const std::string& name) const {
  const auto it = tensors_.find(name);
  if (it == tensors_.end()) {
    std::string some;
    int shown = 0;
    for (const auto& entry : tensors_) {
      if (shown++ == 3) break;
      some += (some.empty() ? "" : ", ") + ("\"" + entry.first + "\"");
    }
    throw InvalidInputError(where(name) + " is not in the file (it has " +
                            std::to_string(tensors_.size()) + " tensors" +
                            (some.empty() ? "" : ", e.g. " + some) +
                            "). The checkpoint does not match the model.");
  }
  return it->second;
}

void SafetensorsReader::verify_checksums(Communicator& group) const {
  // Which tensors carry a checksum: the same on every rank (one file).
  std::vector<TensorInfo> checked;
  std::vector<uint32_t> stored;
  for (const auto& [name, info] : tensors_) {
    const auto it = metadata_.find(safetensors::checksum_key(name));
    if (it == metadata_.end()) continue;
    const std::optional<uint32_t> crc = safetensors::parse_checksum(it->second);
    if (!crc) {
      throw InvalidInputError("[safetensors] " + path_ + ": the checksum of tensor \"" + name +
                              "\" in __metadata__ (" + it->second.substr(0, 16) +
                              ") must be 8 lower-case hex digits. The header is damaged; "
                              "restore the file from a copy.");
    }
    checked.push_back(info);
    stored.push_back(*crc);
  }
  if (checked.empty()) return;  // not written by colrow: nothing to verify
  // [agree] every checked tensor's CRC-32 over the group
  const safetensors::GroupChecksums sums =
      safetensors::tensor_crc32s(group, fd_, data_start_, checked);
  if (sums.failed_rank >= 0) {
    throw InvalidInputError(
        "[safetensors] cannot read " + path_ + " to verify its checksums on rank " +
        std::to_string(sums.failed_rank) + " of group " + group.name() + ": " +
        (sums.err == kEndOfFile ? std::string("the file ends early") : errno_text(sums.err)) + ".");
  }
  std::vector<size_t> bad;
  for (size_t i = 0; i < checked.size(); ++i) {
    if (sums.crc[i] != stored[i]) bad.push_back(i);
  }
  if (bad.empty()) return;
  const TensorInfo& first = checked[bad.front()];
  throw InvalidInputError(
      "[safetensors] " + path_ + ": tensor \"" + first.name + "\" fails its checksum (stored " +
      safetensors::checksum_text(stored[bad.front()]) + ", its bytes give " +
      safetensors::checksum_text(sums.crc[bad.front()]) + ")" +
      (bad.size() > 1 ? ", and " + std::to_string(bad.size() - 1) + " other tensors do too" : "") +
      ": the file is corrupt. Restore it from a copy, or load an earlier checkpoint.");
}

void SafetensorsReader::read_rows(const std::string& name, int64_t row0, int64_t rows,
                                  Tensor& out) const {
  const TensorInfo& t = info(name);
  read_region(t, rows_region(where(name), t.shape, row0, rows), out);
}

void SafetensorsReader::read_block(const std::string& name, int64_t row0, int64_t rows,
                                   int64_t col0, int64_t cols, Tensor& out) const {
  const TensorInfo& t = info(name);
  read_region(t, block_region(where(name), t.shape, row0, rows, col0, cols, false), out);
}

void SafetensorsReader::read_block_transposed(const std::string& name, int64_t row0, int64_t rows,
                                              int64_t col0, int64_t cols, Tensor& out) const {
  const TensorInfo& t = info(name);
  read_region(t, block_region(where(name), t.shape, row0, rows, col0, cols, true), out);
}

void SafetensorsReader::read(const std::string& name, const ShardSpec& shard, Tensor& out,
                             bool transposed) const {
  const TensorInfo& t = info(name);
  read_region(t, shard_region(where(name), t.shape, shard, transposed), out);
}

// Reads the region's runs, stacked ([count, length]), into `out`, transposing
// when the region says so. out: region.block_shape
void SafetensorsReader::read_region(const TensorInfo& t, const Region& region, Tensor& out) const {
  const auto* dtype = safetensors::find_dtype(t.dtype);
  if (dtype->encoding == Encoding::kUnreadable) {
    throw InvalidInputError(where(t.name) + ": dtype (" + t.dtype + ") must be one of " +
                            safetensors::readable_dtype_names() +
                            " to be read as fp32. Convert the checkpoint.");
  }
  if (out.shape() != region.block_shape || !out.defined()) out = Tensor::empty(region.block_shape);
  // Runs land in `out` directly when they are already its memory layout.
  const bool direct = !region.transposed && out.is_contiguous();
  Tensor staging = direct ? out : Tensor::empty({region.count, region.length});
  float* dst = staging.data();

  const int64_t element_bytes = dtype->bits / 8;
  const bool merged = region.contiguous();
  const int64_t runs = merged ? std::min<int64_t>(region.count, 1) : region.count;
  const int64_t run_length = merged ? region.numel() : region.length;
  std::vector<unsigned char> raw;
  for (int64_t r = 0; r < runs; ++r) {
    const int64_t first = region.first + r * region.stride;
    for (int64_t done = 0; done < run_length;) {
      // F32 runs are read whole, straight into place; others chunk by chunk.
      const int64_t n = dtype->encoding == Encoding::kF32
                            ? run_length - done
                            : std::min(kDecodeChunk, run_length - done);
      const uint64_t offset = data_start_ + t.begin + (first + done) * element_bytes;
      const size_t bytes = static_cast<size_t>(n * element_bytes);
      float* target = dst + r * run_length + done;
      void* buffer = target;
      if (dtype->encoding != Encoding::kF32) {
        raw.resize(bytes);
        buffer = raw.data();
      }
      const int err = pread_full(fd_, buffer, bytes, offset);
      if (err != 0) {
        const std::string range = "bytes [" + std::to_string(offset) + ", " +
                                  std::to_string(offset + bytes) + ") of the file";
        throw InvalidInputError(where(t.name) + ": cannot read " + range + ": " +
                                (err == kEndOfFile
                                     ? "the file ended; it was truncated after it was opened."
                                     : errno_text(err)));
      }
      if (dtype->encoding != Encoding::kF32) {
        safetensors::decode_to_f32(dtype->encoding, raw.data(), n, target);
      }
      done += n;
    }
  }

  if (direct) return;
  if (!region.transposed) {
    out.copy_from(staging.view(out.shape()));
    return;
  }
  // staging: [count, length] stored runs -> out: [length, count]
  const float* s = staging.data();
  for (int64_t i = 0; i < region.length; ++i) {
    for (int64_t j = 0; j < region.count; ++j) out(i, j) = s[j * region.length + i];
  }
}

}  // namespace colrow
