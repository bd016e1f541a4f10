// SafetensorsWriter: one unsharded F32 (or BF16) safetensors file written in place by the
// ranks of a group, each pwriting its own shards, made visible by one atomic
// rename. Collectives over the group: constructor [broadcast] + [all_reduce_sum];
// commit() [all_reduce_sum] + [all_gather] (checksums) + [broadcast]
// (include/colrow/io/safetensors.h).
#include "colrow/io/safetensors.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>

#include "colrow/core/error.h"
#include "colrow/core/philox.h"
#include "io/posix_file.h"
#include "io/region.h"
#include "io/safetensors_format.h"
#include "io/tensor_checksums.h"

static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__,
              "safetensors data are little-endian; a big-endian host needs byte swaps here");

namespace colrow {
namespace {

// What failed, in the order a writer's life meets them.
enum Stage {
  kNone,
  kCreate,
  kWriteHeader,
  kResize,
  kOpen,
  kEntriesDiffer,
  kWrite,
  kSync,
  kReadBack,
  kRename
};

// commit() sums per-tensor element counts over the group in fp32, as base-256
// limbs: exact while size * 255 < 2^24 and a tensor has < 2^40 elements.
constexpr int kLimbs = 5;
constexpr int kMaxGroupSize = 65536;
// The constructor broadcasts group rank 0's header hash as 16-bit pieces.
constexpr int kHashPieces = 4;

// Makes a rename durable; best effort (some file systems refuse fsync on a directory).
void sync_directory_of(const std::string& path) {
  const size_t slash = path.find_last_of('/');
  const std::string dir = slash == std::string::npos ? "." : path.substr(0, slash + 1);
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return;
  (void)::fsync(fd);
  ::close(fd);
}

}  // namespace

SafetensorsWriter::SafetensorsWriter(Communicator& group, const std::string& path,
                                     const std::vector<std::pair<std::string, Shape>>& entries,
                                     const std::map<std::string, std::string>& metadata,
                                     DType dtype)
    : group_(group),
      group_rank_(group.rank()),
      path_(path),
      tmp_path_(path + ".tmp"),
      entry_list_(entries),
      metadata_(metadata),
      dtype_(dtype) {
  // Room for every tensor's checksum, filled in by commit() (same length).
  for (const auto& [name, shape] : entries) {
    metadata_[safetensors::checksum_key(name)] = safetensors::checksum_text(0);
  }
  // Validated before any collective; identical on every rank.
  const safetensors::WriterLayout layout =
      safetensors::writer_layout(path, entries, metadata_, dtype_);
  if (group.size() > kMaxGroupSize) {
    throw InternalError("[safetensors] writer group size (" + std::to_string(group.size()) +
                        ") must be at most " + std::to_string(kMaxGroupSize) +
                        " for commit()'s exact element count.");
  }
  data_start_ = layout.head.size();
  for (const TensorInfo& t : layout.tensors) entries_.emplace(t.name, Entry{t, 0});
  const uint64_t hash = name_stream(layout.head);

  Tensor created = Tensor::zeros({2 + kHashPieces});
  if (group_rank_ == 0) {
    create_temporary(layout.head, layout.file_bytes);
    created.data()[0] = static_cast<float>(io_failure_.stage);
    created.data()[1] = static_cast<float>(io_failure_.err);
    for (int k = 0; k < kHashPieces; ++k) {
      created.data()[2 + k] = static_cast<float>((hash >> (16 * k)) & 0xffffu);
    }
  }
  // [agree] group rank 0's create result and its header's hash
  group_.broadcast(created, 0);
  std::vector<IoFailure> failures(group_.size());
  if (created.data()[0] != 0.0f) {
    failures[0] = {static_cast<int>(created.data()[0]), static_cast<int>(created.data()[1])};
    fail(failures);
  }

  IoFailure mine;
  for (int k = 0; k < kHashPieces; ++k) {
    if (created.data()[2 + k] != static_cast<float>((hash >> (16 * k)) & 0xffffu)) {
      mine = {kEntriesDiffer, 0};
    }
  }
  if (mine.stage == kNone && group_rank_ != 0) {
    fd_ = ::open(tmp_path_.c_str(), O_WRONLY | O_CLOEXEC);
    if (fd_ < 0) mine = {kOpen, errno};
  }
  Tensor opened = Tensor::zeros({2 * static_cast<int64_t>(group_.size())});
  opened.data()[2 * group_rank_] = static_cast<float>(mine.stage);
  opened.data()[2 * group_rank_ + 1] = static_cast<float>(mine.err);
  // [agree] every rank's open result (each fills only its own slots)
  group_.all_reduce_sum(opened);
  bool any = false;
  for (int r = 0; r < group_.size(); ++r) {
    failures[r] = {static_cast<int>(opened.data()[2 * r]),
                   static_cast<int>(opened.data()[2 * r + 1])};
    any = any || failures[r].stage != kNone;
  }
  if (any) fail(failures);
}

SafetensorsWriter::~SafetensorsWriter() {
  IoFailure ignored;
  close_file(&ignored);
  if (created_) ::unlink(tmp_path_.c_str());  // never committed: leave no temporary behind
}

// Group rank 0: the temporary with the header, at its full size (zeros after
// the header until the ranks write).
void SafetensorsWriter::create_temporary(const std::string& head, uint64_t file_bytes) {
  fd_ = ::open(tmp_path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0666);
  if (fd_ < 0) {
    io_failure_ = {kCreate, errno};
    return;
  }
  created_ = true;
  if (const int err = pwrite_full(fd_, head.data(), head.size(), 0)) {
    io_failure_ = {kWriteHeader, err};
  } else if (::ftruncate(fd_, static_cast<off_t>(file_bytes)) != 0) {
    io_failure_ = {kResize, errno};
  }
}

void SafetensorsWriter::close_file(IoFailure* failure) {
  if (fd_ < 0) return;
  if (::close(fd_) != 0 && failure->stage == kNone) *failure = {kWrite, errno};
  fd_ = -1;
}

// Every rank alike: cleans up (group rank 0 removes the temporary) and throws
// for the first failing rank.
void SafetensorsWriter::fail(const std::vector<IoFailure>& failures) {
  IoFailure ignored;
  close_file(&ignored);
  if (created_) ::unlink(tmp_path_.c_str());
  created_ = false;
  finished_ = true;
  int first = -1, others = 0;
  for (int r = 0; r < static_cast<int>(failures.size()); ++r) {
    if (failures[r].stage == kNone) continue;
    if (first < 0)
      first = r;
    else
      ++others;
  }
  const IoFailure f = failures[first];
  const std::string on_rank =
      " on rank " + std::to_string(first) + " of group " + group_.name() +
      (others > 0 ? " (and " + std::to_string(others) + " other ranks)" : "") + ": " +
      errno_text(f.err) + ".";
  const std::string unchanged = " An existing " + path_ + " is unchanged.";
  const std::string prefix = "[safetensors] ";
  switch (f.stage) {
    case kCreate:
      throw InvalidInputError(prefix + "cannot create " + tmp_path_ + " (the temporary for " +
                              path_ + ")" + on_rank +
                              " Check that the directory exists and is writable.");
    case kOpen:
      throw InvalidInputError(prefix + "cannot open " + tmp_path_ + " for writing" + on_rank +
                              " Every rank of the group must see the same directory (a file "
                              "system shared by all nodes).");
    case kEntriesDiffer:
      throw InternalError(prefix + path_ + ": the tensor list on rank " + std::to_string(first) +
                          " differs from rank 0's; every rank must pass the same entries and "
                          "metadata.");
    case kWriteHeader:
      throw BackendError(prefix + "cannot write the header of " + tmp_path_ + on_rank + unchanged);
    case kResize:
      throw BackendError(prefix + "cannot extend " + tmp_path_ + " to its full size" + on_rank +
                         unchanged);
    case kWrite:
      throw BackendError(prefix + "cannot write tensor data to " + tmp_path_ + on_rank + unchanged);
    case kSync:
      throw BackendError(prefix + "cannot flush (fsync) " + tmp_path_ + on_rank + unchanged);
    case kReadBack:
      throw BackendError(prefix + "cannot read back " + tmp_path_ + " to checksum it" + on_rank +
                         unchanged);
    case kRename:
      throw BackendError(prefix + "cannot rename " + tmp_path_ + " to " + path_ + on_rank +
                         unchanged);
    default:
      throw InternalError(prefix + "unknown writer failure stage " + std::to_string(f.stage));
  }
}

// Group rank 0: the header again, with the checksums in place of the zeros
// (the same length: the data do not move), written and flushed. 0 or errno.
int SafetensorsWriter::write_checksums(const std::vector<TensorInfo>& tensors,
                                       const std::vector<uint32_t>& crcs) {
  std::map<std::string, std::string> metadata = metadata_;
  for (size_t i = 0; i < tensors.size(); ++i) {
    metadata[safetensors::checksum_key(tensors[i].name)] = safetensors::checksum_text(crcs[i]);
  }
  const std::string head = safetensors::writer_layout(path_, entry_list_, metadata, dtype_).head;
  if (head.size() != data_start_) {
    throw InternalError("[safetensors] " + path_ + ": the header with checksums (" +
                        std::to_string(head.size()) + " bytes) must keep its length (" +
                        std::to_string(data_start_) + ")");
  }
  const int fd = ::open(tmp_path_.c_str(), O_WRONLY | O_CLOEXEC);
  if (fd < 0) return errno;
  int err = pwrite_full(fd, head.data(), head.size(), 0);
  if (err == 0 && ::fsync(fd) != 0) err = errno;
  if (::close(fd) != 0 && err == 0) err = errno;
  return err;
}

SafetensorsWriter::Entry& SafetensorsWriter::entry(const std::string& name) {
  const auto it = entries_.find(name);
  if (it == entries_.end()) {
    throw InvalidInputError("[safetensors] " + path_ + ": tensor \"" + name +
                            "\" is not among the writer's entries. List it when constructing "
                            "the writer.");
  }
  if (finished_) {
    throw InternalError("[safetensors] " + path_ + ": tensor \"" + name +
                        "\" written after commit() or a failure");
  }
  return it->second;
}

std::string SafetensorsWriter::where(const std::string& name) const {
  return "[safetensors] " + path_ + ": tensor \"" + name + "\"";
}

void SafetensorsWriter::write_rows(const std::string& name, int64_t row0, const Tensor& block) {
  Entry& e = entry(name);
  if (block.ndim() < 1) {
    throw InvalidInputError(where(name) + ": a range of rows needs a block of rank >= 1, not " +
                            shape_to_string(block.shape()));
  }
  write_region(e, rows_region(where(name), e.info.shape, row0, block.size(0)), block);
}

void SafetensorsWriter::write_block(const std::string& name, int64_t row0, int64_t col0,
                                    const Tensor& block, bool transposed) {
  Entry& e = entry(name);
  if (block.ndim() != 2) {
    throw InvalidInputError(where(name) + ": block " + shape_to_string(block.shape()) +
                            " must be 2-d");
  }
  write_region(
      e,
      block_region(where(name), e.info.shape, row0, block.size(0), col0, block.size(1), transposed),
      block);
}

void SafetensorsWriter::write(const std::string& name, const ShardSpec& shard, const Tensor& local,
                              bool transposed) {
  Entry& e = entry(name);
  const Region region = shard_region(where(name), e.info.shape, shard, transposed);
  require_block_shape(e, region, local);  // on every rank, writing or not
  // A replicated tensor is written once, by group rank 0.
  if (shard.count == 1 && group_rank_ != 0) return;
  write_region(e, region, local);
}

void SafetensorsWriter::require_block_shape(const Entry& e, const Region& region,
                                            const Tensor& block) const {
  if (block.shape() != region.block_shape) {
    throw InvalidInputError(where(e.info.name) + ": block shape " + shape_to_string(block.shape()) +
                            " must be " + shape_to_string(region.block_shape) + ".");
  }
}

// Writes `block` (region.block_shape) as the region's runs.
void SafetensorsWriter::write_region(Entry& e, const Region& region, const Tensor& block) {
  require_block_shape(e, region, block);
  // The runs, stacked: [count, length]
  Tensor runs;
  if (region.transposed) {
    runs = Tensor::empty({region.count, region.length});
    float* r = runs.data();
    for (int64_t j = 0; j < region.count; ++j) {
      for (int64_t i = 0; i < region.length; ++i) r[j * region.length + i] = block(i, j);
    }
  } else {
    runs = block.is_contiguous() ? block : block.clone();
  }
  const bool merged = region.contiguous();
  const int64_t count = merged ? std::min<int64_t>(region.count, 1) : region.count;
  const int64_t length = merged ? region.numel() : region.length;
  const int64_t element = dtype_bytes(dtype_);
  const Tensor stored = runs.to(dtype_);  // the file's dtype (little-endian host: its bytes)
  const auto* bytes = static_cast<const unsigned char*>(stored.raw_data());
  for (int64_t r = 0; r < count && io_failure_.stage == kNone; ++r) {
    const uint64_t offset =
        data_start_ + e.info.begin + (region.first + r * region.stride) * element;
    const int err = pwrite_full(fd_, bytes + r * length * element,
                                static_cast<size_t>(length * element), offset);
    if (err != 0) io_failure_ = {kWrite, err};  // reported by commit(), on every rank
  }
  e.written += region.numel();
}

void SafetensorsWriter::commit() {
  if (finished_) {
    throw InternalError("[safetensors] " + path_ + ": commit() after commit() or a failure");
  }
  const int size = group_.size();
  const int64_t n = static_cast<int64_t>(entries_.size());
  Tensor tally = Tensor::zeros({n * kLimbs + 2 * static_cast<int64_t>(size)});
  float* t = tally.data();
  int64_t i = 0;
  for (const auto& [name, e] : entries_) {
    int64_t w = std::min(e.written, (int64_t{1} << (8 * kLimbs)) - 1);
    for (int k = 0; k < kLimbs; ++k, w >>= 8) t[i * kLimbs + k] = static_cast<float>(w & 0xff);
    ++i;
  }
  if (io_failure_.stage == kNone && ::fsync(fd_) != 0) io_failure_ = {kSync, errno};
  close_file(&io_failure_);
  t[n * kLimbs + 2 * group_rank_] = static_cast<float>(io_failure_.stage);
  t[n * kLimbs + 2 * group_rank_ + 1] = static_cast<float>(io_failure_.err);
  // [agree] elements written per tensor and every rank's I/O failure, summed over the group
  group_.all_reduce_sum(tally);

  std::vector<IoFailure> failures(size);
  bool any = false;
  for (int r = 0; r < size; ++r) {
    failures[r] = {static_cast<int>(t[n * kLimbs + 2 * r]),
                   static_cast<int>(t[n * kLimbs + 2 * r + 1])};
    any = any || failures[r].stage != kNone;
  }
  if (any) fail(failures);

  std::string wrong;
  int wrong_count = 0;
  i = 0;
  for (const auto& [name, e] : entries_) {
    int64_t total = 0;
    for (int k = kLimbs - 1; k >= 0; --k)
      total = total * 256 + static_cast<int64_t>(t[i * kLimbs + k]);
    ++i;
    if (total == e.info.numel()) continue;
    if (wrong_count++ < 3) {
      wrong +=
          (wrong.empty() ? "" : "; ") + ("tensor \"" + name + "\" got " + std::to_string(total) +
                                         " elements written of " + std::to_string(e.info.numel()));
    }
  }
  if (wrong_count > 0) {
    if (wrong_count > 3) wrong += "; and " + std::to_string(wrong_count - 3) + " more";
    if (created_) ::unlink(tmp_path_.c_str());
    created_ = false;
    finished_ = true;
    throw InternalError("[safetensors] " + path_ +
                        ": every tensor must be written exactly once over the group (" + wrong +
                        "). Write each shard from the rank that owns it and a replicated tensor "
                        "from one rank. An existing " +
                        path_ + " is unchanged.");
  }

  // Checksums of the bytes as they are in the file, read back by every rank.
  std::vector<TensorInfo> infos;
  for (const auto& [name, e] : entries_) infos.push_back(e.info);
  const int read_fd = ::open(tmp_path_.c_str(), O_RDONLY | O_CLOEXEC);
  const int open_error = read_fd < 0 ? errno : 0;
  // [agree] every tensor's CRC-32 (tensor_checksums.h: one all_gather)
  const safetensors::GroupChecksums sums =
      safetensors::tensor_crc32s(group_, read_fd, data_start_, infos, open_error);
  if (read_fd >= 0) ::close(read_fd);
  if (sums.failed_rank >= 0) {
    failures.assign(size, IoFailure{});
    failures[sums.failed_rank] = {kReadBack, sums.err};
    fail(failures);
  }

  Tensor renamed = Tensor::zeros({2});
  if (group_rank_ == 0) {
    const int err = write_checksums(infos, sums.crc);
    if (err != 0) {
      renamed.data()[0] = kWriteHeader;
      renamed.data()[1] = static_cast<float>(err);
    } else if (::rename(tmp_path_.c_str(), path_.c_str()) != 0) {
      renamed.data()[0] = kRename;
      renamed.data()[1] = static_cast<float>(errno);
    } else {
      created_ = false;
      sync_directory_of(path_);
    }
  }
  // [agree] group rank 0's rename: no rank returns before the file is at `path`
  group_.broadcast(renamed, 0);
  if (renamed.data()[0] != 0.0f) {
    failures.assign(size, IoFailure{});
    failures[0] = {static_cast<int>(renamed.data()[0]), static_cast<int>(renamed.data()[1])};
    fail(failures);
  }
  finished_ = true;
}

}  // namespace colrow
