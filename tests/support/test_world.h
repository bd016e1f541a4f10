// The world communicator of a test binary (size 1 without mpirun).
#pragma once

#include "colrow/dist/communicator.h"

namespace colrow::testing {
Communicator& world();

// Whether the launcher put every rank of the world on one node, as Open MPI
// tells each process (OMPI_COMM_WORLD_LOCAL_SIZE); true without mpirun. A
// source independent of colrow's own node detection, for the tests that
// expect shared memory on one node and Open MPI across nodes (the TCP run of
// the suite places ranks on two network namespaces).
bool world_on_one_node();
}  // namespace colrow::testing
