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
#include "kernels/cpu/parallel.h"

namespace colrow {
namespace {

constexpr size_t kFlagBytes = 64;  // one busy flag per slot, each on its own cache line
// Control message: {total bytes of the message, offset and bytes of this
// chunk, where the chunk is}. Where: a slot index of the sender, or one of:
constexpr int64_t kInline = -1;  // the chunk follows as an MPI message (no free slot)
constexpr int64_t kEmpty = -2;   // a message of no bytes
using Control = std::array<int64_t, 4>;

size_t flag_region_bytes(int ranks, int slots) {
  return SharedSegment::round_up(static_cast<size_t>(ranks) * slots * kFlagBytes,
                                 SharedSegment::kPage);
}

// A started send: its control messages (which MPI reads until they complete)
// and any inline chunks. The data in slots needs nothing more from the sender.
class MailboxSend final : public PendingCollective {
 public:
  explicit MailboxSend(int64_t chunks) : controls_(static_cast<size_t>(chunks)) {}
  // As MpiPending's: no throwing from a destructor; wait() reports errors.
  ~MailboxSend() override {
    if (!requests_.empty()) {
      MPI_Waitall(static_cast<int>(requests_.size()), requests_.data(), MPI_STATUSES_IGNORE);
    }
  }
  void wait() override {
    if (requests_.empty()) return;
    COLROW_MPI_CHECK(
        MPI_Waitall(static_cast<int>(requests_.size()), requests_.data(), MPI_STATUSES_IGNORE));
    requests_.clear();
  }

  Control& control(int64_t chunk) { return controls_[static_cast<size_t>(chunk)]; }
  void add(MPI_Request request) { requests_.push_back(request); }

 private:
  std::vector<Control> controls_;  // one per chunk, sized once: MPI reads them in place
  std::vector<MPI_Request> requests_;
};

}  // namespace

ShmMailboxes::ShmMailboxes(const MpiCommunicator& host, size_t slot_bytes, int slots)
    : host_(host),
      slot_bytes_(slot_bytes),
      slots_(slots),
      segment_(host.handle(),
               flag_region_bytes(host.size(), slots) +
                   static_cast<size_t>(host.size()) * slots * slot_bytes,
               host.name()) {}

uint64_t* ShmMailboxes::busy_flag(int rank, int index) const {
  return reinterpret_cast<uint64_t*>(segment_.data() +
                                     (static_cast<size_t>(rank) * slots_ + index) * kFlagBytes);
}

std::byte* ShmMailboxes::slot(int rank, int index) const {
  std::byte* slots = segment_.data() + flag_region_bytes(host_.size(), slots_);
  return slots + (static_cast<size_t>(rank) * slots_ + index) * slot_bytes_;
}

int ShmMailboxes::free_slot() const {
  for (int i = 0; i < slots_; ++i) {
    // Acquire: the receiver's reads of the slot are done before it is reused.
    if (__atomic_load_n(busy_flag(host_.rank(), i), __ATOMIC_ACQUIRE) == 0) return i;
  }
  return -1;
}

std::unique_ptr<PendingCollective> ShmMailboxes::start_send(const Tensor& x, int dst, int tag) {
  collective_checks::require_host_contiguous(x, "send", host_.name());
  collective_checks::require_peer_and_tag(dst, "dst", tag, host_.rank(), host_.size(), "send",
                                          host_.name());
  const auto* bytes = static_cast<const std::byte*>(x.raw_data());
  const int64_t total = x.numel() * dtype_bytes(x.dtype());
  const auto chunk = static_cast<int64_t>(slot_bytes_);
  const int64_t chunks = std::max<int64_t>(1, kernels::cpu::ceil_div(total, chunk));
  auto send = std::make_unique<MailboxSend>(chunks);
  for (int64_t c = 0; c < chunks; ++c) {  // one control (and an empty chunk) when total is 0
    const int64_t offset = c * chunk, count = std::min(chunk, total - offset);
    const int index = total == 0 ? -1 : free_slot();
    Control& control = send->control(c);
    control = {total, offset, count, total == 0 ? kEmpty : (index >= 0 ? index : kInline)};
    if (index >= 0) {
      __atomic_store_n(busy_flag(host_.rank(), index), 1, __ATOMIC_RELAXED);
      std::memcpy(slot(host_.rank(), index), bytes + offset, static_cast<size_t>(count));
      std::atomic_thread_fence(std::memory_order_release);  // the data before its control
    }
    MPI_Request request;
    COLROW_MPI_CHECK(MPI_Isend(control.data(), 4, MPI_INT64_T, dst, tag, host_.handle(), &request));
    send->add(request);
    if (control[3] == kInline) {
      COLROW_MPI_CHECK(MPI_Isend(bytes + offset, static_cast<int>(count), MPI_BYTE, dst, tag,
                                 host_.handle(), &request));
      send->add(request);
    }
  }
  return send;
}

void ShmMailboxes::recv(Tensor& x, int src, int tag) {
  collective_checks::require_host_contiguous(x, "recv", host_.name());
  collective_checks::require_peer_and_tag(src, "src", tag, host_.rank(), host_.size(), "recv",
                                          host_.name());
  // Every chunk is taken, even of a message of another count, so that its
  // sender's slots come free; the error follows.
  auto* bytes = static_cast<std::byte*>(x.raw_data());
  const int64_t expected = x.numel() * dtype_bytes(x.dtype());
  int64_t total = -1, received = 0;
  std::vector<std::byte> discard;
  do {
    Control control;
    COLROW_MPI_CHECK(
        MPI_Recv(control.data(), 4, MPI_INT64_T, src, tag, host_.handle(), MPI_STATUS_IGNORE));
    std::atomic_thread_fence(std::memory_order_acquire);  // the data after its control
    total = control[0];
    const int64_t offset = control[1], count = control[2], where = control[3];
    if (where == kEmpty) break;
    if (total != expected) discard.resize(static_cast<size_t>(count));
    std::byte* out = total == expected ? bytes + offset : discard.data();
    if (where == kInline) {
      COLROW_MPI_CHECK(MPI_Recv(out, static_cast<int>(count), MPI_BYTE, src, tag, host_.handle(),
                                MPI_STATUS_IGNORE));
    } else {
      const int index = static_cast<int>(where);
      std::memcpy(out, slot(src, index), static_cast<size_t>(count));
      __atomic_store_n(busy_flag(src, index), 0, __ATOMIC_RELEASE);  // the sender may reuse it
    }
    received += count;
  } while (received < total);
  collective_checks::require_message_bytes(total, x, src, tag, host_.name());
}

}  // namespace colrow
