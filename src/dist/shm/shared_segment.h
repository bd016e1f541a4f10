// SharedSegment: one block of memory mapped by every rank of an MPI group on
// one node, set up through MPI. Rank 0 creates a POSIX shared-memory object,
// reserves its pages (posix_fallocate: a full /dev/shm fails here, not with a
// SIGBUS later), and broadcasts its name; the others map it; then rank 0
// unlinks the name, so nothing is left in /dev/shm even if the job is killed.
// Teardown is a local munmap: a rank leaving on an error never waits for the
// others, unlike MPI_Win_free.
#pragma once

#include <mpi.h>

#include <cstddef>
#include <string>

namespace colrow {

class SharedSegment {
 public:
  static constexpr size_t kPage = 4096;
  // n rounded up to a multiple of `unit`: how the users of a segment lay it out.
  static constexpr size_t round_up(size_t n, size_t unit) { return (n + unit - 1) / unit * unit; }

  // Collective over `comm`, whose ranks must share one node. On failure every
  // rank throws BackendError: the failing rank names the call and the system's
  // reason, the others name the failing rank. `group` names it in messages.
  SharedSegment(MPI_Comm comm, size_t bytes, const std::string& group);
  ~SharedSegment();
  SharedSegment(const SharedSegment&) = delete;
  SharedSegment& operator=(const SharedSegment&) = delete;

  // Page-aligned, zero-filled at creation.
  std::byte* data() const { return data_; }

 private:
  std::byte* data_ = nullptr;
  size_t size_ = 0;
};

}  // namespace colrow
