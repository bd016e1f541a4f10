// CRC-32 per tensor, computed by a group in parts and joined with crc32_combine.
#include "io/tensor_checksums.h"

#include <zlib.h>

#include <algorithm>
#include <cstdio>

#include "io/posix_file.h"

namespace colrow::safetensors {
namespace {

constexpr uint64_t kReadBytes = uint64_t{4} << 20;  // one pread at most
constexpr uint64_t kPartAlignment = uint64_t{1} << 20;

// Rank r's part of the buffer's bytes [0, end): [first, last).
std::pair<uint64_t, uint64_t> part_of(int r, int size, uint64_t end) {
  const uint64_t per = (end + size - 1) / size;
  const uint64_t aligned = (per + kPartAlignment - 1) / kPartAlignment * kPartAlignment;
  return {std::min(end, aligned * r), std::min(end, aligned * (r + 1))};
}

// The bytes of [begin, end) inside [first, last).
std::pair<uint64_t, uint64_t> overlap(uint64_t begin, uint64_t end, uint64_t first, uint64_t last) {
  const uint64_t b = std::max(begin, first), e = std::min(end, last);
  return b < e ? std::make_pair(b, e) : std::make_pair(b, b);
}

}  // namespace

std::string checksum_key(const std::string& tensor) {
  return "crc32:" + tensor;
}

std::string checksum_text(uint32_t crc) {
  char text[9];
  std::snprintf(text, sizeof text, "%08x", crc);
  return text;
}

std::optional<uint32_t> parse_checksum(const std::string& text) {
  if (text.size() != 8 || text.find_first_not_of("0123456789abcdef") != std::string::npos) {
    return std::nullopt;
  }
  return static_cast<uint32_t>(std::stoul(text, nullptr, 16));
}

GroupChecksums tensor_crc32s(Communicator& group, int fd, uint64_t data_start,
                             const std::vector<TensorInfo>& tensors, int open_error) {
  uint64_t end = 0;
  for (const TensorInfo& t : tensors) end = std::max(end, t.end);
  const int size = group.size(), rank = group.rank();
  const auto [first, last] = part_of(rank, size, end);
  const int64_t n = static_cast<int64_t>(tensors.size());
  // Per tensor this rank's CRC as two 16-bit halves (exact in fp32), then
  // the read's result: [2 n + 1]
  Tensor mine = Tensor::zeros({2 * n + 1});
  std::vector<unsigned char> buffer;
  int err = open_error;
  for (int64_t i = 0; i < n && err == 0; ++i) {
    const auto [b, e] = overlap(tensors[i].begin, tensors[i].end, first, last);
    uLong crc = crc32(0L, Z_NULL, 0);
    for (uint64_t at = b; at < e && err == 0; at += kReadBytes) {
      const size_t bytes = static_cast<size_t>(std::min(kReadBytes, e - at));
      buffer.resize(bytes);
      err = pread_full(fd, buffer.data(), bytes, data_start + at);
      if (err == 0) crc = crc32(crc, buffer.data(), static_cast<uInt>(bytes));
    }
    mine.data()[2 * i] = static_cast<float>(crc & 0xffffu);
    mine.data()[2 * i + 1] = static_cast<float>((crc >> 16) & 0xffffu);
  }
  mine.data()[2 * n] = static_cast<float>(err);
  Tensor all = Tensor::empty({size * (2 * n + 1)});
  // [agree] every rank's CRCs of its part and its read's result
  group.all_gather(mine, all);

  GroupChecksums out;
  out.crc.assign(n, static_cast<uint32_t>(crc32(0L, Z_NULL, 0)));
  for (int r = 0; r < size; ++r) {
    const float* theirs = all.data() + r * (2 * n + 1);
    if (theirs[2 * n] != 0.0f && out.failed_rank < 0) {
      out.failed_rank = r;
      out.err = static_cast<int>(theirs[2 * n]);
    }
    const auto [r_first, r_last] = part_of(r, size, end);
    for (int64_t i = 0; i < n; ++i) {
      const auto [b, e] = overlap(tensors[i].begin, tensors[i].end, r_first, r_last);
      if (b == e) continue;
      const uLong part =
          static_cast<uLong>(theirs[2 * i]) | (static_cast<uLong>(theirs[2 * i + 1]) << 16);
      out.crc[i] =
          static_cast<uint32_t>(crc32_combine(out.crc[i], part, static_cast<z_off_t>(e - b)));
    }
  }
  return out;
}

}  // namespace colrow::safetensors
