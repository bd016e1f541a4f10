// Error kinds shared by every component, and the one message form colrow uses:
//   [component] name (value) must <rule> other (value). <fix>
// Library code throws; only main() catches, prints "[rank r/N] message" and ends
// the job without leaving any rank in a collective (apps/colrow.cpp's fail():
// Communicator::all_ranks_failing, then abort).
#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

namespace colrow {

enum class ErrorKind {
  kConfig,        // a configuration that cannot work (identical on every rank)
  kInvalidInput,  // data or files supplied by the user
  kBackend,       // MPI, BLAS, CUDA or NCCL reported a failure
  kInternal,      // an invariant of colrow itself broke: a bug
};

const char* to_string(ErrorKind kind);

class Error : public std::runtime_error {
 public:
  Error(ErrorKind kind, const std::string& message) : std::runtime_error(message), kind_(kind) {}
  ErrorKind kind() const { return kind_; }

 private:
  ErrorKind kind_;
};

class ConfigError : public Error {
 public:
  explicit ConfigError(const std::string& message) : Error(ErrorKind::kConfig, message) {}
};

class InvalidInputError : public Error {
 public:
  explicit InvalidInputError(const std::string& message)
      : Error(ErrorKind::kInvalidInput, message) {}
};

class BackendError : public Error {
 public:
  explicit BackendError(const std::string& message) : Error(ErrorKind::kBackend, message) {}
};

class InternalError : public Error {
 public:
  explicit InternalError(const std::string& message) : Error(ErrorKind::kInternal, message) {}
};

// The positive divisors of `value`, ascending: the valid tp degrees for a
// dimension of that size.
std::vector<int64_t> divisors(int64_t value);

// Throws ConfigError unless value % tp == 0, naming the field, its value, tp and
// the tp values that would work:
//   [mlp] ffn_hidden_size (3000) must be divisible by tp (7). Choose tp in {1, 2, 3, 4, ...}.
void require_divisible(const std::string& component, const std::string& field, int64_t value,
                       int tp);

}  // namespace colrow

// Internal invariant check (a bug if it fires), with file and line.
#define COLROW_CHECK(cond, message)                                                              \
  do {                                                                                           \
    if (!(cond)) {                                                                               \
      throw ::colrow::InternalError(std::string("[internal] ") + (message) +                     \
                                    " (" #cond ") at " __FILE__ ":" + std::to_string(__LINE__)); \
    }                                                                                            \
  } while (0)
