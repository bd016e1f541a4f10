// Safetensors dtypes, F16/BF16 decoding and the writer's header
// (safetensors_format.h).
#include "io/safetensors_format.h"

#include <cstring>
#include <nlohmann/json.hpp>

#include "colrow/core/bfloat16.h"
#include "colrow/core/error.h"
#include "core/parallel_threshold.h"

namespace colrow::safetensors {
namespace {

// Byte-sized and sub-byte dtypes of the safetensors spec.
constexpr DTypeInfo kDTypes[] = {
    {"F32", 32, Encoding::kF32},           {"F16", 16, Encoding::kF16},
    {"BF16", 16, Encoding::kBF16},         {"F64", 64, Encoding::kUnreadable},
    {"I64", 64, Encoding::kUnreadable},    {"U64", 64, Encoding::kUnreadable},
    {"I32", 32, Encoding::kUnreadable},    {"U32", 32, Encoding::kUnreadable},
    {"I16", 16, Encoding::kUnreadable},    {"U16", 16, Encoding::kUnreadable},
    {"I8", 8, Encoding::kUnreadable},      {"U8", 8, Encoding::kUnreadable},
    {"BOOL", 8, Encoding::kUnreadable},    {"F8_E5M2", 8, Encoding::kUnreadable},
    {"F8_E4M3", 8, Encoding::kUnreadable}, {"F8_E8M0", 8, Encoding::kUnreadable},
    {"F6_E2M3", 6, Encoding::kUnreadable}, {"F6_E3M2", 6, Encoding::kUnreadable},
    {"F4", 4, Encoding::kUnreadable},
};

// Tensors above this many elements cannot be counted exactly in commit()'s
// fp32 tally (5 base-256 limbs); 2^40 fp32 elements are 4 TiB.
constexpr int64_t kMaxWriterElements = int64_t{1} << 40;

std::string names_where(bool readable) {
  std::string out;
  for (const DTypeInfo& d : kDTypes) {
    if ((d.encoding != Encoding::kUnreadable) != readable) continue;
    out += (out.empty() ? "" : ", ") + std::string(d.name);
  }
  return out;
}

}  // namespace

const DTypeInfo* find_dtype(const std::string& name) {
  for (const DTypeInfo& d : kDTypes) {
    if (name == d.name) return &d;
  }
  return nullptr;
}

std::string readable_dtype_names() {
  return names_where(true);
}

std::string unreadable_dtype_names() {
  return names_where(false);
}

uint64_t load_le64(const unsigned char* bytes) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | bytes[i];
  return v;
}

void store_le64(uint64_t value, unsigned char* bytes) {
  for (int i = 0; i < 8; ++i) bytes[i] = static_cast<unsigned char>(value >> (8 * i));
}

float f16_to_f32(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  uint32_t exponent = (h >> 10) & 0x1fu;
  uint32_t mantissa = h & 0x3ffu;
  uint32_t bits;
  if (exponent == 0x1f) {
    bits = sign | 0x7f800000u | (mantissa << 13);  // inf, or NaN with its payload
  } else if (exponent != 0) {
    bits = sign | ((exponent + (127 - 15)) << 23) | (mantissa << 13);
  } else if (mantissa == 0) {
    bits = sign;  // +-0
  } else {
    // Subnormal mantissa * 2^-24: shift its leading 1 into the implicit bit.
    const int shift = __builtin_clz(mantissa) - 21;  // 10 - index of the leading 1
    mantissa = (mantissa << shift) & 0x3ffu;
    exponent = static_cast<uint32_t>(127 - 14 - shift);
    bits = sign | (exponent << 23) | (mantissa << 13);
  }
  float f;
  std::memcpy(&f, &bits, sizeof f);
  return f;
}

void decode_to_f32(Encoding encoding, const void* src, int64_t n, float* dst) {
  const unsigned char* bytes = static_cast<const unsigned char*>(src);
  switch (encoding) {
    case Encoding::kF32:
      std::memcpy(dst, src, static_cast<size_t>(n) * sizeof(float));
      return;
    case Encoding::kF16:
#pragma omp parallel for schedule(static) if (n > kParallelElements)
      for (int64_t i = 0; i < n; ++i) {
        dst[i] = f16_to_f32(static_cast<uint16_t>(bytes[2 * i] | (bytes[2 * i + 1] << 8)));
      }
      return;
    case Encoding::kBF16:
#pragma omp parallel for schedule(static) if (n > kParallelElements)
      for (int64_t i = 0; i < n; ++i) {
        dst[i] = bf16_to_float(static_cast<uint16_t>(bytes[2 * i] | (bytes[2 * i + 1] << 8)));
      }
      return;
    case Encoding::kUnreadable:
      break;
  }
  throw InternalError("[safetensors] decode_to_f32 called for a dtype colrow cannot read");
}

WriterLayout writer_layout(const std::string& path,
                           const std::vector<std::pair<std::string, Shape>>& entries,
                           const std::map<std::string, std::string>& metadata, DType dtype) {
  const std::string where = "[safetensors] " + path + ": ";
  std::map<std::string, Shape> sorted;
  for (const auto& [name, shape] : entries) {
    if (name == "__metadata__") {
      throw InvalidInputError(where +
                              "tensor name \"__metadata__\" is reserved for the header's "
                              "metadata. Rename the tensor.");
    }
    if (!sorted.emplace(name, shape).second) {
      throw InvalidInputError(where + "tensor \"" + name +
                              "\" is listed twice; every tensor name must be unique.");
    }
    for (int64_t d : shape) {
      if (d < 0) {
        throw InvalidInputError(where + "tensor \"" + name + "\": shape " + shape_to_string(shape) +
                                " must have no negative dimension.");
      }
    }
    int64_t numel = 1;
    for (int64_t d : shape) {
      if (d != 0 && numel > kMaxWriterElements / d)
        numel = kMaxWriterElements;
      else
        numel *= d;
    }
    if (numel >= kMaxWriterElements) {
      throw InvalidInputError(where + "tensor \"" + name + "\": shape " + shape_to_string(shape) +
                              " must have fewer than 2^40 elements to be written.");
    }
  }

  WriterLayout layout;
  nlohmann::json header = nlohmann::json::object();
  if (!metadata.empty()) header["__metadata__"] = metadata;
  uint64_t offset = 0;
  for (const auto& [name, shape] : sorted) {
    TensorInfo info{name, dtype == DType::kBF16 ? "BF16" : "F32", shape, offset,
                    offset + static_cast<uint64_t>(dtype_bytes(dtype) * shape_numel(shape))};
    header[name] = {
        {"dtype", info.dtype}, {"shape", info.shape}, {"data_offsets", {info.begin, info.end}}};
    offset = info.end;
    layout.tensors.push_back(std::move(info));
  }
  std::string json;
  try {
    json = header.dump();  // compact; keys in byte order (nlohmann's std::map)
  } catch (const nlohmann::json::exception& e) {
    throw InvalidInputError(where + "a tensor name or metadata string is not valid UTF-8 (" +
                            e.what() + ").");
  }
  const uint64_t padded = (json.size() + kDataAlignment - 1) / kDataAlignment * kDataAlignment;
  json.resize(padded, ' ');  // 8 + padded is a multiple of 8
  layout.head.resize(kLengthFieldBytes);
  store_le64(padded, reinterpret_cast<unsigned char*>(&layout.head[0]));
  layout.head += json;
  layout.file_bytes = layout.head.size() + offset;
  return layout;
}

}  // namespace colrow::safetensors
