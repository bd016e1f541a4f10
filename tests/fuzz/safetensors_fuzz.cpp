// Fuzzes the safetensors reader (src/io/safetensors_reader.cpp,
// safetensors_format.cpp, region.cpp, tensor_checksums.cpp): the input is a
// whole file. The reader checks the 8-byte header length, the JSON header and
// every entry's dtype, shape and data_offsets against the file. Then, apart,
// the per-tensor CRC-32s of __metadata__ are verified (over a group of one),
// and every readable tensor is read whole, by rows, by blocks (stored and
// transposed, into a strided output) and by tp shards: each part must equal
// the matching part of the whole read, bit for bit.
// Expected for bad input: InvalidInputError from the constructor and from
// verify_checksums. A finding: a crash, an ASan or UBSan report, any other
// exception (InternalError is a bug by definition), any error reading a
// tensor of a file the reader accepted (but for a dtype it cannot convert), a
// part that disagrees with the whole tensor, a hang, or an allocation past
// libFuzzer's -malloc_limit_mb.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <vector>

#include "colrow/core/error.h"
#include "colrow/core/shard_spec.h"
#include "colrow/dist/local_communicator.h"
#include "colrow/io/safetensors.h"
#include "finding.h"
#include "io/safetensors_format.h"
#include "memory_file.h"

namespace colrow::fuzz {
namespace {

constexpr const char* kTarget = "safetensors";

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && (a.empty() || std::memcmp(a.data(), b.data(), 4 * a.size()) == 0);
}

// whole: [a, b] row-major -> the [rows, cols] block at (row0, col0), or, when
// transposed, of its transpose [b, a].
std::vector<float> block_of(const std::vector<float>& whole, int64_t b, int64_t row0, int64_t rows,
                            int64_t col0, int64_t cols, bool transposed) {
  std::vector<float> out;
  for (int64_t i = 0; i < rows; ++i) {
    for (int64_t j = 0; j < cols; ++j) {
      out.push_back(transposed ? whole[(col0 + j) * b + row0 + i]
                               : whole[(row0 + i) * b + col0 + j]);
    }
  }
  return out;
}

// The second half of each dim of a 2-d tensor, read into a strided output
// (a column slice of a wider buffer), plain and transposed.
void check_blocks(const SafetensorsReader& reader, const TensorInfo& t,
                  const std::vector<float>& whole) {
  const int64_t a = t.shape[0], b = t.shape[1];
  for (const bool transposed : {false, true}) {
    const int64_t height = transposed ? b : a, width = transposed ? a : b;
    const int64_t row0 = height / 2, rows = height - row0, col0 = width / 2, cols = width - col0;
    // An empty tensor's block is empty however long its sides: no buffer.
    Tensor wide = whole.empty() ? Tensor() : Tensor::empty({rows, cols + 1});
    Tensor out = whole.empty() ? Tensor() : wide.slice(1, 0, cols);
    if (transposed) {
      reader.read_block_transposed(t.name, row0, rows, col0, cols, out);
    } else {
      reader.read_block(t.name, row0, rows, col0, cols, out);
    }
    require(kTarget, out.shape() == Shape({rows, cols}), "a block has another shape");
    if (whole.empty()) continue;
    require(kTarget, out.data() == wide.data(), "read_block replaced an output of the right shape");
    require(kTarget,
            same_bits(out.to_vector(), block_of(whole, b, row0, rows, col0, cols, transposed)),
            "a block differs from the whole tensor");
  }
  // Shard 1 of 2 of W = S^T along each dim (GPT-2's Conv1D weights).
  const Shape full = {b, a};
  for (int dim = 0; dim < 2; ++dim) {
    if (full[dim] % 2 != 0) continue;
    Tensor shard;
    reader.read(t.name, ShardSpec{full, dim, 1, 2}, shard, /*transposed=*/true);
    const int64_t half = full[dim] / 2;
    const std::vector<float> expected = whole.empty() ? std::vector<float>()
                                        : dim == 0    ? block_of(whole, b, half, half, 0, a, true)
                                                      : block_of(whole, b, 0, b, half, half, true);
    require(kTarget, same_bits(shard.to_vector(), expected),
            "a transposed shard differs from the whole tensor");
  }
}

// Shard 1 of 2 along every even dim, as a tp rank reads its part of a layer.
void check_shards(const SafetensorsReader& reader, const TensorInfo& t,
                  const std::vector<float>& whole) {
  for (size_t dim = 0; dim < t.shape.size(); ++dim) {
    if (t.shape[dim] % 2 != 0) continue;
    Tensor shard;
    reader.read(t.name, ShardSpec{t.shape, static_cast<int>(dim), 1, 2}, shard);
    // [outer, size, inner] around dim: the second half of size. (No
    // elements, no products: dims of an empty tensor may multiply past 2^63.)
    int64_t outer = 1, inner = 1;
    for (size_t d = 0; d < dim && !whole.empty(); ++d) outer *= t.shape[d];
    for (size_t d = dim + 1; d < t.shape.size() && !whole.empty(); ++d) inner *= t.shape[d];
    const int64_t size = t.shape[dim], half = size / 2;
    std::vector<float> expected;
    for (int64_t o = 0; o < outer && !whole.empty(); ++o) {
      const auto first = whole.begin() + (o * size + half) * inner;
      expected.insert(expected.end(), first, first + half * inner);
    }
    require(kTarget, same_bits(shard.to_vector(), expected),
            "a shard differs from the whole tensor");
  }
}

void check_tensor(const SafetensorsReader& reader, const TensorInfo& t) {
  const auto* dtype = safetensors::find_dtype(t.dtype);
  require(kTarget, dtype != nullptr, "the reader accepted an unknown dtype");
  Tensor whole;
  if (dtype->encoding == safetensors::Encoding::kUnreadable) {
    try {
      reader.read(t.name, ShardSpec::replicated(t.shape), whole);
    } catch (const InvalidInputError&) {
      return;
    }
    require(kTarget, false, "a dtype colrow cannot read was read");
  }
  reader.read(t.name, ShardSpec::replicated(t.shape), whole);
  require(kTarget, whole.shape() == t.shape, "the whole read has another shape");
  const std::vector<float> values = whole.to_vector();
  if (t.shape.empty()) return;  // a scalar: no rows, blocks or shards
  // The second half of the rows.
  const int64_t row0 = t.shape[0] / 2, rows = t.shape[0] - row0;
  const int64_t inner = t.shape[0] > 0 ? static_cast<int64_t>(values.size()) / t.shape[0] : 0;
  Tensor part;
  reader.read_rows(t.name, row0, rows, part);
  require(kTarget,
          same_bits(part.to_vector(), std::vector<float>(values.begin() + row0 * inner,
                                                         values.begin() + (row0 + rows) * inner)),
          "read_rows differs from the whole tensor");
  check_shards(reader, t, values);
  if (t.shape.size() == 2) check_blocks(reader, t, values);
}

MemoryFile& file() {
  static MemoryFile instance("model.safetensors");
  return instance;
}

}  // namespace
}  // namespace colrow::fuzz

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace colrow;
  fuzz::file().assign(data, size);
  std::optional<SafetensorsReader> reader;
  try {
    reader.emplace(fuzz::file().path());
  } catch (const InvalidInputError&) {
    return 0;  // the reader's answer to a malformed file
  }
  try {
    LocalCommunicator group;
    reader->verify_checksums(group);
  } catch (const InvalidInputError&) {  // a damaged checksum entry, a tensor that fails its CRC
  }
  // Every tensor of an accepted file reads (an error here is a finding too).
  for (const auto& [name, info] : reader->tensors()) {
    fuzz::require(fuzz::kTarget, info.end >= info.begin && reader->data_start() + info.end <= size,
                  "an entry's bytes lie outside the file");
    fuzz::check_tensor(*reader, info);
  }
  return 0;
}
