// make_device_communicator's CPU side, which every build runs: --comm values
// parse (and a bad one is one ConfigError naming the choices), names print
// back, and for CPU tensors the group's MPI communicator is returned as it is,
// with no placement exchange, so a CPU run is unchanged. The GPU choices are
// in staged_communicator_test and nccl_communicator_test.
#include "colrow/dist/device_communicator.h"

#include <gtest/gtest.h>

#include "colrow/core/error.h"
#include "support/test_world.h"

namespace colrow {
namespace {

TEST(DeviceCommunicator, CommKindsParseAndPrint) {
  for (CommKind kind : {CommKind::kAuto, CommKind::kNccl, CommKind::kStaged}) {
    EXPECT_EQ(parse_comm_kind(to_string(kind)), kind);
  }
  try {
    parse_comm_kind("mpi");
    ADD_FAILURE() << "mpi parsed";
  } catch (const ConfigError& e) {
    EXPECT_STREQ(e.what(), "[dist] comm (mpi) must be auto, nccl or staged.");
  }
}

TEST(DeviceCommunicator, CpuTensorsKeepTheHostGroup) {
  Communicator& world = testing::world();
  for (CommKind kind : {CommKind::kAuto, CommKind::kNccl, CommKind::kStaged}) {
    std::unique_ptr<Communicator> host = world.split(0, world.rank(), "tp");
    Communicator* raw = host.get();
    std::unique_ptr<Communicator> c =
        make_device_communicator(std::move(host), Device::cpu(), kind);
    EXPECT_EQ(c.get(), raw) << to_string(kind) << ": the CPU group was wrapped";
    Tensor x = Tensor::full({3}, 1.0f);
    c->all_reduce_sum(x);
    EXPECT_EQ(x.to_vector(), std::vector<float>(3, static_cast<float>(world.size())));
  }
}

}  // namespace
}  // namespace colrow
