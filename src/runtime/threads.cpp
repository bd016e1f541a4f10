// Thread counts for OpenBLAS and OpenMP.
#include "colrow/runtime/threads.h"

#include <cblas.h>
#include <omp.h>
#include <sched.h>

#include <algorithm>
#include <cstdlib>
#include <string>
#include <thread>

#include "colrow/core/error.h"

namespace colrow {

int available_cores() {
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof(set), &set) == 0) return std::max(1, CPU_COUNT(&set));
  return std::max(1u, std::thread::hardware_concurrency());
}

namespace {

// OMP_NUM_THREADS's first entry ("8" or the outer level of "8,4"), 0 when
// the variable is unset or empty (libgomp then keeps its own default too).
int omp_num_threads_from_environment() {
  const char* value = std::getenv("OMP_NUM_THREADS");
  if (value == nullptr || *value == '\0') return 0;
  const std::string text(value);
  const std::string first = text.substr(0, text.find(','));
  const bool digits = !first.empty() && first.size() <= 4 &&
                      first.find_first_not_of("0123456789") == std::string::npos;
  const int threads = digits ? std::stoi(first) : 0;
  if (threads < 1 || threads > kMaxThreadsPerRank) {
    throw ConfigError("[threads] OMP_NUM_THREADS (" + text + ") must be a thread count from 1 to " +
                      std::to_string(kMaxThreadsPerRank) +
                      " (or a list such as 8,4, whose first entry is the count). Set it so, " +
                      "unset it (cores / ranks on this node), or pass --threads N.");
  }
  return threads;
}

}  // namespace

int threads_per_rank(int requested, int ranks_on_node) {
  if (requested < 0 || requested > kMaxThreadsPerRank) {
    throw ConfigError("[threads] threads (" + std::to_string(requested) +
                      ") must be 0 (OMP_NUM_THREADS if set, else cores / ranks on this node) " +
                      "or a count up to " + std::to_string(kMaxThreadsPerRank) +
                      ". Pass e.g. --threads 0.");
  }
  if (requested > 0) return requested;
  if (const int from_environment = omp_num_threads_from_environment(); from_environment > 0) {
    return from_environment;
  }
  const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  return std::max(1, cores / std::max(1, ranks_on_node));
}

void set_threads(int threads) {
  openblas_set_num_threads(threads);
  omp_set_num_threads(threads);
}

int blas_threads() {
  return openblas_get_num_threads();
}

}  // namespace colrow
