// Exact group sums of partial squares, and the clipping factor (see grad_norm.h).
// Collective: one all_gather over the group.
#include "colrow/train/grad_norm.h"

#include <cmath>
#include <string>

#include "colrow/core/error.h"

namespace colrow {

double sum_over(Communicator& group, double partial) {
  const float hi = static_cast<float>(partial);
  const float lo = static_cast<float>(partial - static_cast<double>(hi));
  Tensor mine = Tensor::from_vector({1, 2}, {hi, lo});
  Tensor all = Tensor::empty({group.size(), 2});
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
