// Threads per rank: --threads first, then OMP_NUM_THREADS, then the
// machine's cores shared by the ranks on this node; out-of-range requests and
// OMP_NUM_THREADS values that are not a count are one clear ConfigError.
#include "colrow/runtime/threads.h"

#include <gtest/gtest.h>
#include <stdlib.h>

#include <algorithm>
#include <optional>
#include <string>
#include <thread>

#include "colrow/core/error.h"

namespace colrow {
namespace {

// Sets (or unsets, with nullopt) OMP_NUM_THREADS for one test and restores
// what the process had.
class OmpNumThreads {
 public:
  explicit OmpNumThreads(const std::optional<std::string>& value) {
    if (const char* old = getenv(kName)) saved_ = old;
    if (value) {
      setenv(kName, value->c_str(), 1);
    } else {
      unsetenv(kName);
    }
  }
  ~OmpNumThreads() {
    if (saved_) {
      setenv(kName, saved_->c_str(), 1);
    } else {
      unsetenv(kName);
    }
  }

 private:
  static constexpr const char* kName = "OMP_NUM_THREADS";
  std::optional<std::string> saved_;
};

std::string config_error_of(int requested, int ranks_on_node) {
  try {
    threads_per_rank(requested, ranks_on_node);
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "(no error)";
}

int machine_cores() {
  return static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
}

TEST(ThreadsPerRank, WithoutOmpNumThreadsTheNodesCoresAreSharedByItsRanks) {
  const OmpNumThreads unset(std::nullopt);
  EXPECT_EQ(threads_per_rank(0, 1), machine_cores());
  EXPECT_EQ(threads_per_rank(0, 2), std::max(1, machine_cores() / 2));
  // More ranks than cores: one thread each, never zero.
  EXPECT_EQ(threads_per_rank(0, 4 * machine_cores()), 1);
  EXPECT_EQ(threads_per_rank(0, 0), machine_cores());
}

TEST(ThreadsPerRank, OmpNumThreadsReplacesTheDefault) {
  const OmpNumThreads three("3");
  EXPECT_EQ(threads_per_rank(0, 1), 3);
  EXPECT_EQ(threads_per_rank(0, 64), 3);  // the user's count, even if it oversubscribes
}

TEST(ThreadsPerRank, OmpNumThreadsListGivesItsFirstLevel) {
  const OmpNumThreads nested("5,2");
  EXPECT_EQ(threads_per_rank(0, 1), 5);
}

TEST(ThreadsPerRank, EmptyOmpNumThreadsIsUnset) {
  const OmpNumThreads empty("");
  EXPECT_EQ(threads_per_rank(0, 1), machine_cores());
}

TEST(ThreadsPerRank, ThreadsOptionWinsOverOmpNumThreads) {
  const OmpNumThreads three("3");
  EXPECT_EQ(threads_per_rank(7, 1), 7);
  EXPECT_EQ(threads_per_rank(kMaxThreadsPerRank, 1), kMaxThreadsPerRank);
  // A --threads count makes OMP_NUM_THREADS irrelevant, even a bad one.
  const OmpNumThreads bad("lots");
  EXPECT_EQ(threads_per_rank(2, 1), 2);
}

TEST(ThreadsPerRank, ThreadsOptionOutOfRangeIsRefused) {
  const OmpNumThreads unset(std::nullopt);
  for (const int requested : {-1, kMaxThreadsPerRank + 1}) {
    const std::string message = config_error_of(requested, 1);
    EXPECT_NE(message.find("[threads] threads (" + std::to_string(requested) + ") must be 0"),
              std::string::npos)
        << message;
    EXPECT_NE(message.find("--threads 0"), std::string::npos) << message;
  }
}

TEST(ThreadsPerRank, OmpNumThreadsThatIsNotACountIsRefused) {
  for (const char* value : {"0", "-2", "abc", "4x", " 4", ",4", "1025", "99999999999"}) {
    const OmpNumThreads bad(value);
    const std::string message = config_error_of(0, 1);
    EXPECT_NE(message.find("[threads] OMP_NUM_THREADS (" + std::string(value) + ") must be"),
              std::string::npos)
        << value << ": " << message;
    EXPECT_NE(message.find("--threads N"), std::string::npos) << message;
  }
}

}  // namespace
}  // namespace colrow
