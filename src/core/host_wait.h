// How the host waits for work it cannot see into (a GPU stream, an event)
// without waiting forever. A blocking wait (cudaStreamSynchronize) never
// returns when a queued NCCL collective's peers never join it: a rank that
// died without taking the job down, a network fault, a mismatched collective.
// As PyTorch's NCCL watchdog does, a host wait here polls instead: between
// polls it asks every registered watcher (each NCCL communicator) whether its
// work can still finish, and it gives up after a timeout (--comm-timeout,
// 600 s by default, PyTorch's default). Either way every watcher is aborted
// (ncclCommAbort makes the stuck kernels return, so the process can end) and
// the wait throws BackendError saying what failed and how to change it.
#pragma once

#include <functional>
#include <string>

namespace colrow {

class WaitWatcher {
 public:
  virtual ~WaitWatcher() = default;
  // "" while the work this watcher queued can still finish; else why it cannot.
  virtual std::string failure() = 0;
  // Stops that work for good (after a failure or a timeout anywhere).
  virtual void abort() = 0;
};

// Registration, by the watcher's owner for its lifetime. The registry is
// thread-safe, but the watchers are asked and aborted without its lock: a
// rank drives its GPU and its communicators from one thread, and a watcher
// must not be removed while another thread waits.
void add_wait_watcher(WaitWatcher* watcher);
void remove_wait_watcher(WaitWatcher* watcher);

// Aborts every watcher: for a caller that has met an error after which the
// watchers' work can never finish (a sticky device error), before it throws.
void abort_wait_watchers();

// Seconds a single host wait may last (> 0); 600 until set.
void set_host_wait_timeout(double seconds);
double host_wait_timeout();

// Calls done() until it returns true: at once, then after yields, then every
// 50 us. Every 10 ms (and before giving up) it asks the watchers; a failure
// or the timeout aborts every watcher and throws BackendError naming `what`
// (e.g. "cuda:0's compute stream"). An exception from done() passes through.
void wait_until(const std::function<bool()>& done, const std::string& what);

}  // namespace colrow
