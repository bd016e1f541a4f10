// make_device_communicator's CPU side, which every build runs: --comm values
// parse (and a bad one is one ConfigError naming the choices), names print
// back, check_comm_kind refuses a transport that cannot carry the device's
// tensors, and a CPU group gets shared memory when it has ranks to share with
// (all on this node here), Open MPI when asked (--comm mpi) or alone. The GPU
// choices are in staged_communicator_test and nccl_communicator_test.
#include "colrow/dist/device_communicator.h"

#include <gtest/gtest.h>

#include "colrow/core/error.h"
#include "colrow/dist/mpi_communicator.h"
#include "dist/shm/shm_communicator.h"
#include "support/test_world.h"

namespace colrow {
namespace {

TEST(DeviceCommunicator, CommKindsParseAndPrint) {
  for (CommKind kind :
       {CommKind::kAuto, CommKind::kMpi, CommKind::kShm, CommKind::kNccl, CommKind::kStaged}) {
    EXPECT_EQ(parse_comm_kind(to_string(kind)), kind);
  }
  try {
    parse_comm_kind("gloo");
    ADD_FAILURE() << "gloo parsed";
  } catch (const ConfigError& e) {
    EXPECT_STREQ(e.what(), "[dist] comm (gloo) must be auto, mpi, shm, nccl or staged.");
  }
}

TEST(DeviceCommunicator, CommKindMustFitTheDevice) {
  for (CommKind kind : {CommKind::kAuto, CommKind::kMpi, CommKind::kShm}) {
    EXPECT_NO_THROW(check_comm_kind(kind, Device::cpu()));
  }
  for (CommKind kind : {CommKind::kAuto, CommKind::kNccl, CommKind::kStaged}) {
    EXPECT_NO_THROW(check_comm_kind(kind, Device::cuda(0)));
  }
  EXPECT_THROW(check_comm_kind(CommKind::kStaged, Device::cpu()), ConfigError);
  try {
    check_comm_kind(CommKind::kNccl, Device::cpu());
    ADD_FAILURE() << "nccl on the cpu accepted";
  } catch (const ConfigError& e) {
    EXPECT_STREQ(e.what(),
                 "[dist] comm (nccl) carries GPU tensors, but device is cpu. "
                 "Use --comm auto, mpi or shm on the CPU.");
  }
  try {
    check_comm_kind(CommKind::kShm, Device::cuda(1));
    ADD_FAILURE() << "shm on a GPU accepted";
  } catch (const ConfigError& e) {
    EXPECT_STREQ(e.what(),
                 "[dist] comm (shm) carries host tensors, but device is cuda:1. "
                 "Use --comm auto, nccl or staged with a GPU.");
  }
  Communicator& world = testing::world();
  EXPECT_THROW(make_device_communicator(world.split(0, world.rank(), "tp"), Device::cpu(),
                                        CommKind::kStaged),
               ConfigError);
}

TEST(DeviceCommunicator, CpuGroupsShareMemoryUnlessAskedOrAlone) {
  Communicator& world = testing::world();
  const bool several = world.size() > 1;
  const bool one_node = testing::world_on_one_node();
  for (CommKind kind : {CommKind::kAuto, CommKind::kShm, CommKind::kMpi}) {
    std::unique_ptr<Communicator> host = world.split(0, world.rank(), "tp");
    if (!one_node && kind == CommKind::kShm) {
      // Across nodes shm is refused by name; auto takes Open MPI.
      EXPECT_THROW(make_device_communicator(std::move(host), Device::cpu(), kind), ConfigError);
      continue;
    }
    Communicator* raw = host.get();
    std::unique_ptr<Communicator> c =
        make_device_communicator(std::move(host), Device::cpu(), kind);
    const bool shared = dynamic_cast<ShmCommunicator*>(c.get()) != nullptr;
    EXPECT_EQ(shared, several && kind != CommKind::kMpi && one_node) << to_string(kind);
    if (!shared) {
      EXPECT_EQ(c.get(), raw) << to_string(kind) << ": the MPI group was wrapped";
    }
    EXPECT_EQ(c->name(), "tp");
    Tensor x = Tensor::full({3}, 1.0f);
    c->all_reduce_sum(x);
    EXPECT_EQ(x.to_vector(), std::vector<float>(3, static_cast<float>(world.size())));
  }
}

}  // namespace
}  // namespace colrow
