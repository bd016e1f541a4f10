// Global gradient norm under tp and clipping (torch.nn.utils.clip_grad_norm_,
// Megatron's clip_grad_norm_fp32 with its "param is not tensor-parallel
// duplicate" filter). Collective: one all_gather over tp.
#include "colrow/train/grad_norm.h"

#include <cmath>
#include <string>

#include "colrow/core/error.h"

namespace colrow {

bool counted_on_rank(const ShardSpec& shard, int tp_rank, int tp_size) {
  return shard.first_replica(tp_rank, tp_size);
}

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

namespace {

double sum_of_squares(const Tensor& t) {
  const Tensor c = t.is_contiguous() ? t : t.clone();
  const float* g = c.data();
  double sum = 0.0;
  for (int64_t i = 0; i < c.numel(); ++i) sum += static_cast<double>(g[i]) * g[i];
  return sum;
}

}  // namespace

double global_grad_norm(Communicator& tp, const std::vector<Parameter*>& params) {
  double local = 0.0;
  for (const Parameter* p : params) {
    if (counted_on_rank(p->shard, tp.rank(), tp.size())) local += sum_of_squares(p->grad);
  }
  return std::sqrt(sum_over(tp, local));
}

double clip_coefficient(double norm, double max_norm) {
  if (max_norm <= 0.0) return 1.0;
  const double coefficient = max_norm / (norm + 1e-6);
  return coefficient < 1.0 ? coefficient : 1.0;
}

double clip_grad_norm(Communicator& tp, const std::vector<Parameter*>& params, double max_norm) {
  const double norm = global_grad_norm(tp, params);
  const double coefficient = clip_coefficient(norm, max_norm);
  if (coefficient < 1.0) {
    const float scale = static_cast<float>(coefficient);
    for (Parameter* p : params) {
      Tensor& g = p->grad;
      if (!g.is_contiguous())
        throw InternalError("[grad_norm] " + p->name + ": grad not contiguous");
      float* d = g.data();
      for (int64_t i = 0; i < g.numel(); ++i) d[i] *= scale;
    }
  }
  return norm;
}

}  // namespace colrow
