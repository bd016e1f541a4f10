// Transpose flags of a GEMM operand, shared by every backend.
#pragma once

namespace colrow::kernels {

enum class Trans { kNo, kYes };

}  // namespace colrow::kernels
