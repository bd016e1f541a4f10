// Threads per rank. Ranks on one node share its cores, so by default each
// rank uses cores / ranks_on_node threads for BLAS and for colrow's OpenMP
// loops (more would oversubscribe the cores and every rank would slow down).
// --threads, then OMP_NUM_THREADS, override that default, in that order, as
// OpenMP programs and PyTorch read them (torchrun sets OMP_NUM_THREADS=1).
#pragma once

namespace colrow {

// Cores this process may run on (its CPU affinity mask, which mpirun's
// binding narrows), at least 1.
int available_cores();
// The thread count a rank runs with: `requested` (--threads) when it is
// positive, else OMP_NUM_THREADS's first entry when the variable is set, else
// the machine's cores / ranks on this node, at least 1. `requested` outside
// [0, kMaxThreadsPerRank], or a set OMP_NUM_THREADS that is not a count in
// [1, kMaxThreadsPerRank], is a ConfigError.
int threads_per_rank(int requested, int ranks_on_node);
// Sets OpenBLAS's and OpenMP's thread counts.
void set_threads(int threads);
int blas_threads();

// The most threads a rank may ask for (--threads or OMP_NUM_THREADS).
inline constexpr int kMaxThreadsPerRank = 1024;
// --threads' help text, the same on every verb.
inline constexpr const char* kThreadsOptionHelp =
    "Threads per rank (0 = OMP_NUM_THREADS if set, else cores / ranks on this node)";

}  // namespace colrow
