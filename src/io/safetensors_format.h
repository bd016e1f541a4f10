// The safetensors format (huggingface/safetensors README): the 8-byte
// little-endian header length, the JSON header's size limit and alignment, the
// dtype names and sizes, exact F16/BF16 -> F32 decoding, and the header
// colrow's writer makes (a pure function of the tensor list).
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "colrow/io/safetensors.h"

namespace colrow::safetensors {

constexpr uint64_t kLengthFieldBytes = 8;
constexpr uint64_t kMaxHeaderBytes = 100000000;  // the reference implementation's limit
constexpr uint64_t kDataAlignment = 8;           // where the data buffer starts

enum class Encoding { kF32, kF16, kBF16, kUnreadable };

struct DTypeInfo {
  const char* name;
  int bits;  // per element
  Encoding encoding;
};

// nullptr when `name` is not a safetensors dtype.
const DTypeInfo* find_dtype(const std::string& name);
// For messages: "F32, F16, BF16" and the known dtypes colrow cannot read.
std::string readable_dtype_names();
std::string unreadable_dtype_names();

uint64_t load_le64(const unsigned char* bytes);
void store_le64(uint64_t value, unsigned char* bytes);

// Exact: every finite value, subnormals, +-0 and +-inf map to the same value;
// a NaN stays a NaN with its sign and payload. (bf16: core/bfloat16.h.)
float f16_to_f32(uint16_t bits);
// n little-endian elements at `src` -> dst: [n] fp32. encoding != kUnreadable.
void decode_to_f32(Encoding encoding, const void* src, int64_t n, float* dst);

// What colrow's writer puts in a file: every tensor in one dtype.
struct WriterLayout {
  std::string head;                 // the file's first bytes: length field, JSON, space padding
  std::vector<TensorInfo> tensors;  // name order, offsets relative to the buffer
  uint64_t file_bytes = 0;
};
// Throws InvalidInputError naming `path` for a repeated or reserved name, a
// negative dimension or a tensor too large to count.
WriterLayout writer_layout(const std::string& path,
                           const std::vector<std::pair<std::string, Shape>>& entries,
                           const std::map<std::string, std::string>& metadata, DType dtype);

}  // namespace colrow::safetensors
