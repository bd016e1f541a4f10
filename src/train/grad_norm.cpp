// Exact group sums of partial squares, and the clipping factor (see grad_norm.h).
// Collective: one all_gather over the group.
#include "colrow/train/grad_norm.h"

#include <cmath>
#include <string>

#include "colrow/core/error.h"
#include "colrow/nn/shared_buffer.h"

namespace colrow {

double sum_over(Communicator& group, double partial) {
  const float hi = static_cast<float>(partial);
  const float lo = static_cast<float>(partial - static_cast<double>(hi));
  // Kept: the norm is taken every step, and a warm step allocates nothing.
  Tensor& mine = shared_buffer("grad_norm.partial_sum", {1, 2}, Device::cpu());
  Tensor& all = shared_buffer("grad_norm.partial_sums", {group.size(), 2}, Device::cpu());
  mine.data()[0] = hi;
  mine.data()[1] = lo;
  // [norm] all-gather every rank's partial sum of squares as (hi, lo)
  group.all_gather(mine, all);
  double total = 0.0;
  for (int r = 0; r < group.size(); ++r) {
    total += static_cast<double>(all(r, 0)) + static_cast<double>(all(r, 1));
  }
  return total;
}

double clip_coefficient(double norm, double max_norm) {
  if (max_norm <= 0.0) return 1.0;
  const double coefficient = max_norm / (norm + 1e-6);
  return coefficient < 1.0 ? coefficient : 1.0;
}

}  // namespace colrow
