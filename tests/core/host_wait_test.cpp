// wait_until (core/host_wait.h), the polling host wait behind every wait for
// a GPU: it returns when the work is done, asks the registered watchers while
// it is not, and on a watcher's failure or the timeout aborts every watcher
// and throws BackendError naming what it waited for. On the CPU with work
// that is a counter or a clock, so that the rules hold before any GPU runs it.
#include "core/host_wait.h"

#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <functional>
#include <limits>
#include <string>

#include "colrow/core/error.h"

namespace colrow {
namespace {

using Clock = std::chrono::steady_clock;

// A watcher that fails once `fail_after` has passed (never by default), and
// counts what it was asked.
class FakeWatcher final : public WaitWatcher {
 public:
  explicit FakeWatcher(std::string why = "", Clock::duration fail_after = Clock::duration::zero())
      : why_(std::move(why)), fail_at_(Clock::now() + fail_after) {
    add_wait_watcher(this);
  }
  ~FakeWatcher() override { remove_wait_watcher(this); }

  std::string failure() override {
    ++asked;
    return !why_.empty() && Clock::now() >= fail_at_ ? why_ : "";
  }
  void abort() override { ++aborted; }

  int asked = 0;
  int aborted = 0;

 private:
  std::string why_;
  Clock::time_point fail_at_;
};

// Sets the timeout for one test and puts the default back.
class HostWaitTest : public ::testing::Test {
 protected:
  void TearDown() override { set_host_wait_timeout(600.0); }
};

std::string message_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const BackendError& e) {
    return e.what();
  }
  return "(no BackendError)";
}

TEST_F(HostWaitTest, WorkAlreadyDoneAsksNobody) {
  FakeWatcher watcher;
  int polls = 0;
  wait_until([&] { return ++polls >= 1; }, "the stream");
  EXPECT_EQ(polls, 1);
  EXPECT_EQ(watcher.asked, 0);
  EXPECT_EQ(watcher.aborted, 0);
}

TEST_F(HostWaitTest, ReturnsWhenTheWorkFinishesAndAsksTheWatchersMeanwhile) {
  FakeWatcher watcher;
  const Clock::time_point finish = Clock::now() + std::chrono::milliseconds(200);
  wait_until([&] { return Clock::now() >= finish; }, "the stream");
  EXPECT_GE(Clock::now(), finish);
  EXPECT_GE(watcher.asked, 2);  // every 10 ms over 200 ms: about 20 times
  EXPECT_EQ(watcher.aborted, 0);
}

TEST_F(HostWaitTest, AWatchersFailureAbortsEveryWatcherAndNamesBoth) {
  FakeWatcher healthy;
  FakeWatcher broken("[nccl] tp failed on world rank 1: remote process exited",
                     std::chrono::milliseconds(30));
  const Clock::time_point start = Clock::now();
  const std::string message =
      message_of([] { wait_until([] { return false; }, "a stream of cuda:0"); });
  EXPECT_LT(Clock::now() - start, std::chrono::seconds(5));  // not the 600 s timeout
  EXPECT_NE(message.find("[nccl] tp failed on world rank 1: remote process exited"),
            std::string::npos)
      << message;
  EXPECT_NE(message.find("while waiting for a stream of cuda:0"), std::string::npos) << message;
  EXPECT_EQ(healthy.aborted, 1);
  EXPECT_EQ(broken.aborted, 1);
}

TEST_F(HostWaitTest, TheTimeoutAbortsEveryWatcherAndSaysHowToRaiseIt) {
  FakeWatcher watcher;
  set_host_wait_timeout(0.05);
  const Clock::time_point start = Clock::now();
  const std::string message =
      message_of([] { wait_until([] { return false; }, "an event on cuda:1"); });
  const auto waited = Clock::now() - start;
  EXPECT_GE(waited, std::chrono::milliseconds(50));
  EXPECT_LT(waited, std::chrono::seconds(5));
  EXPECT_NE(message.find("[device] waited 0.05 s for an event on cuda:1"), std::string::npos)
      << message;
  EXPECT_NE(message.find("--comm-timeout"), std::string::npos) << message;
  EXPECT_EQ(watcher.aborted, 1);
  EXPECT_GE(watcher.asked, 1);
}

TEST_F(HostWaitTest, ARemovedWatcherIsNotAsked) {
  FakeWatcher removed("[nccl] would fail every wait");
  remove_wait_watcher(&removed);
  FakeWatcher kept;
  const Clock::time_point finish = Clock::now() + std::chrono::milliseconds(30);
  EXPECT_NO_THROW(wait_until([&] { return Clock::now() >= finish; }, "the stream"));
  EXPECT_EQ(removed.asked, 0);
  EXPECT_EQ(removed.aborted, 0);
  EXPECT_GE(kept.asked, 1);
}

TEST_F(HostWaitTest, AnErrorOfTheQueryPassesThrough) {
  FakeWatcher watcher;
  int polls = 0;
  EXPECT_THROW(wait_until(
                   [&]() -> bool {
                     if (++polls == 3) throw InternalError("[cuda] an illegal memory access");
                     return false;
                   },
                   "the stream"),
               InternalError);
  EXPECT_EQ(watcher.aborted, 0);  // the query's caller decides (the CUDA runtime aborts first)
}

TEST_F(HostWaitTest, AbortWaitWatchersAbortsEachOnce) {
  FakeWatcher a, b;
  abort_wait_watchers();
  EXPECT_EQ(a.aborted, 1);
  EXPECT_EQ(b.aborted, 1);
  EXPECT_EQ(a.asked, 0);
}

TEST_F(HostWaitTest, TheTimeoutMustBeAPositiveNumberOfSeconds) {
  for (double bad : {0.0, -1.0, std::nan(""), std::numeric_limits<double>::infinity()}) {
    EXPECT_THROW(set_host_wait_timeout(bad), ConfigError) << bad;
  }
  EXPECT_EQ(host_wait_timeout(), 600.0);  // unchanged by the refusals
  set_host_wait_timeout(12.5);
  EXPECT_EQ(host_wait_timeout(), 12.5);
}

}  // namespace
}  // namespace colrow
