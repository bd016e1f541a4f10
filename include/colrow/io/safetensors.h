// Safetensors checkpoints (huggingface/safetensors), read and written by
// slices: every rank reads or writes only its shard's bytes of one unsharded
// file, found from the header's offsets, so a checkpoint saved at one tp loads
// at any other with no conversion step (what Megatron's checkpoint converters do
// offline, done in place). The reader issues no collective but
// verify_checksums(); the writer issues two at construction and three in
// commit() over its group (see SafetensorsWriter).
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "colrow/core/shard_spec.h"
#include "colrow/core/tensor.h"
#include "colrow/dist/communicator.h"

namespace colrow {

struct Region;  // private: src/io/region.h

// Orientation. Shapes of the file (TensorInfo::shape, the writer's entries) are
// as stored. Blocks and shards are given in colrow's orientation: with
// transposed = false that is the stored one; with transposed = true the stored
// 2-d tensor S is the transpose of colrow's W (GPT-2's Conv1D stores [in, out];
// colrow's linear layers hold [out, in]), so W = S^T and
//   block[i][j] = W[row0 + i][col0 + j] = S[col0 + j][row0 + i].
//
// Output buffers. A reader's `out` keeps its storage when it already has the
// block's shape (any strides: a parameter's value, a view into a larger buffer)
// and is replaced by a new contiguous tensor otherwise (as ensure_shape does).

// One tensor of a file, as stored. begin and end are the header's data_offsets:
// bytes relative to the data buffer, which starts at byte data_start() of the file.
struct TensorInfo {
  std::string name;
  std::string dtype;  // "F32", "F16", "BF16", ... as in the header
  Shape shape;
  uint64_t begin = 0;
  uint64_t end = 0;

  int64_t numel() const { return shape_numel(shape); }
};

// Reads blocks of the tensors of one file as fp32, converting F16 and BF16
// exactly. Not collective: every rank opens the file itself.
class SafetensorsReader {
 public:
  // Opens `path`, reads the 8-byte header length and the JSON header (one pread
  // each), validates every entry against the file's size, and keeps the file
  // open; no tensor data is read until asked. Throws InvalidInputError naming
  // the file (and the tensor) when it is missing, unreadable, truncated or
  // corrupt. Accepted beyond the spec: holes between tensors and trailing bytes.
  explicit SafetensorsReader(const std::string& path);
  ~SafetensorsReader();
  SafetensorsReader(SafetensorsReader&& other) noexcept;
  SafetensorsReader& operator=(SafetensorsReader&& other) noexcept;
  SafetensorsReader(const SafetensorsReader&) = delete;
  SafetensorsReader& operator=(const SafetensorsReader&) = delete;

  const std::string& path() const { return path_; }
  // Every tensor, by name.
  const std::map<std::string, TensorInfo>& tensors() const { return tensors_; }
  bool contains(const std::string& name) const { return tensors_.count(name) != 0; }
  // Throws InvalidInputError naming the file and the tensor when it is absent.
  const TensorInfo& info(const std::string& name) const;
  // The header's "__metadata__" (empty when absent).
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  // Byte of the file where the data buffer starts: 8 + header length.
  uint64_t data_start() const { return data_start_; }

  // Rows [row0, row0 + rows) along dim 0 of a tensor of rank >= 1, in one pread.
  // out: [rows, shape[1:]...]
  void read_rows(const std::string& name, int64_t row0, int64_t rows, Tensor& out) const;
  // The block [row0, row0 + rows) x [col0, col0 + cols) of a 2-d tensor: one
  // pread per row, or one in all when cols is the full width.
  // out: [rows, cols]
  void read_block(const std::string& name, int64_t row0, int64_t rows, int64_t col0, int64_t cols,
                  Tensor& out) const;
  // The same block of W = S^T, where S ([a, b]) is the stored tensor and W is
  // [b, a]: out[i][j] = S[col0 + j][row0 + i]; one pread per stored row (cols
  // of them), or one in all when rows is b.
  // out: [rows, cols]
  void read_block_transposed(const std::string& name, int64_t row0, int64_t rows, int64_t col0,
                             int64_t cols, Tensor& out) const;
  // A rank's shard of colrow's tensor: shard.full_shape (colrow orientation)
  // must be the stored shape, or its transpose when `transposed` (2-d only).
  // count 1 reads the whole tensor; otherwise any dim of any rank, or dim 0 or
  // 1 of a 2-d tensor when transposed.
  // out: shard.local_shape()
  void read(const std::string& name, const ShardSpec& shard, Tensor& out,
            bool transposed = false) const;

  // Collective over `group` (one all_gather; each rank reads 1/size of the
  // data): the CRC-32 of every tensor that has one in __metadata__ (colrow's
  // writer stores them; other files have none, and pass). Throws
  // InvalidInputError on every rank alike, naming the file and the first
  // tensor whose bytes do not match, or a malformed checksum entry.
  void verify_checksums(Communicator& group) const;

 private:
  void read_header();
  void read_region(const TensorInfo& info, const Region& region, Tensor& out) const;
  std::string where(const std::string& name) const;

  std::string path_;
  int fd_ = -1;
  uint64_t data_start_ = 0;
  std::map<std::string, TensorInfo> tensors_;
  std::map<std::string, std::string> metadata_;
};

// Writes one unsharded file from sharded fp32 tensors, every rank writing its
// own slices in place; no rank gathers a tensor. The file holds every tensor as
// F32, or as BF16 (rounded to nearest even) for a half-size export. Collective over `group`:
//   constructor: group rank 0 creates path + ".tmp" holding the header at its
//     full size; [broadcast] its result and a hash of its header (so ranks
//     given different entries are caught); the other ranks open the file;
//     [all_reduce_sum] every rank's result. Failures throw on every rank alike.
//   write_*(): local pwrites. An I/O error is remembered, not thrown, so that
//     no rank leaves the others waiting in commit().
//   commit(): fsync; [all_reduce_sum] the elements each rank wrote per tensor
//     and every rank's I/O error; every rank reads back its 1/size part of
//     the data and [all_gather] gives each tensor's CRC-32; group rank 0
//     writes them into the header's __metadata__ ("crc32:<name>", see
//     src/io/tensor_checksums.h), renames the temporary to `path` (atomic on
//     POSIX); [broadcast] the result, so no rank returns before the complete
//     file is at `path`.
// Every tensor must be written exactly once over the group: a shard by the one
// rank that owns it, a replicated tensor by one rank (write() writes a count-1
// shard from group rank 0 only, so every rank may call it for every
// parameter). commit() checks the number of elements written per tensor and
// throws, naming the tensor, when it differs. Nothing touches an existing file
// at `path` before the rename; a writer destroyed without commit() removes its
// temporary (on group rank 0). With data parallelism, one replica's
// model-parallel ranks (tp, or tp x pp) write (the group passed here); the
// other replicas do not construct a writer.
// Errors: InvalidInputError for a path that cannot be created or opened and for
// bad entries or calls (naming the tensor); BackendError for a failed write,
// fsync or rename; InternalError when ranks disagree on the entries or a tensor
// was not written exactly once.
// Layout, a pure function of (entries, metadata): tensors in name order,
// contiguous from buffer offset 0; the header is compact JSON with its keys in
// byte order, padded with spaces so the data buffer starts at a multiple of 8.
class SafetensorsWriter {
 public:
  // entries: (name, stored shape), identical on every rank. The default
  // metadata is what Hugging Face's loaders expect of a PyTorch checkpoint.
  SafetensorsWriter(Communicator& group, const std::string& path,
                    const std::vector<std::pair<std::string, Shape>>& entries,
                    const std::map<std::string, std::string>& metadata = {{"format", "pt"}},
                    DType dtype = DType::kF32);
  ~SafetensorsWriter();
  SafetensorsWriter(const SafetensorsWriter&) = delete;
  SafetensorsWriter& operator=(const SafetensorsWriter&) = delete;

  // Rows [row0, row0 + block.size(0)) along dim 0 of a tensor of rank >= 1.
  // block: [rows, shape[1:]...], any strides
  void write_rows(const std::string& name, int64_t row0, const Tensor& block);
  // A [rows, cols] block at (row0, col0) of a 2-d tensor; with `transposed`, of
  // W = S^T (S stored): S[col0 + j][row0 + i] = block[i][j].
  // block: [rows, cols], any strides
  void write_block(const std::string& name, int64_t row0, int64_t col0, const Tensor& block,
                   bool transposed = false);
  // A rank's shard, placed as SafetensorsReader::read() reads it back; a
  // count-1 (replicated) shard is written by group rank 0 only.
  // local: shard.local_shape(), any strides
  void write(const std::string& name, const ShardSpec& shard, const Tensor& local,
             bool transposed = false);
  // Collective; see above. Throws on every rank alike when any rank failed.
  void commit();

  const std::string& path() const { return path_; }
  const std::string& temporary_path() const { return tmp_path_; }

 private:
  struct Entry {
    TensorInfo info;
    int64_t written = 0;  // elements this rank wrote
  };
  struct IoFailure {
    int stage = 0;  // 0: none
    int err = 0;    // errno
  };

  Entry& entry(const std::string& name);
  std::string where(const std::string& name) const;
  void require_block_shape(const Entry& entry, const Region& region, const Tensor& block) const;
  void write_region(Entry& entry, const Region& region, const Tensor& block);
  void create_temporary(const std::string& head, uint64_t file_bytes);
  void close_file(IoFailure* failure);
  int write_checksums(const std::vector<TensorInfo>& tensors, const std::vector<uint32_t>& crcs);
  [[noreturn]] void fail(const std::vector<IoFailure>& failures);

  Communicator& group_;
  int group_rank_ = 0;
  std::string path_;
  std::string tmp_path_;
  std::vector<std::pair<std::string, Shape>> entry_list_;  // as given
  std::map<std::string, std::string> metadata_;            // as given, with checksum keys
  DType dtype_;                                            // of every tensor in the file
  uint64_t data_start_ = 0;
  std::map<std::string, Entry> entries_;
  int fd_ = -1;
  IoFailure io_failure_;   // this rank's first, reported by commit()
  bool created_ = false;   // group rank 0 holds a temporary not yet renamed
  bool finished_ = false;  // committed, or failed and cleaned up
};

}  // namespace colrow
