// Strings through a float all-gather (see gather_text.h).
#include "colrow/dist/gather_text.h"

#include <algorithm>

#include "colrow/core/error.h"

namespace colrow {

std::vector<std::string> all_gather_text(Communicator& group, const std::string& text) {
  constexpr size_t kMaxBytes = size_t{1} << 24;  // floats count bytes exactly below this
  if (text.size() >= kMaxBytes) {
    throw InternalError("[" + group.name() + "] all_gather_text of " + std::to_string(text.size()) +
                        " bytes: the limit is 2^24");
  }
  const int n = group.size();
  Tensor lengths = Tensor::empty({n});
  group.all_gather(Tensor::full({1}, static_cast<float>(text.size())), lengths);
  int64_t longest = 0;
  for (int r = 0; r < n; ++r) longest = std::max<int64_t>(longest, lengths.data()[r]);
  Tensor mine = Tensor::zeros({std::max<int64_t>(longest, 1)});
  for (size_t i = 0; i < text.size(); ++i) {
    mine.data()[i] = static_cast<float>(static_cast<unsigned char>(text[i]));
  }
  Tensor all = Tensor::empty({n * mine.numel()});
  group.all_gather(mine, all);
  std::vector<std::string> texts(n);
  for (int r = 0; r < n; ++r) {
    const float* bytes = all.data() + r * mine.numel();
    const int64_t length = static_cast<int64_t>(lengths.data()[r]);
    texts[r].resize(length);
    for (int64_t i = 0; i < length; ++i) {
      texts[r][i] = static_cast<char>(static_cast<unsigned char>(bytes[i]));
    }
  }
  return texts;
}

}  // namespace colrow
