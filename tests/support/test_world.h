// The world communicator of a test binary (size 1 without mpirun).
#pragma once

#include "colrow/dist/communicator.h"

namespace colrow::testing {
Communicator& world();
}  // namespace colrow::testing
