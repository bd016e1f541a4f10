// OpenBLAS reads its configuration from the environment once, when it is
// loaded, so colrow sets what is missing and restarts itself once, before MPI
// starts. Two things are configured that way:
// - Kernels. On a CPU newer than the library (Debian 12's OpenBLAS 0.3.21 does
//   not know Emerald Rapids) OpenBLAS falls back to its generic "Prescott" SSE3
//   kernels, about 7x slower than the AVX-512 ones the CPU runs
//   (OPENBLAS_CORETYPE).
// - Its thread pool. colrow's element-wise kernels run on OpenMP. With
//   OpenBLAS's OpenMP build both share one pool (what colrow links). Where the
//   loader finds the pthreads build instead (a distribution's default, e.g.
//   Ubuntu without libopenblas0-openmp), a rank runs two pools, and each
//   pool's idle threads spin on the cores the other one needs; so both are
//   told to sleep when idle (OMP_WAIT_POLICY, OPENBLAS_THREAD_TIMEOUT).
// The user's own setting of any of these variables always wins.
#pragma once

#include <functional>
#include <string>
#include <vector>

namespace colrow {

// The kernel family OpenBLAS chose ("SkylakeX", "Haswell", "Prescott", ...).
std::string blas_core_name();

// The best OPENBLAS_CORETYPE this CPU supports for sgemm, or "" if none is
// better than what OpenBLAS detects on its own.
std::string preferred_blas_core();

// How the loaded OpenBLAS runs its threads.
enum class BlasThreading { kSequential, kPthreads, kOpenMP };
BlasThreading blas_threading();
const char* to_string(BlasThreading threading);

// The file the loaded OpenBLAS came from ("" when unknown).
std::string blas_library_path();

struct EnvironmentSetting {
  std::string name, value;
};

// The variables to set before OpenBLAS loads again, given what it chose on its
// own and what the environment already says (`getenv` returns nullptr for an
// unset variable). Empty when nothing needs to change.
std::vector<EnvironmentSetting> blas_environment_changes(
    const std::string& core_name, const std::string& preferred_core, BlasThreading threading,
    const std::function<const char*(const char*)>& getenv);

// Call first thing in main(), before MPI starts: when blas_environment_changes
// is not empty, sets those variables and re-executes this program (same pid,
// arguments and environment plus those). Returns normally otherwise, or when
// the restart itself fails (then OpenBLAS runs as it loaded: correct, slower).
void configure_blas_environment(char** argv);

// One line for the user when colrow runs with OpenBLAS's pthreads build: what
// it changed and how to get the faster build. "" with any other build.
std::string blas_environment_notice();

}  // namespace colrow
