// One main for every test binary: MPI up before the tests, down after. Under
// mpirun every rank runs every test; only rank 0 prints progress, every rank
// prints its failures, and the exit status is non-zero if any rank failed.
#include <gtest/gtest.h>
#include <mpi.h>

#include <cstdio>
#include <cstdlib>
#include <string>

#include "colrow/dist/mpi_communicator.h"
#include "support/test_world.h"

namespace colrow::testing {
namespace {
MpiSession* g_session = nullptr;

// On ranks other than 0: print failed assertions only, tagged with the rank.
class FailurePrinter : public ::testing::EmptyTestEventListener {
 public:
  explicit FailurePrinter(int rank) : rank_(rank) {}
  void OnTestPartResult(const ::testing::TestPartResult& result) override {
    if (!result.failed()) return;
    std::fprintf(stderr, "[rank %d] %s:%d: Failure\n%s\n", rank_,
                 result.file_name() ? result.file_name() : "?", result.line_number(),
                 result.message());
  }

 private:
  int rank_;
};
}  // namespace
Communicator& world() {
  return g_session->world();
}

bool world_on_one_node() {
  const char* local = std::getenv("OMPI_COMM_WORLD_LOCAL_SIZE");
  const char* all = std::getenv("OMPI_COMM_WORLD_SIZE");
  return local == nullptr || all == nullptr || std::string(local) == all;
}
}  // namespace colrow::testing

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  colrow::MpiSession session(&argc, &argv);
  colrow::testing::g_session = &session;
  if (session.world().rank() != 0) {
    // Keep failures visible on every rank, drop the per-test chatter.
    auto& listeners = ::testing::UnitTest::GetInstance()->listeners();
    delete listeners.Release(listeners.default_result_printer());
    listeners.Append(new colrow::testing::FailurePrinter(session.world().rank()));
  }
  int failed = RUN_ALL_TESTS();
  // Agree on the outcome so every rank exits with the same status.
  MPI_Allreduce(MPI_IN_PLACE, &failed, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  if (failed && session.world().rank() != 0) {
    std::fprintf(stderr, "[rank %d] some tests failed\n", session.world().rank());
  }
  return failed;
}
