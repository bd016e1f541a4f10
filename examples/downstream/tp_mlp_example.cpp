// Uses colrow as a library: a GELU MLP split over every rank of the job
// (tp = world size), one forward and backward on a small batch.
// Run: mpirun -np 2 tp_mlp_example   (or plainly, as one rank)
#include <cstdio>

#include "colrow/dist/mpi_communicator.h"
#include "colrow/dist/process_mesh.h"
#include "colrow/nn/parallel_mlp.h"

int main(int argc, char** argv) {
  colrow::MpiSession mpi(&argc, &argv);
  colrow::ProcessMesh mesh(mpi.world(), /*tp=*/mpi.world().size(), /*pp=*/1, /*dp=*/1);

  colrow::MlpConfig config;
  config.d_model = 64;
  config.ffn_hidden_size = 256;
  colrow::ParallelMLP mlp(mesh.tp(), config);

  const colrow::Tensor x = colrow::Tensor::full({8, 64}, 0.5f);  // [tokens, d_model]
  const colrow::Tensor& y = mlp.forward(x);                      // replicated on every rank
  const colrow::Tensor& dx = mlp.backward(colrow::Tensor::full({8, 64}, 1.0f));
  if (mesh.world().rank() == 0) {
    std::printf("tp=%d: y[0,0] = %.6f, dx[0,0] = %.6f\n", mesh.tp_size(), y(0, 0), dx(0, 0));
  }
  return 0;
}
