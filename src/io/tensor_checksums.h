// Per-tensor CRC-32 checksums of a safetensors file, which the format itself
// lacks. colrow's writer stores them in the header's __metadata__ (a
// string -> string map that Hugging Face's loaders ignore), one key per
// tensor: "crc32:<tensor name>" -> 8 lower-case hex digits of zlib's crc32
// of the tensor's bytes as stored. The reader verifies them on load.
// The group computes them together: rank r reads the r-th of size equal parts
// of the data buffer, and the parts' CRCs are joined in file order
// (crc32_combine), so no rank reads more than its share.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "colrow/dist/communicator.h"
#include "colrow/io/safetensors.h"

namespace colrow::safetensors {

std::string checksum_key(const std::string& tensor);  // "crc32:" + tensor
std::string checksum_text(uint32_t crc);              // "0a1b2c3d"
// The value of a checksum key; nothing when it is not 8 hex digits.
std::optional<uint32_t> parse_checksum(const std::string& text);

struct GroupChecksums {
  std::vector<uint32_t> crc;  // per tensor, in the order given
  int failed_rank = -1;       // the first rank whose read failed, or -1
  int err = 0;                // its errno (kEndOfFile: the file is shorter)
};

// Collective over `group`: one all_gather. `fd`: this rank's descriptor of
// the file open for reading; `data_start`: where the data buffer begins.
// `open_error`: the errno of this rank's failed open (it then reads nothing,
// and that errno is what the group reports), else 0. Every rank returns the
// same result.
GroupChecksums tensor_crc32s(Communicator& group, int fd, uint64_t data_start,
                             const std::vector<TensorInfo>& tensors, int open_error = 0);

}  // namespace colrow::safetensors
