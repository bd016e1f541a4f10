// The communication/computation cost model of the tensor-parallel MLP forward
// (DESIGN.md: "Comms/compute ratio ~ (R-1)/d_model * lambda_compute /
// (4 lambda_comm)"), the unit conversions it needs and the check that a
// measurement agrees with it. `colrow bench tp-profile` measures; this predicts.
//
// Units (the factor 4 holds only in these):
//   lambda_compute: multiply-adds per second (MAC/s) of one rank's fp32 GEMMs,
//                   = FLOP/s / 2;
//   lambda_comm:    floats per second of all-reduce *bus* bandwidth (nccl-tests'
//                   busbw = count / time * 2(R-1)/R), = bytes/s / 4.
#pragma once

#include <cstdint>
#include <vector>

namespace colrow {

// MACs one rank spends in the MLP forward (gelu, ffn = 4 d_model), shard of R:
// two GEMMs of tokens x d_model x 4 d_model / R each = 8 T d^2 / R (the bias
// and GELU are O(T d / R) and left out). InvalidInputError for sizes < 1.
double tp_mlp_forward_macs(int64_t tokens, int64_t d_model, int tp);

// Floats one rank sends (and receives) in a ring all-reduce of `count` floats
// over `ranks`: a reduce-scatter and an all-gather, (R-1)/R * count each.
// InvalidInputError for count < 0 or ranks < 1.
double ring_all_reduce_floats(int64_t count, int ranks);

// The model's t_comm / t_compute for the MLP forward at tp = R (0 when R = 1:
// nothing to communicate; lambda_comm is then not read and may be 0).
// InvalidInputError for tp < 1, d_model < 1, a non-positive or non-finite lambda.
double predicted_comm_compute_ratio(int tp, int64_t d_model, double lambda_compute_macs,
                                    double lambda_comm_floats);

// Unit conversions (a multiply-add is 2 FLOP; an fp32 float is 4 bytes).
double macs_from_flops(double flops_per_second);
double flops_from_macs(double macs_per_second);
double floats_from_bytes(double bytes_per_second);
double bytes_from_floats(double floats_per_second);
// nccl-tests' bus bandwidth of an all-reduce of `count` floats over `ranks`
// that took `seconds`, in floats/s. 0 at one rank (no traffic).
double all_reduce_bus_floats_per_second(int64_t count, int ranks, double seconds);

// The aim of the experiment: the prediction within `tolerance` (25%) of the
// measurement wherever measured communication is at least `min_share` (5%)
// of computation; points below that share are not counted.
struct TpProfilePoint {
  double t_compute = 0.0;  // seconds, measured
  double t_comm = 0.0;     // seconds, measured
  double predicted_ratio = 0.0;
};

struct TpAimSummary {
  int counted = 0;  // points with t_comm >= min_share * t_compute
  int within = 0;   // of those, |predicted / measured - 1| <= tolerance
  bool holds() const { return within == counted; }
};

constexpr double kTpAimTolerance = 0.25;
constexpr double kTpAimMinShare = 0.05;

// Whether the point counts for the aim (InvalidInputError for times that are
// not positive and finite, or a negative or non-finite predicted ratio).
bool tp_point_counts(const TpProfilePoint& point, double min_share = kTpAimMinShare);
// Whether |predicted / measured - 1| <= tolerance, measured = t_comm / t_compute.
bool tp_point_within(const TpProfilePoint& point, double tolerance = kTpAimTolerance);
TpAimSummary summarize_tp_aim(const std::vector<TpProfilePoint>& points,
                              double tolerance = kTpAimTolerance,
                              double min_share = kTpAimMinShare);

}  // namespace colrow
