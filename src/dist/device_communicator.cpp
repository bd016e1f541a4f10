// Chooses a group's device communicator (see dist/device_communicator.h).
// Which GPU each rank uses is learned with one all_gather over the MPI group:
// 64-bit hashes of the host name and of the GPU's UUID, each as four 16-bit
// pieces (floats hold integers below 2^24 exactly), and the GPU index. The
// UUID, not the index, says which ranks share a GPU: with a per-rank
// CUDA_VISIBLE_DEVICES every rank's GPU is cuda:0. Every rank sees the same
// table, so every rank makes the same choice or throws the same error.
#include "colrow/dist/device_communicator.h"

#include <unistd.h>

#include <cstdint>
#include <exception>
#include <iostream>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "colrow/core/error.h"
#include "colrow/core/philox.h"
#include "colrow/dist/mpi_communicator.h"
#include "core/device_runtime.h"
#include "dist/nccl/nccl_communicator.h"
#include "dist/shm/shm_communicator.h"
#include "dist/staged/staged_communicator.h"

namespace colrow {
namespace {

constexpr int kHashPieces = 4;                // 16 bits each
constexpr int kFields = 2 * kHashPieces + 1;  // node, GPU UUID, GPU index

constexpr float kUnreadable = -1.0f;  // a hash piece that cannot occur: no host name, or no UUID

struct RankGpu {
  uint64_t node;  // hash of the host name
  uint64_t uuid;  // hash of the GPU's UUID
  int gpu;        // device index in that rank's process
};

void put_hash(uint64_t hash, float* pieces) {
  for (int i = 0; i < kHashPieces; ++i)
    pieces[i] = static_cast<float>((hash >> (16 * i)) & 0xFFFFu);
}

uint64_t read_hash(const float* pieces) {
  uint64_t hash = 0;
  for (int i = 0; i < kHashPieces; ++i) hash |= static_cast<uint64_t>(pieces[i]) << (16 * i);
  return hash;
}

// Every rank's placement, in group rank order. Collective over `host`; a rank
// that cannot read its host name says so in the table, so all ranks throw.
std::vector<RankGpu> gather_placements(Communicator& host, Device device) {
  char name[256] = {};
  const bool named = gethostname(name, sizeof name - 1) == 0;
  // 64-bit FNV-1a, the hash parameter streams use: stable across processes
  // and builds, unlike std::hash.
  Tensor mine = Tensor::empty({1, kFields});
  put_hash(name_stream(name), mine.data());
  if (!named) mine.data()[0] = kUnreadable;
  // A rank that cannot read its GPU's UUID says so in the table too, rather
  // than throwing before the gather that the other ranks wait in.
  std::string uuid_error;
  try {
    put_hash(name_stream(device_runtime::physical_id(device.index)), mine.data() + kHashPieces);
  } catch (const std::exception& e) {
    uuid_error = e.what();
    mine.data()[kHashPieces] = kUnreadable;
  }
  mine.data()[2 * kHashPieces] = static_cast<float>(device.index);
  Tensor all = Tensor::empty({host.size(), kFields});  // [size, 9]
  host.all_gather(mine, all);

  std::vector<RankGpu> placements(host.size());
  for (int r = 0; r < host.size(); ++r) {
    const float* row = all.data() + r * kFields;
    if (row[0] == kUnreadable) {
      throw BackendError("[dist] gethostname failed on rank " + std::to_string(r) + " of " +
                         host.name() + ": cannot tell which ranks share a GPU");
    }
    if (row[kHashPieces] == kUnreadable) {
      throw BackendError("[dist] the UUID of its GPU could not be read on rank " +
                         std::to_string(r) + " of " + host.name() +
                         ": cannot tell which ranks share a GPU" +
                         (uuid_error.empty() ? "" : " (" + uuid_error + ")"));
    }
    placements[r] = {read_hash(row), read_hash(row + kHashPieces),
                     static_cast<int>(row[2 * kHashPieces])};
  }
  return placements;
}

// A GPU used by more than one rank of the group, and those ranks (ascending).
struct SharedGpu {
  int gpu = -1;
  std::vector<int> ranks;  // empty when every rank has a GPU of its own
};

// The shared GPU whose lowest rank is lowest: the same answer on every rank.
SharedGpu first_shared_gpu(const std::vector<RankGpu>& placements) {
  std::map<std::pair<uint64_t, uint64_t>, std::vector<int>> users;
  for (int r = 0; r < static_cast<int>(placements.size()); ++r) {
    users[{placements[r].node, placements[r].uuid}].push_back(r);
  }
  SharedGpu first;
  for (const auto& [where, ranks] : users) {
    if (ranks.size() > 1 && (first.ranks.empty() || ranks[0] < first.ranks[0])) {
      first = {placements[ranks[0]].gpu, ranks};
    }
  }
  return first;
}

std::string rank_list(const std::vector<int>& ranks) {
  std::string text;
  for (size_t i = 0; i < ranks.size(); ++i) {
    if (i > 0) text += i + 1 == ranks.size() ? " and " : ", ";
    text += std::to_string(ranks[i]);
  }
  return text;
}

// The CPU's choice (see make_device_communicator).
std::unique_ptr<Communicator> make_host_communicator(std::unique_ptr<Communicator> host,
                                                     CommKind kind, bool point_to_point) {
  const int mailbox_slots = point_to_point ? ShmMailboxes::kDefaultSlots : 0;
  auto* mpi = dynamic_cast<MpiCommunicator*>(host.get());
  if (kind == CommKind::kMpi || mpi == nullptr || host->size() == 1) return host;
  const bool one_node = group_on_one_node(mpi->handle());
  if (!one_node && kind == CommKind::kShm) {
    throw ConfigError("[dist] comm (shm) over " + host->name() +
                      " needs every rank of the group on one node, but it spans nodes. "
                      "Use --comm auto (shared memory within a node, Open MPI across) or mpi.");
  }
  if (!one_node) return host;
  std::unique_ptr<MpiCommunicator> group(static_cast<MpiCommunicator*>(host.release()));
  try {
    // keeps `group` if it throws (its segments are made before it is taken)
    return std::make_unique<ShmCommunicator>(std::move(group), ShmCommunicator::kDefaultSlotBytes,
                                             mailbox_slots);
  } catch (const BackendError& e) {
    if (kind == CommKind::kShm) throw;  // asked for shared memory: no quiet fallback
    // Every rank of the group failed alike (SharedSegment agrees first).
    if (group->rank() == 0) {
      std::cerr << e.what() << "\n[dist] using Open MPI for " << group->name() << " instead.\n";
    }
    return group;
  }
}

}  // namespace

CommKind parse_comm_kind(const std::string& text) {
  if (text == "auto") return CommKind::kAuto;
  if (text == "mpi") return CommKind::kMpi;
  if (text == "shm") return CommKind::kShm;
  if (text == "nccl") return CommKind::kNccl;
  if (text == "staged") return CommKind::kStaged;
  throw ConfigError("[dist] comm (" + text + ") must be auto, mpi, shm, nccl or staged.");
}

void check_comm_kind(CommKind kind, Device device) {
  const bool host_kind = kind == CommKind::kMpi || kind == CommKind::kShm;
  const bool gpu_kind = kind == CommKind::kNccl || kind == CommKind::kStaged;
  if (device.is_cuda() && host_kind) {
    throw ConfigError("[dist] comm (" + to_string(kind) + ") carries host tensors, but device is " +
                      device.str() + ". Use --comm auto, nccl or staged with a GPU.");
  }
  if (device.is_cpu() && gpu_kind) {
    throw ConfigError("[dist] comm (" + to_string(kind) +
                      ") carries GPU tensors, but device is cpu. "
                      "Use --comm auto, mpi or shm on the CPU.");
  }
}

std::string to_string(CommKind kind) {
  switch (kind) {
    case CommKind::kAuto:
      return "auto";
    case CommKind::kMpi:
      return "mpi";
    case CommKind::kShm:
      return "shm";
    case CommKind::kNccl:
      return "nccl";
    case CommKind::kStaged:
      return "staged";
  }
  return "unknown";
}

std::unique_ptr<Communicator> make_device_communicator(std::unique_ptr<Communicator> host,
                                                       Device device, CommKind kind,
                                                       bool point_to_point, bool side_stream) {
  COLROW_CHECK(host != nullptr, "make_device_communicator needs the group's MPI communicator");
  check_comm_kind(kind, device);
  if (device.is_cpu()) return make_host_communicator(std::move(host), kind, point_to_point);
  if (kind == CommKind::kStaged) {
    return std::make_unique<StagedCommunicator>(std::move(host), device);
  }

  const SharedGpu shared = first_shared_gpu(gather_placements(*host, device));
  if (shared.ranks.empty()) return make_nccl_communicator(std::move(host), device, side_stream);
  if (kind == CommKind::kAuto) {
    return std::make_unique<StagedCommunicator>(std::move(host), device);
  }
  throw ConfigError("[dist] comm (nccl) over " + host->name() +
                    " must give each rank its own GPU, but ranks " + rank_list(shared.ranks) +
                    " share cuda:" + std::to_string(shared.gpu) +
                    " on one node. NCCL 2.28 refuses two ranks on one GPU; use --comm staged.");
}

}  // namespace colrow
