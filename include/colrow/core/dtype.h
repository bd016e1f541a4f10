// Element types. Arithmetic is fp32 unless a kernel says otherwise; bf16
// holds mixed precision's compute copies, activations and their gradients,
// KV caches, gradients on the bf16 wire, and half-size exports of weights.
#pragma once

#include <cstdint>
#include <string>

namespace colrow {

enum class DType { kF32, kBF16 };

int64_t dtype_bytes(DType dtype);
// "fp32", "bf16": the names the --dtype flags take.
const char* dtype_name(DType dtype);
// The DType a flag names; ConfigError naming `flag`, the value and the
// choices otherwise.
DType parse_dtype(const std::string& flag, const std::string& name);

}  // namespace colrow
