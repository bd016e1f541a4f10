// bench_common.h.
#include "bench_common.h"

#include <algorithm>
#include <cmath>

#include "colrow/nn/parameter.h"

namespace colrow::apps {

double seconds_since(BenchClock::time_point start) {
  return std::chrono::duration<double>(BenchClock::now() - start).count();
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

double relative_error(const Tensor& a, const Tensor& b) {
  const std::vector<float> va = a.to_vector(), vb = b.to_vector();
  double err = 0.0, scale = 0.0;
  for (size_t i = 0; i < va.size(); ++i) {
    err = std::max(err, std::fabs(static_cast<double>(va[i]) - vb[i]));
    scale = std::max(scale, std::fabs(static_cast<double>(vb[i])));
  }
  return err / std::max(scale, 1e-30);
}

Tensor random_tensor(const Shape& shape, uint64_t seed, const std::string& name) {
  Tensor t = Tensor::empty(shape);
  fill_shard(t, ShardSpec::replicated(shape), Init::normal(1.0f), seed, name);
  return t;
}

}  // namespace colrow::apps
