// all_gather_text: every rank's string, on every rank of the group, in rank
// order (torch.distributed.all_gather_object for text). The Communicator has
// no byte type (fp32 and bf16 only); each byte travels as one float, exact for 0..255, and
// lengths as floats, exact below 2^24 bytes. For small control data such as
// the names and shapes of the tensors each pipeline stage holds.
#pragma once

#include <string>
#include <vector>

#include "colrow/dist/communicator.h"

namespace colrow {

// Collective over `group`: two all_gathers. InternalError for a text of
// 2^24 bytes or more.
std::vector<std::string> all_gather_text(Communicator& group, const std::string& text);

}  // namespace colrow
