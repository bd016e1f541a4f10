// The launches of kernels/cuda/reduce.cu, on the host through the warp
// emulation: the parts' table read where it is (the GPU uploads it); the
// two sum stages reduce through warps and shared memory (launch), the
// division's threads never meet (launch_independent).
#include "support/warp_emulation.h"
// After the emulation, which the kernels' header then uses.
#include "kernels/cuda/reduce_kernels.cuh"

#include <string>
#include <vector>

#include "kernels/cuda/emulated/launches.h"
#include "kernels/cuda/emulated/reduce.h"

namespace colrow::testing::emulated {

namespace rk = kernels::cuda::reduce_kernels;

double sum_of_squares(const std::vector<Tensor>& parts) {
  const rk::PartTable table = rk::part_table(parts);
  if (table.rows.empty()) return 0.0;
  if (!table.device.is_cpu()) {
    throw InternalError("[emulation] sum_of_squares: part " + std::to_string(table.first) +
                        " lives on " + table.device.str() +
                        "; the emulated kernels take host tensors");
  }
  std::vector<double> partial(static_cast<size_t>(table.chunks));
  double result = 0.0;
  emulation::launch(static_cast<unsigned int>(table.chunks), rk::kThreads, 0, [&] {
    rk::square_chunks(table.rows.data(), static_cast<int64_t>(table.rows.size()), partial.data());
  });
  emulation::launch(1, rk::kFinalThreads, 0,
                    [&] { rk::sum_partials(partial.data(), table.chunks, &result); });
  return result;
}

void divide(Tensor& x, float divisor) {
  if (!x.is_contiguous()) {
    throw InternalError("[reduce] divide: x " + shape_to_string(x.shape()) + " must be contiguous");
  }
  require_host("divide", {&x});
  const int64_t n = x.numel();
  if (n == 0) return;
  over_elements(n, rk::kThreads, [&] { rk::divide_elements(x.data(), n, divisor); });
}

}  // namespace colrow::testing::emulated
