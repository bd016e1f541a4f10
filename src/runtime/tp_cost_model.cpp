// The tensor-parallel MLP forward's cost model (tp_cost_model.h).
//
// Derivation, per rank, T tokens, width d, R ranks, ffn = 4d:
//   compute: up [T, d] x [d, 4d/R] and down [T, 4d/R] x [4d/R, d]
//            = 2 * (T * d * 4d/R) = 8 T d^2 / R MACs (= 16 T d^2 / R FLOPs)
//            t_compute = 8 T d^2 / (R * lambda_compute)      [MAC/s]
//   comm:    one all-reduce of y [T, d]; a ring moves 2 (R-1)/R * T d floats
//            through each rank, which is what bus bandwidth counts:
//            t_comm = 2 (R-1)/R * T d / lambda_comm           [floats/s]
//   ratio:   t_comm / t_compute = 2 T d / (8 T d^2) * lambda_compute / lambda_comm
//                               = (R-1)/d * lambda_compute / (4 lambda_comm).
// T cancels. With lambda_compute in FLOP/s the factor would be 8, with
// lambda_comm in bytes/s it would be 1 (MAC/s) or 2 (FLOP/s): the 4 of
// DESIGN.md is the MAC/s-and-floats/s convention. (A whole block adds the
// attention projections, 4 T d^2 / R MACs, and a second all-reduce: 3, not 4.)
#include "colrow/runtime/tp_cost_model.h"

#include <cmath>
#include <sstream>
#include <string>

#include "colrow/core/error.h"

namespace colrow {
namespace {

std::string text(double v) {
  std::ostringstream s;
  s << v;
  return s.str();
}

void require_size(const char* name, int64_t value, int64_t least) {
  if (value < least) {
    throw InvalidInputError("[tp-model] " + std::string(name) + " (" + std::to_string(value) +
                            ") must be at least " + std::to_string(least) + ".");
  }
}

void require_rate(const char* name, double value, const char* fix) {
  if (!(value > 0.0) || !std::isfinite(value)) {
    throw InvalidInputError("[tp-model] " + std::string(name) + " (" + text(value) +
                            ") must be positive and finite. " + fix);
  }
}

}  // namespace

double tp_mlp_forward_macs(int64_t tokens, int64_t d_model, int tp) {
  require_size("tokens", tokens, 1);
  require_size("d_model", d_model, 1);
  require_size("tp", tp, 1);
  const double d = static_cast<double>(d_model);
  return 8.0 * static_cast<double>(tokens) * d * d / tp;
}

double ring_all_reduce_floats(int64_t count, int ranks) {
  require_size("count", count, 0);
  require_size("ranks", ranks, 1);
  return 2.0 * (ranks - 1) / ranks * static_cast<double>(count);
}

double predicted_comm_compute_ratio(int tp, int64_t d_model, double lambda_compute_macs,
                                    double lambda_comm_floats) {
  require_size("tp", tp, 1);
  require_size("d_model", d_model, 1);
  require_rate("lambda_compute (MAC/s)", lambda_compute_macs,
               "Measure the GEMM rate of one rank first.");
  if (tp == 1) return 0.0;  // a group of one never communicates
  require_rate("lambda_comm (floats/s)", lambda_comm_floats,
               "Measure all-reduce bus bandwidth over two or more ranks.");
  return (tp - 1.0) / static_cast<double>(d_model) * lambda_compute_macs /
         (4.0 * lambda_comm_floats);
}

double macs_from_flops(double flops_per_second) {
  return flops_per_second / 2.0;
}
double flops_from_macs(double macs_per_second) {
  return macs_per_second * 2.0;
}
double floats_from_bytes(double bytes_per_second) {
  return bytes_per_second / 4.0;
}
double bytes_from_floats(double floats_per_second) {
  return floats_per_second * 4.0;
}

double all_reduce_bus_floats_per_second(int64_t count, int ranks, double seconds) {
  require_rate("seconds", seconds, "Time at least one all-reduce.");
  return ring_all_reduce_floats(count, ranks) / seconds;
}

bool tp_point_counts(const TpProfilePoint& p, double min_share) {
  require_rate("t_compute (s)", p.t_compute, "Time the forward without communication.");
  if (!(p.t_comm >= 0.0) || !std::isfinite(p.t_comm)) {
    throw InvalidInputError("[tp-model] t_comm (" + text(p.t_comm) +
                            ") must be non-negative and finite.");
  }
  if (!(p.predicted_ratio >= 0.0) || !std::isfinite(p.predicted_ratio)) {
    throw InvalidInputError("[tp-model] predicted_ratio (" + text(p.predicted_ratio) +
                            ") must be non-negative and finite.");
  }
  return p.t_comm >= min_share * p.t_compute;
}

bool tp_point_within(const TpProfilePoint& p, double tolerance) {
  tp_point_counts(p);  // validates
  const double measured = p.t_comm / p.t_compute;
  if (measured == 0.0) return p.predicted_ratio == 0.0;
  return std::fabs(p.predicted_ratio / measured - 1.0) <= tolerance;
}

TpAimSummary summarize_tp_aim(const std::vector<TpProfilePoint>& points, double tolerance,
                              double min_share) {
  TpAimSummary s;
  for (const TpProfilePoint& p : points) {
    if (!tp_point_counts(p, min_share)) continue;
    ++s.counted;
    s.within += tp_point_within(p, tolerance);
  }
  return s;
}

}  // namespace colrow
