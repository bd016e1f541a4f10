// Element type sizes and names (include/colrow/core/dtype.h).
#include "colrow/core/dtype.h"

#include "colrow/core/error.h"

namespace colrow {

int64_t dtype_bytes(DType dtype) {
  return dtype == DType::kBF16 ? 2 : 4;
}

const char* dtype_name(DType dtype) {
  return dtype == DType::kBF16 ? "bf16" : "fp32";
}

DType parse_dtype(const std::string& flag, const std::string& name) {
  for (DType d : {DType::kF32, DType::kBF16}) {
    if (name == dtype_name(d)) return d;
  }
  throw ConfigError("[dtype] " + flag + " " + name + " is not a dtype colrow knows: use fp32 or bf16.");
}

}  // namespace colrow
