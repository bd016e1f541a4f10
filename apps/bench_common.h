// Helpers the `colrow bench` verbs share: wall-clock seconds, the median of
// timed rounds, a reproducible random input, and the error of one result
// against another.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include "colrow/core/tensor.h"

namespace colrow::apps {

using BenchClock = std::chrono::steady_clock;

double seconds_since(BenchClock::time_point start);

// The median (the mean of the middle two for an even count).
double median(std::vector<double> v);

// max |a - b| / max |b|.
double relative_error(const Tensor& a, const Tensor& b);

// [shape] of N(0, 1), the same on every rank for the same seed and name
// (the TP-invariant fill of nn/parameter.h).
Tensor random_tensor(const Shape& shape, uint64_t seed, const std::string& name);

}  // namespace colrow::apps
