// Point to point through shared-memory slots (see shm_mailboxes.h).
#include "dist/shm/shm_mailboxes.h"

#include <algorithm>
#include <array>
#include <atomic>
#include <cstring>
#include <vector>

#include "colrow/core/error.h"
#include "colrow/dist/mpi_communicator.h"
#include "dist/collective_checks.h"

namespace colrow {
namespace {

constexpr size_t kPage = 4096;
constexpr size_t kFlagBytes = 64;  // one busy flag per slot, each on its own cache line
// Control message: {total floats of the message, offset and floats of this
// chunk, where the chunk is}. Where: a slot index of the sender, or one of:
constexpr int64_t kInline = -1;  // the chunk follows as an MPI message (no free slot)
constexpr int64_t kEmpty = -2;   // a message of no floats
using Control = std::array<int64_t, 4>;

size_t round_up(size_t n, size_t unit) {
  return (n + unit - 1) / unit * unit;
}

size_t flag_region_bytes(int ranks, int slots) {
  return round_up(static_cast<size_t>(ranks) * slots * kFlagBytes, kPage);
}

// A started send: its control messages (which MPI reads until they complete)
// and any inline chunks. The data in slots needs nothing more from the sender.
class MailboxSend final : public PendingCollective {
 public:
  explicit MailboxSend(size_t chunks) { controls_.reserve(chunks); }
  ~MailboxSend() override { complete(); }
  void wait() override { complete(); }

  Control& add_control() {
    controls_.emplace_back();
    return controls_.back();  // reserved: no reallocation moves it while MPI reads it
  }
  void add(MPI_Request request) { requests_.push_back(request); }

 private:
  void complete() {
    if (requests_.empty()) return;
    COLROW_MPI_CHECK(
        MPI_Waitall(static_cast<int>(requests_.size()), requests_.data(), MPI_STATUSES_IGNORE));
    requests_.clear();
  }

  std::vector<Control> controls_;
  std::vector<MPI_Request> requests_;
};

}  // namespace

ShmMailboxes::ShmMailboxes(MPI_Comm comm, size_t slot_bytes, int slots, const std::string& group)
    : comm_(comm),
      rank_(0),
      size_(0),
      group_(group),
      slot_bytes_(round_up(std::max<size_t>(slot_bytes, kPage), kPage)),
      slots_(slots),
      segment_(
          comm,
          [&] {
            int size = 0;
            COLROW_MPI_CHECK(MPI_Comm_size(comm, &size));
            return flag_region_bytes(size, slots) + static_cast<size_t>(size) * slots * slot_bytes_;
          }(),
          group) {
  COLROW_MPI_CHECK(MPI_Comm_rank(comm, &rank_));
  COLROW_MPI_CHECK(MPI_Comm_size(comm, &size_));
}

uint64_t* ShmMailboxes::busy_flag(int rank, int index) const {
  return reinterpret_cast<uint64_t*>(segment_.data() +
                                     (static_cast<size_t>(rank) * slots_ + index) * kFlagBytes);
}

float* ShmMailboxes::slot(int rank, int index) const {
  std::byte* slots = segment_.data() + flag_region_bytes(size_, slots_);
  return reinterpret_cast<float*>(slots +
                                  (static_cast<size_t>(rank) * slots_ + index) * slot_bytes_);
}

int ShmMailboxes::free_slot() const {
  for (int i = 0; i < slots_; ++i) {
    // Acquire: the receiver's reads of the slot are done before it is reused.
    if (__atomic_load_n(busy_flag(rank_, i), __ATOMIC_ACQUIRE) == 0) return i;
  }
  return -1;
}

std::unique_ptr<PendingCollective> ShmMailboxes::start_send(const Tensor& x, int dst, int tag) {
  collective_checks::require_host_contiguous(x, "send", group_);
  collective_checks::require_peer(dst, "dst", rank_, size_, "send", group_);
  collective_checks::require_tag(tag, "send", group_);
  const int64_t total = x.numel();
  const int64_t chunk = static_cast<int64_t>(slot_bytes_ / sizeof(float));
  auto send = std::make_unique<MailboxSend>(static_cast<size_t>(total / chunk + 1));
  for (int64_t offset = 0; offset < total || (total == 0 && offset == 0); offset += chunk) {
    const int64_t count = std::min(chunk, total - offset);
    Control& control = send->add_control();
    const int index = total == 0 ? -1 : free_slot();
    control = {total, offset, count, total == 0 ? kEmpty : (index >= 0 ? index : kInline)};
    if (index >= 0) {
      __atomic_store_n(busy_flag(rank_, index), 1, __ATOMIC_RELAXED);
      std::memcpy(slot(rank_, index), x.data() + offset, sizeof(float) * count);
      std::atomic_thread_fence(std::memory_order_release);  // the data before its control
    }
    MPI_Request request;
    COLROW_MPI_CHECK(MPI_Isend(control.data(), 4, MPI_INT64_T, dst, tag, comm_, &request));
    send->add(request);
    if (control[3] == kInline) {
      COLROW_MPI_CHECK(MPI_Isend(x.data() + offset, static_cast<int>(count), MPI_FLOAT, dst, tag,
                                 comm_, &request));
      send->add(request);
    }
    if (total == 0) break;
  }
  return send;
}

void ShmMailboxes::recv(Tensor& x, int src, int tag) {
  collective_checks::require_host_contiguous(x, "recv", group_);
  collective_checks::require_peer(src, "src", rank_, size_, "recv", group_);
  collective_checks::require_tag(tag, "recv", group_);
  // Every chunk is taken, even of a message of another count, so that its
  // sender's slots come free; the error follows.
  int64_t total = -1, received = 0;
  std::vector<float> discard;
  do {
    Control control;
    COLROW_MPI_CHECK(MPI_Recv(control.data(), 4, MPI_INT64_T, src, tag, comm_, MPI_STATUS_IGNORE));
    std::atomic_thread_fence(std::memory_order_acquire);  // the data after its control
    total = control[0];
    const int64_t offset = control[1], count = control[2], where = control[3];
    if (where == kEmpty) break;
    if (total != x.numel()) discard.resize(static_cast<size_t>(count));
    float* out = total == x.numel() ? x.data() + offset : discard.data();
    if (where == kInline) {
      COLROW_MPI_CHECK(
          MPI_Recv(out, static_cast<int>(count), MPI_FLOAT, src, tag, comm_, MPI_STATUS_IGNORE));
    } else {
      const int index = static_cast<int>(where);
      std::memcpy(out, slot(src, index), sizeof(float) * count);
      __atomic_store_n(busy_flag(src, index), 0, __ATOMIC_RELEASE);  // the sender may reuse it
    }
    received += count;
  } while (received < total);
  if (total != x.numel()) {
    throw InternalError("[dist] recv over " + group_ + " from src (" + std::to_string(src) +
                        ") with tag (" + std::to_string(tag) + "): message count (" +
                        std::to_string(total) + ") must equal the receiving tensor's count (" +
                        std::to_string(x.numel()) + ", shape " + shape_to_string(x.shape()) +
                        "). Receive into the shape the sender sends.");
  }
}

}  // namespace colrow
