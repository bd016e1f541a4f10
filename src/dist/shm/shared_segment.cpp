// POSIX shared memory set up through MPI (see shared_segment.h).
#include "dist/shm/shared_segment.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdint>
#include <cstring>

#include "colrow/core/error.h"
#include "colrow/dist/mpi_communicator.h"

namespace colrow {
namespace {

constexpr int kNameBytes = 64;

// Unique on the node: the creating process's id and a per-process count.
std::string segment_name() {
  static std::atomic<int> count{0};
  return "/colrow." + std::to_string(getpid()) + "." + std::to_string(count++);
}

std::string system_error(const char* call, int code) {
  return std::string(call) + " failed: " + std::strerror(code);
}

// Every rank's outcome of one setup step, agreed on: the lowest failing rank
// (or -1). The failing rank throws its own reason; the others name it.
void agree(MPI_Comm comm, const std::string& failure, const std::string& group,
           const std::string& step) {
  int rank = 0;
  COLROW_MPI_CHECK(MPI_Comm_rank(comm, &rank));
  int mine = failure.empty() ? INT32_MAX : rank, first = INT32_MAX;
  COLROW_MPI_CHECK(MPI_Allreduce(&mine, &first, 1, MPI_INT, MPI_MIN, comm));
  if (first == INT32_MAX) return;
  const std::string where = "[dist] shared memory for " + group + ": ";
  if (!failure.empty()) {
    throw BackendError(where + step + " on rank " + std::to_string(rank) + ": " + failure +
                       ". Free space in /dev/shm, or run with --comm mpi.");
  }
  throw BackendError(where + step + " failed on rank " + std::to_string(first) +
                     " (its message says why). Run with --comm mpi to avoid shared memory.");
}

}  // namespace

SharedSegment::SharedSegment(MPI_Comm comm, size_t bytes, const std::string& group) : size_(bytes) {
  int rank = 0;
  COLROW_MPI_CHECK(MPI_Comm_rank(comm, &rank));
  char name[kNameBytes] = {};
  int fd = -1;
  std::string failure;
  if (rank == 0) {
    const std::string chosen = segment_name();
    std::strncpy(name, chosen.c_str(), kNameBytes - 1);
    fd = shm_open(name, O_CREAT | O_EXCL | O_RDWR, 0600);
    if (fd < 0) {
      failure = system_error("shm_open", errno);
    } else if (const int code = posix_fallocate(fd, 0, static_cast<off_t>(bytes)); code != 0) {
      failure = system_error("posix_fallocate", code) + " (" + std::to_string(bytes) + " bytes)";
    }
    if (!failure.empty() && fd >= 0) {
      close(fd);
      shm_unlink(name);
    }
  }
  agree(comm, failure, group, "creating the segment");
  COLROW_MPI_CHECK(MPI_Bcast(name, kNameBytes, MPI_CHAR, 0, comm));
  if (rank != 0) {
    fd = shm_open(name, O_RDWR, 0600);
    if (fd < 0) failure = system_error("shm_open", errno);
  }
  if (fd >= 0) {
    void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (p == MAP_FAILED) {
      failure = system_error("mmap", errno);
    } else {
      data_ = static_cast<std::byte*>(p);
    }
    close(fd);  // the mapping keeps the object alive
  }
  // Every rank has opened it (or failed): the name is no longer needed.
  COLROW_MPI_CHECK(MPI_Barrier(comm));
  if (rank == 0) shm_unlink(name);
  try {
    agree(comm, failure, group, "mapping the segment");
  } catch (...) {
    if (data_ != nullptr) munmap(data_, size_);
    data_ = nullptr;
    throw;
  }
}

SharedSegment::~SharedSegment() {
  if (data_ != nullptr) munmap(data_, size_);
}

}  // namespace colrow
