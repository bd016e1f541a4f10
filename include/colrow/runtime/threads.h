// Threads per rank. Ranks on one node share its cores, so each rank uses
// cores / ranks_on_node threads for BLAS and for colrow's OpenMP loops
// (more would oversubscribe the cores and every rank would slow down).
#pragma once

namespace colrow {

// Cores this process may run on (its CPU affinity mask, which mpirun's
// binding narrows), at least 1.
int available_cores();
// Cores of the machine / ranks on this node, at least 1.
int default_threads_per_rank(int ranks_on_node);
// Sets OpenBLAS's and OpenMP's thread counts.
void set_threads(int threads);
int blas_threads();

}  // namespace colrow
