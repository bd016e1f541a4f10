// OpenBLAS picks its kernels from the CPU model at load time. On a CPU newer
// than the library (Debian 12's OpenBLAS 0.3.21 does not know Emerald Rapids)
// it falls back to the generic "Prescott" SSE3 kernels, about 7x slower than
// the AVX-512 ones the CPU runs. OpenBLAS honours OPENBLAS_CORETYPE, but reads
// it only when it is loaded, so the program must be restarted with it set.
#pragma once

#include <string>

namespace colrow {

// The kernel family OpenBLAS chose ("SkylakeX", "Haswell", "Prescott", ...).
std::string blas_core_name();

// The best OPENBLAS_CORETYPE this CPU supports for sgemm, or "" if none is
// better than what OpenBLAS detects on its own.
std::string preferred_blas_core();

// Call first thing in main(), before MPI starts: when OpenBLAS fell back to
// generic kernels, OPENBLAS_CORETYPE is unset and the CPU supports better,
// re-executes this program (same pid, arguments and environment plus
// OPENBLAS_CORETYPE). Returns normally otherwise. The user's own
// OPENBLAS_CORETYPE always wins.
void select_blas_kernels(char** argv);

}  // namespace colrow
