// Safetensors reading and writing (io/safetensors.h), checked against an
// independent writer of the format in this file (no colrow code). At tp = world
// size every rank writes its shards of row-, column-, replicated, n-d and
// Conv1D-style (transposed) tensors; the committed file is byte for byte what
// the independent writer makes on one rank, and every rank reads any shard or
// block back bitwise. F16 and BF16 decode exactly for all 65536 bit patterns; a
// read touches only its bytes; every malformed file gives one message naming
// the file (and the tensor); writer failures throw on every rank alike and
// leave an existing file untouched. The writer's per-tensor CRC-32s (in
// __metadata__) equal zlib's over each tensor's bytes, for tensors that
// straddle the ranks' parts too; a flipped byte is named on every rank.
#include "colrow/io/safetensors.h"

#include <gtest/gtest.h>
#include <sys/resource.h>
#include <unistd.h>
#include <zlib.h>

#include <csignal>

#include <cmath>
#include <cstring>
#include <exception>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "colrow/core/bfloat16.h"
#include "colrow/core/error.h"
#include "colrow/dist/recording_communicator.h"
#include "nn/layer_test_helpers.h"
#include "support/test_world.h"

namespace colrow {
namespace {

using testing::world;

// ---------------------------------------------------------------------------
// An independent safetensors writer: plain C++, header text built by hand.
// ---------------------------------------------------------------------------

struct RawTensor {
  std::string dtype;
  std::vector<int64_t> shape;
  std::string bytes;  // little-endian elements, row-major
};

std::string le64(uint64_t n) {
  std::string out(8, '\0');
  for (int i = 0; i < 8; ++i) out[i] = static_cast<char>((n >> (8 * i)) & 0xff);
  return out;
}

template <typename T>
std::string join(const std::vector<T>& values) {
  std::string out;
  for (size_t i = 0; i < values.size(); ++i) out += (i ? "," : "") + std::to_string(values[i]);
  return out;
}

// What colrow's writer must make: compact JSON with keys in byte order
// ("__metadata__" only when non-empty), tensors laid out in name order from
// offset 0, the header padded with spaces to a multiple of 8.
std::string independent_file(const std::map<std::string, RawTensor>& tensors,
                             const std::map<std::string, std::string>& metadata) {
  std::map<std::string, std::string> values;  // key -> JSON text
  if (!metadata.empty()) {
    std::string m;
    for (const auto& [k, v] : metadata)
      m += (m.empty() ? "" : ",") + ("\"" + k + "\":\"" + v + "\"");
    values["__metadata__"] = "{" + m + "}";
  }
  uint64_t offset = 0;
  std::string data;
  for (const auto& [name, t] : tensors) {
    values[name] = "{\"data_offsets\":[" + std::to_string(offset) + "," +
                   std::to_string(offset + t.bytes.size()) + "],\"dtype\":\"" + t.dtype +
                   "\",\"shape\":[" + join(t.shape) + "]}";
    offset += t.bytes.size();
    data += t.bytes;
  }
  std::string json;
  for (const auto& [k, v] : values) json += (json.empty() ? "{" : ",") + ("\"" + k + "\":" + v);
  json += json.empty() ? "{}" : "}";
  while (json.size() % 8 != 0) json += ' ';
  return le64(json.size()) + json + data;
}

// `metadata` and what colrow's writer adds: "crc32:<name>" -> zlib's crc32
// of the tensor's bytes, 8 lower-case hex digits.
std::map<std::string, std::string> with_checksums(const std::map<std::string, RawTensor>& tensors,
                                                  std::map<std::string, std::string> metadata) {
  for (const auto& [name, t] : tensors) {
    const uLong crc = crc32(crc32(0L, Z_NULL, 0), reinterpret_cast<const Bytef*>(t.bytes.data()),
                            static_cast<uInt>(t.bytes.size()));
    char text[9];
    std::snprintf(text, sizeof text, "%08lx", crc);
    metadata["crc32:" + name] = text;
  }
  return metadata;
}

// Any header text, unpadded (for malformed files).
std::string with_header(const std::string& json, const std::string& data) {
  return le64(json.size()) + json + data;
}

std::string f32_bytes(const std::vector<float>& values) {
  std::string out(values.size() * 4, '\0');
  // the host is little-endian; no memcpy from an empty vector's null pointer
  if (!values.empty()) std::memcpy(&out[0], values.data(), out.size());
  return out;
}

std::string u16_bytes(const std::vector<uint16_t>& values) {
  std::string out;
  for (uint16_t v : values) {
    out += static_cast<char>(v & 0xff);
    out += static_cast<char>(v >> 8);
  }
  return out;
}

void write_file(const std::string& path, const std::string& bytes) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  ASSERT_TRUE(f.good()) << "cannot write " << path;
}

std::string read_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::ostringstream s;
  s << f.rdbuf();
  return s.str();
}

// Equal bytes, or where they first differ.
::testing::AssertionResult same_bytes(const std::string& got, const std::string& want) {
  if (got == want) return ::testing::AssertionSuccess();
  size_t i = 0;
  while (i < got.size() && i < want.size() && got[i] == want[i]) ++i;
  return ::testing::AssertionFailure()
         << "sizes " << got.size() << " vs " << want.size() << "; first difference at byte " << i
         << "; got header: " << got.substr(8, 120) << "\nwant header: " << want.substr(8, 120);
}

// ---------------------------------------------------------------------------
// Independent F16 / BF16 decoders: the value from its fields, in double.
// ---------------------------------------------------------------------------

double f16_value(uint16_t h) {
  const int e = (h >> 10) & 0x1f, m = h & 0x3ff;
  const double v = e == 0x1f ? (m ? NAN : INFINITY)
                   : e == 0  ? std::ldexp(m, -24)
                             : std::ldexp(1024 + m, e - 25);
  return (h >> 15) ? -v : v;
}

double bf16_value(uint16_t h) {
  const int e = (h >> 7) & 0xff, m = h & 0x7f;
  const double v = e == 0xff ? (m ? NAN : INFINITY)
                   : e == 0  ? std::ldexp(m, -133)
                             : std::ldexp(128 + m, e - 134);
  return (h >> 15) ? -v : v;
}

// got[i] is the value of pattern bits[i] exactly: the same fp32 bits (so -0
// stays -0), or, for a NaN pattern, a NaN of the same sign.
void expect_decoded(const char* what, const std::vector<uint16_t>& bits, const Tensor& got,
                    double (*value)(uint16_t)) {
  const std::vector<float> g = got.to_vector();
  ASSERT_EQ(g.size(), bits.size()) << what;
  int64_t wrong = 0, first = -1;
  for (size_t i = 0; i < bits.size(); ++i) {
    const double ref = value(bits[i]);
    bool ok;
    if (std::isnan(ref)) {
      ok = std::isnan(g[i]) && std::signbit(g[i]) == ((bits[i] >> 15) != 0);
    } else {
      const float want = static_cast<float>(ref);  // exact: F16/BF16 values are fp32 values
      ok = static_cast<double>(want) == ref && std::memcmp(&want, &g[i], sizeof want) == 0;
    }
    if (!ok && wrong++ == 0) first = static_cast<int64_t>(i);
  }
  EXPECT_EQ(wrong, 0) << what << ": " << wrong << " patterns decode wrongly; first 0x" << std::hex
                      << (first >= 0 ? bits[first] : 0) << std::dec << " -> "
                      << (first >= 0 ? g[first] : 0.0f);
}

// ---------------------------------------------------------------------------
// Fixture: a directory every rank sees, named after rank 0's process id.
// ---------------------------------------------------------------------------

class SafetensorsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    Tensor id = Tensor::from_vector({1}, {static_cast<float>(::getpid())});  // < 2^22: exact
    world().broadcast(id, 0);
    dir_ = (std::filesystem::temp_directory_path() /
            ("colrow_safetensors_test_" + std::to_string(static_cast<long>(id.data()[0]))))
               .string();
    if (world().rank() == 0) {
      std::filesystem::remove_all(dir_);
      std::filesystem::create_directories(dir_);
    }
    world().barrier();
  }
  void TearDown() override {
    world().barrier();
    if (world().rank() == 0) std::filesystem::remove_all(dir_);
  }
  // A file every rank names alike / a file of this rank only.
  std::string shared_path(const std::string& name) const { return dir_ + "/" + name; }
  // The file a failed save must leave alone, put at `path` by rank 0.
  void write_previous(const std::string& path) const {
    if (world().rank() == 0) write_file(path, kPrevious);
    world().barrier();
  }
  // After a save failed on every rank: the previous file whole, no temporary.
  void expect_previous_kept(const std::string& path) const {
    world().barrier();
    EXPECT_EQ(read_file(path), kPrevious);
    EXPECT_FALSE(std::filesystem::exists(path + ".tmp"));
  }
  static constexpr const char* kPrevious = "the previous checkpoint";
  std::string local_path(const std::string& name) const {
    return dir_ + "/rank" + std::to_string(world().rank()) + "_" + name;
  }

  std::string dir_;
};

// Runs fn and expects an E whose message holds every part.
template <typename E>
void expect_error(const std::function<void()>& fn, const std::vector<std::string>& parts) {
  try {
    fn();
    ADD_FAILURE() << "no exception; expected one containing \"" << parts.at(0) << "\"";
  } catch (const E& e) {
    const std::string message = e.what();
    for (const std::string& part : parts) {
      EXPECT_NE(message.find(part), std::string::npos)
          << "message: " << message << "\nlacks: " << part;
    }
  } catch (const std::exception& e) {
    ADD_FAILURE() << "unexpected exception type: " << e.what();
  }
}

// ---------------------------------------------------------------------------
// Round trip at tp = world size.
// ---------------------------------------------------------------------------

enum class How { kWrite, kWriteRows, kWriteBlock };

struct Planned {
  std::string name;
  Shape shape;  // colrow's (full) shape; stored transposed when `transposed`
  int dim;
  bool sharded;
  bool transposed;
  How how;

  Shape stored() const { return transposed ? Shape{shape[1], shape[0]} : shape; }
  ShardSpec spec(int part, int parts) const {
    return sharded ? ShardSpec{shape, dim, part, parts} : ShardSpec::replicated(shape);
  }
};

// Sizes divide by 12, so every world size 1..4 shards them.
std::vector<Planned> plan() {
  return {
      {"a.col.weight", {24, 12}, 0, true, false, How::kWriteRows},
      {"a.col.bias", {24}, 0, true, false, How::kWrite},
      {"b.row.weight", {12, 24}, 1, true, false, How::kWriteBlock},
      {"b.row.bias", {12}, 0, false, false, How::kWrite},  // replicated: rank 0 writes
      {"c.conv_col.weight", {36, 12}, 0, true, true, How::kWriteBlock},  // stored [12, 36]
      {"d.conv_row.weight", {12, 36}, 1, true, true, How::kWrite},       // stored [36, 12]
      {"e.stack", {12, 2, 3}, 0, true, false, How::kWrite},
      {"f.middle", {2, 12, 3}, 1, true, false, How::kWrite},
      {"g.empty", {0, 12}, 0, false, false, How::kWrite},
      {"h.scalar", {}, 0, false, false, How::kWrite},
  };
}

// The same full tensor on every rank, in colrow's orientation.
Tensor full_value(size_t i, const Planned& p) {
  return testing::random_tensor(p.shape, 100 + i);
}

// The values in the file's order (the transpose for Conv1D-style tensors).
std::vector<float> stored_values(const Planned& p, const Tensor& full) {
  if (!p.transposed) return full.to_vector();
  std::vector<float> out(full.numel());
  for (int64_t i = 0; i < p.shape[0]; ++i) {
    for (int64_t j = 0; j < p.shape[1]; ++j) out[j * p.shape[0] + i] = full(i, j);
  }
  return out;
}

std::vector<std::pair<std::string, Shape>> entries_of(const std::vector<Planned>& planned) {
  std::vector<std::pair<std::string, Shape>> entries;
  for (const Planned& p : planned) entries.emplace_back(p.name, p.stored());
  return entries;
}

// Every planned tensor through the write call it names, each rank its shard
// (a view: strided for dim-1 shards).
void write_planned(SafetensorsWriter& writer, const std::vector<Planned>& planned, int tp_rank,
                   int tp_size) {
  for (size_t i = 0; i < planned.size(); ++i) {
    const Planned& p = planned[i];
    const Tensor full = full_value(i, p);
    const ShardSpec spec = p.spec(tp_rank, tp_size);
    const Tensor local = p.sharded ? full.shard(p.dim, tp_rank, tp_size) : full;
    const int64_t offset = p.sharded ? spec.offset_along_dim() : 0;
    switch (p.how) {
      case How::kWrite:
        writer.write(p.name, spec, local, p.transposed);
        break;
      case How::kWriteRows:
        writer.write_rows(p.name, offset, local);
        break;
      case How::kWriteBlock:
        writer.write_block(p.name, p.dim == 0 ? offset : 0, p.dim == 1 ? offset : 0, local,
                           p.transposed);
        break;
    }
  }
}

TEST_F(SafetensorsTest, RoundTripAtTpEqualsWorldSize) {
  Communicator& tp = world();
  const int tp_rank = tp.rank(), tp_size = tp.size();
  const std::vector<Planned> planned = plan();
  const std::string path = shared_path("model.safetensors");

  SafetensorsWriter writer(tp, path, entries_of(planned));
  write_planned(writer, planned, tp_rank, tp_size);
  writer.commit();
  EXPECT_FALSE(std::filesystem::exists(writer.temporary_path()));

  // Byte for byte what the independent writer makes from the full tensors.
  std::map<std::string, RawTensor> raw;
  for (size_t i = 0; i < planned.size(); ++i) {
    const Planned& p = planned[i];
    raw[p.name] = {"F32", p.stored(), f32_bytes(stored_values(p, full_value(i, p)))};
  }
  const std::map<std::string, std::string> metadata = with_checksums(raw, {{"format", "pt"}});
  EXPECT_TRUE(same_bytes(read_file(path), independent_file(raw, metadata)));

  // Every rank reads its own shard, its neighbour's, the whole tensor and blocks.
  const SafetensorsReader reader(path);
  EXPECT_EQ(reader.metadata(), metadata);
  reader.verify_checksums(world());
  EXPECT_EQ(reader.data_start() % 8, 0u);
  EXPECT_EQ(reader.tensors().size(), planned.size());
  for (size_t i = 0; i < planned.size(); ++i) {
    const Planned& p = planned[i];
    SCOPED_TRACE(p.name);
    EXPECT_EQ(reader.info(p.name).shape, p.stored());
    EXPECT_EQ(reader.info(p.name).dtype, "F32");
    const Tensor full = full_value(i, p);
    Tensor out;
    for (int part : {tp_rank, (tp_rank + 1) % tp_size}) {
      reader.read(p.name, p.spec(part, tp_size), out, p.transposed);
      const Tensor want = p.sharded ? full.shard(p.dim, part, tp_size).clone() : full;
      EXPECT_TRUE(testing::same_bits(out, want)) << "part " << part;
    }
    reader.read(p.name, ShardSpec::replicated(p.shape), out, p.transposed);
    EXPECT_TRUE(testing::same_bits(out, full));
  }
  Tensor out;
  const Tensor row_weight = full_value(2, planned[2]);
  reader.read_block("b.row.weight", 1, 5, 2, 7, out);
  EXPECT_TRUE(testing::same_bits(out, row_weight.slice(0, 1, 5).slice(1, 2, 7).clone()));
  const Tensor conv = full_value(4, planned[4]);  // [36, 12], stored [12, 36]
  reader.read_block_transposed("c.conv_col.weight", 3, 20, 5, 4, out);
  EXPECT_TRUE(testing::same_bits(out, conv.slice(0, 3, 20).slice(1, 5, 4).clone()));
  const Tensor stack = full_value(6, planned[6]);
  reader.read_rows("e.stack", 2, 7, out);
  EXPECT_TRUE(testing::same_bits(out, stack.slice(0, 2, 7).clone()));
}

// A BF16 export (train --save-dtype bf16): the same layout with every value
// rounded to nearest even and stored in 2 bytes, byte for byte what the
// independent writer makes from the rounded values; read back at any tp, each
// shard is the rounded full tensor's shard.
TEST_F(SafetensorsTest, Bf16FileHoldsTheRoundedValues) {
  Communicator& tp = world();
  const int tp_rank = tp.rank(), tp_size = tp.size();
  const std::vector<Planned> planned = plan();
  const std::string path = shared_path("model.bf16.safetensors");
  SafetensorsWriter writer(tp, path, entries_of(planned), {{"format", "pt"}}, DType::kBF16);
  write_planned(writer, planned, tp_rank, tp_size);
  writer.commit();

  auto rounded = [](std::vector<float> v) {
    for (float& x : v) x = bf16_to_float(float_to_bf16(x));
    return v;
  };
  std::map<std::string, RawTensor> raw;
  for (size_t i = 0; i < planned.size(); ++i) {
    const Planned& p = planned[i];
    std::vector<uint16_t> bits;
    for (float x : stored_values(p, full_value(i, p))) bits.push_back(float_to_bf16(x));
    raw[p.name] = {"BF16", p.stored(), u16_bytes(bits)};
  }
  const std::map<std::string, std::string> metadata = with_checksums(raw, {{"format", "pt"}});
  EXPECT_TRUE(same_bytes(read_file(path), independent_file(raw, metadata)));

  const SafetensorsReader reader(path);
  reader.verify_checksums(world());
  for (size_t i = 0; i < planned.size(); ++i) {
    const Planned& p = planned[i];
    SCOPED_TRACE(p.name);
    EXPECT_EQ(reader.info(p.name).dtype, "BF16");
    const Tensor full = full_value(i, p);
    const Tensor full_rounded = Tensor::from_vector(p.shape, rounded(full.to_vector()));
    Tensor out;
    const int part = (tp_rank + 1) % tp_size;
    reader.read(p.name, p.spec(part, tp_size), out, p.transposed);
    const Tensor want = p.sharded ? full_rounded.shard(p.dim, part, tp_size).clone() : full_rounded;
    EXPECT_TRUE(testing::same_bits(out, want));
  }
}

TEST_F(SafetensorsTest, WriterIssuesTheDocumentedCollectives) {
  RecordingCommunicator tp(world());
  const int64_t tp_size = tp.size();
  const std::vector<Planned> planned = plan();
  SafetensorsWriter writer(tp, shared_path("model.safetensors"), entries_of(planned));
  // [broadcast] rank 0's create result + 4 hash pieces; [all_reduce_sum] every rank's open result
  EXPECT_EQ(tp.events(), (std::vector<CollectiveEvent>{{"broadcast", 6, 0.0},
                                                       {"all_reduce_sum", 2 * tp_size, 0.0}}));
  tp.clear();
  for (size_t i = 0; i < planned.size(); ++i) {
    const Planned& p = planned[i];
    const Tensor full = full_value(i, p);
    const Tensor local = p.sharded ? full.shard(p.dim, tp.rank(), tp.size()) : full;
    writer.write(p.name, p.spec(tp.rank(), tp.size()), local, p.transposed);
  }
  EXPECT_TRUE(tp.events().empty()) << "writes are local";
  writer.commit();
  // [all_reduce_sum] 5 count limbs per tensor + every rank's failure;
  // [all_gather] 2 CRC halves per tensor + the read's result; [broadcast] the rename
  const int64_t n = static_cast<int64_t>(planned.size());
  const int64_t tally = 5 * n + 2 * tp_size;
  EXPECT_EQ(tp.events(), (std::vector<CollectiveEvent>{{"all_reduce_sum", tally, 0.0},
                                                       {"all_gather", 2 * n + 1, 0.0},
                                                       {"broadcast", 2, 0.0}}));
  tp.clear();
  SafetensorsReader(writer.path()).verify_checksums(tp);
  EXPECT_EQ(tp.events(), (std::vector<CollectiveEvent>{{"all_gather", 2 * n + 1, 0.0}}));
}

// Tensors of 1.25 MiB: the ranks' parts of the data (1 MiB aligned) split
// them, so each CRC is joined from several ranks' pieces. The joined value
// must be zlib's over the whole tensor; a byte flipped in any one tensor is
// then named, on every rank alike, and only that tensor.
TEST_F(SafetensorsTest, ChecksumsJoinedOverRanksNameTheCorruptTensor) {
  const std::string path = shared_path("big.safetensors");
  const int64_t n = 5 * (int64_t{1} << 16);  // floats: 1.25 MiB
  std::map<std::string, RawTensor> raw;
  std::vector<std::pair<std::string, Shape>> entries;
  std::vector<Tensor> values;
  for (int t = 0; t < 3; ++t) {
    std::vector<float> v(n);
    for (int64_t i = 0; i < n; ++i) v[i] = static_cast<float>((i * 7 + t * 13) % 1001) - 500.0f;
    const std::string name = "t" + std::to_string(t);
    raw[name] = {"F32", {n}, f32_bytes(v)};
    entries.emplace_back(name, Shape{n});
    values.push_back(Tensor::from_vector({n}, v));
  }
  {
    SafetensorsWriter writer(world(), path, entries);
    for (int t = 0; t < 3; ++t) {
      // Rows split over the ranks: every rank writes a piece of every tensor.
      const int64_t per = (n + world().size() - 1) / world().size();
      const int64_t row0 = std::min(n, per * world().rank());
      const int64_t rows = std::min(n, row0 + per) - row0;
      if (rows > 0) writer.write_rows(entries[t].first, row0, values[t].slice(0, row0, rows));
    }
    writer.commit();
  }
  EXPECT_EQ(SafetensorsReader(path).metadata(), with_checksums(raw, {{"format", "pt"}}));
  SafetensorsReader(path).verify_checksums(world());

  for (int t = 0; t < 3; ++t) {
    SCOPED_TRACE("flipped in t" + std::to_string(t));
    const std::string copy = shared_path("flipped" + std::to_string(t) + ".safetensors");
    if (world().rank() == 0) {
      std::string bytes = read_file(path);
      const uint64_t data_start = SafetensorsReader(path).data_start();
      const TensorInfo info = SafetensorsReader(path).info("t" + std::to_string(t));
      bytes[data_start + info.begin + (info.end - info.begin) * 2 / 3] ^= 0x10;
      write_file(copy, bytes);
    }
    world().barrier();
    const SafetensorsReader reader(copy);  // the header is intact: it opens
    expect_error<InvalidInputError>(
        [&] { reader.verify_checksums(world()); },
        {copy, "tensor \"t" + std::to_string(t) + "\" fails its checksum", "the file is corrupt"});
  }
}

TEST_F(SafetensorsTest, FilesWithoutChecksumsPassAndMalformedOnesAreRefused) {
  const std::string plain = local_path("plain.safetensors");
  write_file(plain, independent_file({{"a", {"F32", {2}, f32_bytes({1.0f, 2.0f})}}}, {}));
  SafetensorsReader(plain).verify_checksums(
      world());  // Hugging Face's own files: nothing to verify
  const std::string bad = local_path("bad.safetensors");
  write_file(
      bad, independent_file({{"a", {"F32", {2}, f32_bytes({1.0f, 2.0f})}}}, {{"crc32:a", "XYZ"}}));
  expect_error<InvalidInputError>([&] { SafetensorsReader(bad).verify_checksums(world()); },
                                  {bad, "checksum of tensor \"a\"", "(XYZ)", "8 lower-case hex"});
}

// ---------------------------------------------------------------------------
// Reading: blocks, in-place outputs, F16/BF16, bytes touched.
// ---------------------------------------------------------------------------

// m: F32 [6, 8] with m[i][j] = 8i + j + 0.25; h: F16 [6, 8] with bits 0x3C00 + 8i + j.
std::string small_file() {
  std::vector<float> m;
  std::vector<uint16_t> h;
  for (int k = 0; k < 48; ++k) {
    m.push_back(static_cast<float>(k) + 0.25f);
    h.push_back(static_cast<uint16_t>(0x3C00 + k));
  }
  return independent_file({{"m", {"F32", {6, 8}, f32_bytes(m)}},
                           {"h", {"F16", {6, 8}, u16_bytes(h)}},
                           {"i", {"I64", {2}, std::string(16, '\0')}}},
                          {{"source", "test"}});
}

float m_at(int64_t i, int64_t j) {
  return static_cast<float>(8 * i + j) + 0.25f;
}
float h_at(int64_t i, int64_t j) {
  return static_cast<float>(1.0 + (8 * i + j) / 1024.0);
}

TEST_F(SafetensorsTest, ReadsBlocksTransposedBlocksAndIntoViews) {
  const std::string path = local_path("small.safetensors");
  write_file(path, small_file());
  const SafetensorsReader reader(path);
  EXPECT_EQ(reader.metadata().at("source"), "test");

  Tensor out;
  reader.read_block("m", 1, 4, 2, 5, out);
  ASSERT_EQ(out.shape(), (Shape{4, 5}));
  for (int64_t i = 0; i < 4; ++i) {
    for (int64_t j = 0; j < 5; ++j) EXPECT_EQ(out(i, j), m_at(1 + i, 2 + j));
  }
  // W = m^T is [8, 6]: out[i][j] = m[col0 + j][row0 + i]
  reader.read_block_transposed("h", 2, 5, 1, 4, out);
  ASSERT_EQ(out.shape(), (Shape{5, 4}));
  for (int64_t i = 0; i < 5; ++i) {
    for (int64_t j = 0; j < 4; ++j) EXPECT_EQ(out(i, j), h_at(1 + j, 2 + i));
  }
  reader.read_rows("h", 4, 2, out);
  ASSERT_EQ(out.shape(), (Shape{2, 8}));
  EXPECT_EQ(out(1, 7), h_at(5, 7));

  // An output of the block's shape is filled in place, even a strided view.
  Tensor big = Tensor::zeros({6, 10});
  Tensor view = big.slice(1, 2, 3);  // [6, 3], row stride 10
  const float* storage = view.data();
  reader.read_block("m", 0, 6, 5, 3, view);
  EXPECT_EQ(view.data(), storage);
  for (int64_t i = 0; i < 6; ++i) {
    for (int64_t j = 0; j < 10; ++j) {
      EXPECT_EQ(big(i, j), (j >= 2 && j < 5) ? m_at(i, 3 + j) : 0.0f) << i << "," << j;
    }
  }
  // W = m^T is [8, 6]; its block rows [0, 6) x cols [0, 3) is m[0:3, 0:6]^T.
  reader.read_block_transposed("m", 0, 6, 0, 3, view);
  for (int64_t i = 0; i < 6; ++i) {
    for (int64_t j = 0; j < 3; ++j) EXPECT_EQ(big(i, 2 + j), m_at(j, i));
  }

  // An output of another shape is replaced, never written into.
  Tensor other = Tensor::zeros({2, 2});
  const Tensor kept = other;
  reader.read_block("m", 0, 1, 0, 3, other);
  EXPECT_EQ(other.shape(), (Shape{1, 3}));
  EXPECT_EQ(kept.to_vector(), std::vector<float>(4, 0.0f));
}

TEST_F(SafetensorsTest, ReaderMovesAndListsTensors) {
  const std::string path = local_path("small.safetensors");
  write_file(path, small_file());
  std::vector<SafetensorsReader> readers;
  readers.emplace_back(path);
  SafetensorsReader moved = std::move(readers.back());
  readers.clear();
  EXPECT_TRUE(moved.contains("m"));
  EXPECT_FALSE(moved.contains("x"));
  EXPECT_EQ(moved.tensors().size(), 3u);
  Tensor out;
  moved.read_rows("m", 5, 1, out);
  EXPECT_EQ(out(0, 7), m_at(5, 7));
}

TEST_F(SafetensorsTest, F16AndBf16KnownValuesDecodeExactly) {
  // bits -> value, F16 then BF16 (the helpers below check every pattern).
  const std::vector<uint16_t> f16 = {0x3C00, 0xC000, 0x7BFF, 0x0001, 0x03FF, 0x0400,
                                     0x8000, 0x7C00, 0xFC00, 0x7E00, 0xFE01, 0x3555};
  const std::vector<float> f16_want = {1.0f,       -2.0f,    65504.0f, 0x1p-24f,
                                       0x3FFp-24f, 0x1p-14f, -0.0f,    INFINITY,
                                       -INFINITY,  NAN,      -NAN,     0x1.554p-2f};
  const std::vector<uint16_t> bf16 = {0x3F80, 0xC000, 0x7F7F, 0x0001, 0x007F, 0x0080,
                                      0x8000, 0x7F80, 0xFF80, 0x7FC0, 0xFFC1, 0x3EAB};
  const std::vector<float> bf16_want = {1.0f,       -2.0f,     0x1.FEp127f, 0x1p-133f,
                                        0x7Fp-133f, 0x1p-126f, -0.0f,       INFINITY,
                                        -INFINITY,  NAN,       -NAN,        0x1.56p-2f};
  const std::string path = local_path("known.safetensors");
  write_file(path, independent_file({{"f16", {"F16", {12}, u16_bytes(f16)}},
                                     {"bf16", {"BF16", {12}, u16_bytes(bf16)}}},
                                    {}));
  const SafetensorsReader reader(path);
  Tensor out;
  for (const auto& [name, want] :
       {std::make_pair("f16", f16_want), std::make_pair("bf16", bf16_want)}) {
    reader.read_rows(name, 0, 12, out);
    const std::vector<float> got = out.to_vector();
    for (size_t i = 0; i < want.size(); ++i) {
      if (std::isnan(want[i])) {
        EXPECT_TRUE(std::isnan(got[i]) && std::signbit(got[i]) == std::signbit(want[i]))
            << name << "[" << i << "] = " << got[i];
      } else {
        EXPECT_EQ(std::memcmp(&got[i], &want[i], sizeof(float)), 0)
            << name << "[" << i << "] = " << got[i] << ", want " << want[i];
      }
    }
  }
}

TEST_F(SafetensorsTest, F16AndBf16DecodeEveryBitPatternExactly) {
  std::vector<uint16_t> all(65536);
  for (size_t i = 0; i < all.size(); ++i) all[i] = static_cast<uint16_t>(i);
  // Longer than one decode chunk (2^20 elements), so chunking is exercised.
  std::vector<uint16_t> long_run((1 << 20) + 3000);
  for (size_t i = 0; i < long_run.size(); ++i) long_run[i] = static_cast<uint16_t>(i * 7919);
  const std::string path = local_path("patterns.safetensors");
  write_file(path, independent_file(
                       {{"f16", {"F16", {256, 256}, u16_bytes(all)}},
                        {"bf16", {"BF16", {256, 256}, u16_bytes(all)}},
                        {"f16_long", {"F16", {int64_t(long_run.size())}, u16_bytes(long_run)}},
                        {"bf16_long", {"BF16", {int64_t(long_run.size())}, u16_bytes(long_run)}}},
                       {}));
  const SafetensorsReader reader(path);
  Tensor out;
  for (const auto& [name, value] :
       {std::make_pair("f16", &f16_value), std::make_pair("bf16", &bf16_value)}) {
    reader.read(name, ShardSpec::replicated({256, 256}), out);
    expect_decoded(name, all, out, value);
    // A column block (one pread per row) and its transposed counterpart.
    reader.read_block(name, 17, 100, 33, 60, out);
    std::vector<uint16_t> bits;
    for (int i = 17; i < 117; ++i) {
      for (int j = 33; j < 93; ++j) bits.push_back(static_cast<uint16_t>(i * 256 + j));
    }
    expect_decoded(name, bits, out, value);
    reader.read_block_transposed(name, 33, 60, 17, 100, out);  // [60, 100] = block^T
    bits.clear();
    for (int j = 33; j < 93; ++j) {
      for (int i = 17; i < 117; ++i) bits.push_back(static_cast<uint16_t>(i * 256 + j));
    }
    expect_decoded(name, bits, out, value);
    const std::string long_name = std::string(name) + "_long";
    reader.read_rows(long_name, 0, static_cast<int64_t>(long_run.size()), out);
    expect_decoded(long_name.c_str(), long_run, out, value);
  }
}

// Bytes of the data buffer outside `keep` (absolute [begin, end) ranges) set to 0xFF.
void corrupt_except(const std::string& path, uint64_t data_start,
                    const std::vector<std::pair<uint64_t, uint64_t>>& keep) {
  std::string bytes = read_file(path);
  for (uint64_t b = data_start; b < bytes.size(); ++b) {
    bool kept = false;
    for (const auto& [begin, end] : keep) kept = kept || (b >= begin && b < end);
    if (!kept) bytes[b] = static_cast<char>(0xFF);
  }
  write_file(path, bytes);
}

TEST_F(SafetensorsTest, ReadsTouchOnlyTheirBytes) {
  const std::string path = local_path("small.safetensors");
  write_file(path, small_file());
  uint64_t data_start, m_begin, h_begin;
  {
    const SafetensorsReader reader(path);
    data_start = reader.data_start();
    m_begin = data_start + reader.info("m").begin;
    h_begin = data_start + reader.info("h").begin;
  }
  // Keep rows 2..3, columns 3..5 of m (4-byte elements) and h (2-byte elements).
  std::vector<std::pair<uint64_t, uint64_t>> keep;
  for (uint64_t i = 2; i < 4; ++i) {
    keep.emplace_back(m_begin + (i * 8 + 3) * 4, m_begin + (i * 8 + 6) * 4);
    keep.emplace_back(h_begin + (i * 8 + 3) * 2, h_begin + (i * 8 + 6) * 2);
  }
  corrupt_except(path, data_start, keep);

  const SafetensorsReader reader(path);
  Tensor out;
  reader.read_block("h", 2, 2, 3, 3, out);
  for (int64_t i = 0; i < 2; ++i) {
    for (int64_t j = 0; j < 3; ++j) EXPECT_EQ(out(i, j), h_at(2 + i, 3 + j));
  }
  reader.read_block("m", 2, 2, 3, 3, out);
  for (int64_t i = 0; i < 2; ++i) {
    for (int64_t j = 0; j < 3; ++j) EXPECT_EQ(out(i, j), m_at(2 + i, 3 + j));
  }
  // The same bytes as the transposed block of W = m^T ([8, 6]).
  reader.read_block_transposed("m", 3, 3, 2, 2, out);
  for (int64_t i = 0; i < 3; ++i) {
    for (int64_t j = 0; j < 2; ++j) EXPECT_EQ(out(i, j), m_at(2 + j, 3 + i));
  }

  // Cut the file right after the block's last byte (m is last in the buffer):
  // the block still reads; a later row finds the end of the file.
  ASSERT_EQ(::truncate(path.c_str(), static_cast<off_t>(m_begin + (3 * 8 + 6) * 4)), 0);
  reader.read_block("m", 2, 2, 3, 3, out);
  EXPECT_EQ(out(1, 2), m_at(3, 5));
  expect_error<InvalidInputError>([&] { reader.read_block("m", 4, 1, 0, 1, out); },
                                  {path, "tensor \"m\"", "the file ended"});
}

// ---------------------------------------------------------------------------
// Malformed files: one message naming the file (and the tensor).
// ---------------------------------------------------------------------------

std::string entry(const std::string& dtype, const std::string& shape, const std::string& offsets) {
  return "{\"dtype\":\"" + dtype + "\",\"shape\":" + shape + ",\"data_offsets\":" + offsets + "}";
}

struct BadFile {
  const char* label;
  std::string bytes;
  std::vector<std::string> parts;  // besides "[safetensors] <path>: "
};

std::vector<BadFile> bad_files() {
  const std::string w = "tensor \"w\"";
  const std::string good = entry("F32", "[2]", "[0,8]");
  const std::string eight(8, '\0');
  std::string truncated = independent_file(
      {{"a", {"F32", {2}, std::string(8, '\1')}}, {"b", {"F32", {3}, std::string(12, '\2')}}}, {});
  truncated.resize(truncated.size() - 4);
  return {
      {"empty file", "", {"file size (0 bytes) must be at least 8", "truncated"}},
      {"shorter than the length field", "abcde", {"file size (5 bytes) must be at least 8"}},
      {"header length beyond the file",
       le64(1000) + "{}",
       {"header length (1000 bytes) must fit in the file after the length field (2 bytes)",
        "truncated"}},
      {"header length of 2^64 - 1",
       le64(~uint64_t{0}) + "{}",
       {"header length (18446744073709551615 bytes)"}},
      {"invalid JSON", with_header("{\"w\": {", ""), {"header is not valid JSON"}},
      {"invalid UTF-8 in a name",
       with_header("{\"w\xff\": " + good + "}", eight),
       {"header is not valid JSON"}},
      {"header not an object", with_header("[1, 2]", ""), {"header ([1,2]) must be a JSON object"}},
      {"entry not an object",
       with_header("{\"w\": 3}", ""),
       {w, "entry (3) must be a JSON object"}},
      {"missing dtype",
       with_header("{\"w\":{\"shape\":[2],\"data_offsets\":[0,8]}}", eight),
       {w, "\"dtype\" is missing"}},
      {"dtype not a string",
       with_header("{\"w\":{\"dtype\":32,\"shape\":[2],\"data_offsets\":[0,8]}}", eight),
       {w, "\"dtype\" (32) must be a string"}},
      {"unknown dtype",
       with_header("{\"w\":" + entry("F12", "[2]", "[0,8]") + "}", eight),
       {w, "dtype (F12) must be a safetensors dtype", "colrow reads F32, F16, BF16", "F64, I64"}},
      {"missing shape",
       with_header("{\"w\":{\"dtype\":\"F32\",\"data_offsets\":[0,8]}}", eight),
       {w, "\"shape\" is missing"}},
      {"shape not an array",
       with_header("{\"w\":" + entry("F32", "4", "[0,16]") + "}", eight),
       {w, "\"shape\" (4) must be an array of non-negative integers"}},
      {"negative dimension",
       with_header("{\"w\":" + entry("F32", "[2,-1]", "[0,8]") + "}", eight),
       {w, "\"shape\" ([2,-1]) must be an array of non-negative integers"}},
      {"fractional dimension",
       with_header("{\"w\":" + entry("F32", "[2.5]", "[0,8]") + "}", eight),
       {w, "\"shape\" ([2.5]) must be an array"}},
      {"numel overflows",
       with_header("{\"w\":" + entry("F32", "[4294967296,4294967296]", "[0,8]") + "}", eight),
       {w, "has more elements than a file can hold"}},
      {"missing data_offsets",
       with_header("{\"w\":{\"dtype\":\"F32\",\"shape\":[2]}}", eight),
       {w, "\"data_offsets\" is missing"}},
      {"one offset",
       with_header("{\"w\":" + entry("F32", "[2]", "[0]") + "}", eight),
       {w, "\"data_offsets\" ([0]) must be an array of two non-negative integers"}},
      {"negative offset",
       with_header("{\"w\":" + entry("F32", "[2]", "[-8,0]") + "}", eight),
       {w, "\"data_offsets\" ([-8,0]) must be"}},
      {"begin after end",
       with_header("{\"w\":" + entry("F32", "[0]", "[8,0]") + "}", eight),
       {w, "data_offsets begin (8) must be at most end (0)"}},
      {"span differs from the shape",
       with_header("{\"w\":" + entry("F32", "[2,2]", "[0,12]") + "}", std::string(16, '\0')),
       {w,
        "data_offsets span (12 bytes) must equal its shape [2, 2] of F32 (4 elements of 32 "
        "bits)"}},
      {"sub-byte dtype of a fractional byte size",
       with_header("{\"w\":" + entry("F4", "[3]", "[0,1]") + "}", eight),
       {w, "data_offsets span (1 bytes) must equal its shape [3] of F4 (3 elements of 4 bits)"}},
      {"offsets beyond the buffer",
       with_header("{\"w\":" + entry("F32", "[2]", "[8,16]") + "}", eight),
       {w, "data_offsets end (16) must be within the data buffer (8 bytes)", "truncated"}},
      {"data shorter than the last offset (truncated file)",
       truncated,
       {"tensor \"b\"", "data_offsets end (20) must be within the data buffer (16 bytes)",
        "truncated"}},
      {"overlapping tensors",
       with_header("{\"a\":" + entry("F32", "[4]", "[0,16]") +
                       ",\"b\":" + entry("F32", "[4]", "[8,24]") + "}",
                   std::string(24, '\0')),
       {"tensors \"a\" (bytes [0, 16)) and \"b\" (bytes [8, 24)) must not overlap"}},
      {"metadata not an object",
       with_header("{\"__metadata__\": 3}", ""),
       {"\"__metadata__\" (3) must be a JSON object of strings"}},
      {"metadata value not a string",
       with_header("{\"__metadata__\": {\"k\": 1}}", ""),
       {"\"__metadata__\" value of \"k\" (1) must be a string"}},
      {"tensor listed twice",
       with_header("{\"w\":" + good + ",\"w\":" + good + "}", eight),
       {"key \"w\" appears twice in the header"}},
  };
}

TEST_F(SafetensorsTest, MalformedFilesNameTheFileAndTensor) {
  int k = 0;
  for (const BadFile& bad : bad_files()) {
    SCOPED_TRACE(bad.label);
    const std::string path = local_path("bad" + std::to_string(k++) + ".safetensors");
    write_file(path, bad.bytes);
    std::vector<std::string> parts = bad.parts;
    parts.push_back("[safetensors] " + path + ": ");
    expect_error<InvalidInputError>([&] { SafetensorsReader reader(path); }, parts);
  }
}

TEST_F(SafetensorsTest, MissingOrUnreadablePathsNameThePath) {
  const std::string missing = local_path("missing.safetensors");
  expect_error<InvalidInputError>(
      [&] { SafetensorsReader reader(missing); },
      {"[safetensors] cannot open " + missing, "No such file or directory"});
  expect_error<InvalidInputError>([&] { SafetensorsReader reader(dir_); },
                                  {"[safetensors] " + dir_ + ": must be a regular file"});
}

TEST_F(SafetensorsTest, BadReadsNameTheFileAndTensor) {
  const std::string path = local_path("small.safetensors");
  write_file(path, small_file());
  const SafetensorsReader reader(path);
  const std::string file = "[safetensors] " + path + ": ";
  Tensor out;
  expect_error<InvalidInputError>(
      [&] { reader.info("x"); },
      {file + "tensor \"x\" is not in the file", "3 tensors, e.g. \"h\", \"i\", \"m\""});
  expect_error<InvalidInputError>([&] { reader.read_rows("i", 0, 2, out); },
                                  {file + "tensor \"i\"",
                                   "dtype (I64) must be one of F32, F16, "
                                   "BF16"});
  expect_error<InvalidInputError>(
      [&] { reader.read_block("m", 4, 3, 0, 8, out); },
      {file + "tensor \"m\" (shape [6, 8])", "rows [4, 7) must lie within [0, 6)"});
  expect_error<InvalidInputError>([&] { reader.read_block("m", 0, 1, -1, 2, out); },
                                  {"tensor \"m\"", "columns [-1, 1) must lie within [0, 8)"});
  expect_error<InvalidInputError>([&] { reader.read_block_transposed("m", 0, 8, 2, 5, out); },
                                  {"tensor \"m\" (stored as [6, 8], read transposed as [8, 6])",
                                   "columns [2, 7) must lie within [0, 6)"});
  expect_error<InvalidInputError>([&] { reader.read_rows("m", 5, 2, out); },
                                  {"rows [5, 7) must lie within [0, 6)"});
  expect_error<InvalidInputError>(
      [&] {
        reader.read("m", {{8, 6}, 0, 0, 2}, out);
      },
      {"tensor \"m\"", "shape in the file ([6, 8]) must equal the model's ([8, 6])"});
  expect_error<InvalidInputError>(
      [&] {
        reader.read("m", {{6, 8}, 0, 0, 2}, out, /*transposed=*/true);
      },
      {"shape in the file ([6, 8]) must be the transpose of the model's ([6, 8])"});
  expect_error<InvalidInputError>(
      [&] { reader.read("i", ShardSpec::replicated({2}), out, /*transposed=*/true); },
      {"tensor \"i\" has shape [2]; only a 2-d tensor can be read or written transposed"});
}

// ---------------------------------------------------------------------------
// Writer failures: the same error on every rank, no hang, no damage.
// ---------------------------------------------------------------------------

const std::vector<std::pair<std::string, Shape>> kSmallEntries = {{"x", {12}}, {"y", {12, 12}}};

// Writes this rank's part of x (rows) and y (columns) at tp = world size.
void write_small(SafetensorsWriter& writer, Communicator& tp) {
  const Tensor x = testing::random_tensor({12}, 1);
  const Tensor y = testing::random_tensor({12, 12}, 2);
  writer.write("x", {{12}, 0, tp.rank(), tp.size()}, x.shard(0, tp.rank(), tp.size()));
  writer.write("y", {{12, 12}, 1, tp.rank(), tp.size()}, y.shard(1, tp.rank(), tp.size()));
}

TEST_F(SafetensorsTest, UnwritableDestinationFailsOnEveryRank) {
  Communicator& tp = world();
  const std::string no_dir = shared_path("no_such_dir/model.safetensors");
  expect_error<InvalidInputError>([&] { SafetensorsWriter writer(tp, no_dir, kSmallEntries); },
                                  {"[safetensors] cannot create " + no_dir + ".tmp",
                                   "on rank 0 of group", "No such file or directory"});
  // The temporary's name is taken by a directory.
  const std::string blocked = shared_path("blocked.safetensors");
  if (tp.rank() == 0) std::filesystem::create_directories(blocked + ".tmp");
  tp.barrier();
  expect_error<InvalidInputError>([&] { SafetensorsWriter writer(tp, blocked, kSmallEntries); },
                                  {"cannot create " + blocked + ".tmp", "Is a directory"});
  EXPECT_FALSE(std::filesystem::exists(blocked));
}

TEST_F(SafetensorsTest, WriterThatThrowsBeforeCommitLeavesTheExistingFile) {
  Communicator& tp = world();
  const std::string path = shared_path("model.safetensors");
  write_previous(path);
  try {
    SafetensorsWriter writer(tp, path, kSmallEntries);
    write_small(writer, tp);
    EXPECT_TRUE(std::filesystem::exists(writer.temporary_path()));
    EXPECT_EQ(read_file(path), kPrevious) << "written before commit";
    tp.barrier();  // every rank has looked before rank 0's destructor removes the temporary
    throw std::runtime_error("simulated failure before commit");
  } catch (const std::runtime_error&) {
  }
  expect_previous_kept(path);  // group rank 0 has removed the temporary
  tp.barrier();                // checked before the next writer makes a new temporary

  // A later writer replaces the file whole.
  SafetensorsWriter writer(tp, path, kSmallEntries);
  write_small(writer, tp);
  writer.commit();
  const SafetensorsReader reader(path);
  Tensor y;
  reader.read("y", ShardSpec::replicated({12, 12}), y);
  EXPECT_TRUE(testing::same_bits(y, testing::random_tensor({12, 12}, 2)));
}

TEST_F(SafetensorsTest, CommitRequiresEveryTensorWrittenExactlyOnce) {
  Communicator& tp = world();
  const std::string path = shared_path("model.safetensors");
  write_previous(path);
  const Tensor x = testing::random_tensor({12}, 1);
  {
    SCOPED_TRACE("y never written");
    SafetensorsWriter writer(tp, path, kSmallEntries);
    writer.write("x", {{12}, 0, tp.rank(), tp.size()}, x.shard(0, tp.rank(), tp.size()));
    expect_error<InternalError>(
        [&] { writer.commit(); },
        {"[safetensors] " + path, "tensor \"y\" got 0 elements written of 144",
         "An existing " + path + " is unchanged"});
  }
  {
    SCOPED_TRACE("replicated x written by every rank, twice");
    SafetensorsWriter writer(tp, path, kSmallEntries);
    write_small(writer, tp);
    writer.write_rows("x", 0, x);
    writer.write_rows("x", 0, x);
    expect_error<InternalError>(
        [&] { writer.commit(); },
        {"tensor \"x\" got " + std::to_string(12 + 24 * tp.size()) + " elements written of 12"});
  }
  expect_previous_kept(path);
}

// Files written by this process may not grow past `bytes` while it lives: a
// write beyond fails with EFBIG (SIGXFSZ ignored), as a full disk would fail.
class FileSizeLimit {
 public:
  explicit FileSizeLimit(rlim_t bytes) {
    old_handler_ = std::signal(SIGXFSZ, SIG_IGN);
    getrlimit(RLIMIT_FSIZE, &old_);
    const rlimit limit{bytes, old_.rlim_max};
    setrlimit(RLIMIT_FSIZE, &limit);
  }
  ~FileSizeLimit() {
    setrlimit(RLIMIT_FSIZE, &old_);
    std::signal(SIGXFSZ, old_handler_);
  }

 private:
  rlimit old_;
  void (*old_handler_)(int);
};

// No new file descriptor on this process while it lives (EMFILE), even in
// the place of one closed meanwhile; the open ones stay usable.
class NoNewFileDescriptors {
 public:
  NoNewFileDescriptors() {
    getrlimit(RLIMIT_NOFILE, &old_);
    const rlimit none{0, old_.rlim_max};
    setrlimit(RLIMIT_NOFILE, &none);
  }
  ~NoNewFileDescriptors() { setrlimit(RLIMIT_NOFILE, &old_); }

 private:
  rlimit old_;
};

// commit() reads the data back to checksum them; a rank that cannot (here it
// cannot open the file: too many open files) fails the commit on every rank,
// with its own errno, and the existing file stays.
TEST_F(SafetensorsTest, ReadBackErrorOnOneRankFailsCommitOnEveryRank) {
  if (!testing::world_on_one_node()) {
    // Open MPI's TCP transport may open descriptors (connections) inside
    // commit's collectives, which the limit would fail.
    GTEST_SKIP() << "the ranks span nodes";
  }
  Communicator& tp = world();
  const int last = tp.size() - 1;
  const std::string path = shared_path("model.safetensors");
  write_previous(path);
  const int64_t n = 256 * static_cast<int64_t>(tp.size());
  const Tensor full = testing::random_tensor({n}, 5);
  SafetensorsWriter writer(tp, path, {{"x", {n}}});
  writer.write("x", ShardSpec{{n}, 0, tp.rank(), tp.size()}, full.shard(0, tp.rank(), tp.size()));
  // The error is looked at after the limit: UBSan's type checks of a first
  // call through a class's vtable may need to open a file themselves.
  std::exception_ptr error;
  {
    std::unique_ptr<NoNewFileDescriptors> limit;
    if (tp.rank() == last) limit = std::make_unique<NoNewFileDescriptors>();
    try {
      writer.commit();
    } catch (...) {
      error = std::current_exception();
    }
  }
  expect_error<BackendError>(
      [&] {
        if (error) std::rethrow_exception(error);
      },
      {"cannot read back " + path + ".tmp to checksum it on rank " + std::to_string(last),
       "Too many open files", "An existing " + path + " is unchanged"});
  expect_previous_kept(path);
}

TEST_F(SafetensorsTest, WriteErrorOnOneRankFailsCommitOnEveryRank) {
  Communicator& tp = world();
  const int last = tp.size() - 1;
  const std::string path = shared_path("model.safetensors");
  write_previous(path);
  // Each rank writes 4 KiB at data_start + rank * 4 KiB; the last rank may not
  // write past 4 KiB, so its pwrite fails (at np 1, rank 0 cannot even size the file).
  const int64_t n = 1024 * static_cast<int64_t>(tp.size());
  const Tensor full = testing::random_tensor({n}, 3);
  const ShardSpec shard{{n}, 0, tp.rank(), tp.size()};
  if (tp.size() == 1) {
    FileSizeLimit limit(4096);
    expect_error<BackendError>(
        [&] {
          SafetensorsWriter writer(tp, path, {{"big", {n}}});
        },
        {"cannot extend " + path + ".tmp to its full size on rank 0", "File too large",
         "An existing " + path + " is unchanged"});
  } else {
    SafetensorsWriter writer(tp, path, {{"big", {n}}});
    {
      std::unique_ptr<FileSizeLimit> limit;
      if (tp.rank() == last) limit = std::make_unique<FileSizeLimit>(4096);
      writer.write("big", shard, full.shard(0, tp.rank(), tp.size()));
    }
    expect_error<BackendError>(
        [&] { writer.commit(); },
        {"cannot write tensor data to " + path + ".tmp on rank " + std::to_string(last),
         "File too large", "An existing " + path + " is unchanged"});
  }
  expect_previous_kept(path);
}

TEST_F(SafetensorsTest, EntriesThatDifferAcrossRanksFailOnEveryRank) {
  Communicator& tp = world();
  if (tp.size() == 1) GTEST_SKIP() << "needs two ranks to disagree";
  const Shape y_shape = tp.rank() == tp.size() - 1 ? Shape{12, 24} : Shape{12, 12};
  expect_error<InternalError>(
      [&] {
        SafetensorsWriter writer(tp, shared_path("model.safetensors"),
                                 {{"x", {12}}, {"y", y_shape}});
      },
      {"the tensor list on rank " + std::to_string(tp.size() - 1) + " differs from rank 0's"});
  tp.barrier();
  EXPECT_FALSE(std::filesystem::exists(shared_path("model.safetensors.tmp")));
}

TEST_F(SafetensorsTest, BadEntriesAndBadWritesNameTheTensor) {
  Communicator& tp = world();
  const std::string path = shared_path("model.safetensors");
  expect_error<InvalidInputError>(
      [&] {
        SafetensorsWriter writer(tp, path, {{"x", {12}}, {"x", {12}}});
      },
      {"[safetensors] " + path + ": tensor \"x\" is listed twice"});
  expect_error<InvalidInputError>(
      [&] {
        SafetensorsWriter writer(tp, path, {{"__metadata__", {12}}});
      },
      {"\"__metadata__\" is reserved"});
  expect_error<InvalidInputError>(
      [&] {
        SafetensorsWriter writer(tp, path, {{"x", {12, -1}}});
      },
      {"tensor \"x\": shape [12, -1] must have no negative dimension"});

  SafetensorsWriter writer(tp, path, kSmallEntries);
  const Tensor block = Tensor::zeros({4, 4});
  expect_error<InvalidInputError>(
      [&] { writer.write_block("y", 10, 0, block); },
      {"tensor \"y\" (shape [12, 12])", "rows [10, 14) must lie within [0, 12)"});
  expect_error<InvalidInputError>([&] { writer.write_block("z", 0, 0, block); },
                                  {"tensor \"z\" is not among the writer's entries"});
  expect_error<InvalidInputError>(
      [&] {
        writer.write("y", {{12, 12}, 0, 0, 3}, block);
      },
      {"tensor \"y\": block shape [4, 4] must be [4, 12]"});
  expect_error<InvalidInputError>(
      [&] {
        writer.write("y", {{12, 24}, 0, 0, 3}, block);
      },
      {"shape in the file ([12, 12]) must equal the model's ([12, 24])"});
  // Destroyed without commit: nothing at `path`.
}

}  // namespace
}  // namespace colrow
