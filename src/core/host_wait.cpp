// Polling host waits with watchers and a timeout (host_wait.h).
#include "core/host_wait.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <mutex>
#include <thread>
#include <vector>

#include "colrow/core/error.h"

namespace colrow {
namespace {

using Clock = std::chrono::steady_clock;

constexpr int kSpinPolls = 1000;                              // yields before sleeping
constexpr auto kPollSleep = std::chrono::microseconds(50);    // then between polls
constexpr auto kWatchInterval = std::chrono::milliseconds(10);  // between watcher checks

std::mutex g_mutex;
std::vector<WaitWatcher*> g_watchers;
double g_timeout_seconds = 600.0;

std::vector<WaitWatcher*> watchers() {
  std::lock_guard<std::mutex> lock(g_mutex);
  return g_watchers;
}

// The first watcher's failure, or "".
std::string first_failure() {
  for (WaitWatcher* w : watchers()) {
    std::string why = w->failure();
    if (!why.empty()) return why;
  }
  return "";
}

std::string seconds_text(double s) {
  char text[32];
  std::snprintf(text, sizeof text, "%g s", s);
  return text;
}

}  // namespace

void add_wait_watcher(WaitWatcher* watcher) {
  std::lock_guard<std::mutex> lock(g_mutex);
  g_watchers.push_back(watcher);
}

void remove_wait_watcher(WaitWatcher* watcher) {
  std::lock_guard<std::mutex> lock(g_mutex);
  g_watchers.erase(std::remove(g_watchers.begin(), g_watchers.end(), watcher), g_watchers.end());
}

void abort_wait_watchers() {
  for (WaitWatcher* w : watchers()) w->abort();
}

void set_host_wait_timeout(double seconds) {
  if (!(seconds > 0) || !std::isfinite(seconds)) {
    throw ConfigError("[device] comm_timeout (" + seconds_text(seconds) +
                      ") must be a positive number of seconds. Pass e.g. --comm-timeout 600.");
  }
  std::lock_guard<std::mutex> lock(g_mutex);
  g_timeout_seconds = seconds;
}

double host_wait_timeout() {
  std::lock_guard<std::mutex> lock(g_mutex);
  return g_timeout_seconds;
}

void wait_until(const std::function<bool()>& done, const std::string& what) {
  if (done()) return;
  const Clock::time_point start = Clock::now();
  const auto limit = std::chrono::duration<double>(host_wait_timeout());
  Clock::time_point next_watch = start + kWatchInterval;
  for (int polls = 0;;) {
    if (polls < kSpinPolls) {
      ++polls;
      std::this_thread::yield();
    } else {
      std::this_thread::sleep_for(kPollSleep);
    }
    if (done()) return;
    const Clock::time_point now = Clock::now();
    const bool timed_out = now - start >= limit;
    if (now < next_watch && !timed_out) continue;
    next_watch = now + kWatchInterval;
    const std::string failure = first_failure();
    if (!failure.empty()) {
      abort_wait_watchers();
      throw BackendError(failure + " while waiting for " + what +
                         "; this rank's NCCL communicators were aborted. Look for the rank "
                         "that failed first; this one stops here instead of waiting forever.");
    }
    if (timed_out) {
      abort_wait_watchers();
      throw BackendError(
          "[device] waited " + seconds_text(host_wait_timeout()) + " for " + what +
          " without it finishing: a collective whose other ranks never joined it (a rank that "
          "stopped, a network fault), or work longer than the limit. This rank's NCCL "
          "communicators were aborted. Raise --comm-timeout if the work is that long.");
    }
  }
}

}  // namespace colrow
