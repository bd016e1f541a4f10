// Thread counts for OpenBLAS and OpenMP.
#include "colrow/runtime/threads.h"

#include <cblas.h>
#include <omp.h>
#include <sched.h>

#include <algorithm>
#include <thread>

namespace colrow {

int available_cores() {
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof(set), &set) == 0) return std::max(1, CPU_COUNT(&set));
  return std::max(1u, std::thread::hardware_concurrency());
}

int default_threads_per_rank(int ranks_on_node) {
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
