// Error kinds and the divisibility rule every tensor-parallel dimension obeys.
#include "colrow/core/error.h"

#include <sstream>

namespace colrow {

const char* to_string(ErrorKind kind) {
  switch (kind) {
    case ErrorKind::kConfig:
      return "configuration error";
    case ErrorKind::kInvalidInput:
      return "invalid input";
    case ErrorKind::kBackend:
      return "backend failure";
    case ErrorKind::kInternal:
      return "internal error";
  }
  return "error";
}

std::vector<int64_t> divisors(int64_t value) {
  std::vector<int64_t> small, large;
  for (int64_t d = 1; d * d <= value; ++d) {
    if (value % d != 0) continue;
    small.push_back(d);
    if (d != value / d) large.push_back(value / d);
  }
  small.insert(small.end(), large.rbegin(), large.rend());
  return small;
}

void require_divisible(const std::string& component, const std::string& field, int64_t value,
                       int tp) {
  if (tp >= 1 && value >= 1 && value % tp == 0) return;
  std::ostringstream msg;
  msg << "[" << component << "] " << field << " (" << value << ") must be divisible by tp (" << tp
      << ").";
  if (value >= 1) {
    msg << " Choose tp in {";
    const std::vector<int64_t> valid = divisors(value);
    // Long lists (a highly composite size) stay readable: the small ones matter.
    const size_t shown = valid.size() > 16 ? 16 : valid.size();
    for (size_t i = 0; i < shown; ++i) msg << (i ? ", " : "") << valid[i];
    if (shown < valid.size()) msg << ", ...";
    msg << "}.";
  } else {
    msg << " " << field << " must be positive.";
  }
  throw ConfigError(msg.str());
}

}  // namespace colrow
