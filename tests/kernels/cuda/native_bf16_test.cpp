// The CUDA kernels' native bf16 against their own fp32 path on the widened
// values, rounded once, bit for bit (kernels/native_bf16_cases.h: the same
// cases the CPU passes); mixed dtypes refused.
#include <gtest/gtest.h>

#include "kernels/native_bf16_cases.h"
#include "support/gpu.h"

namespace colrow {
namespace {

TEST(NativeBf16Cuda, KernelsAreTheFp32KernelsRoundedOnce) {
  COLROW_REQUIRE_GPU();
  testing::expect_native_bf16_is_fp32_rounded_once(testing::test_gpu());
}

TEST(NativeBf16Cuda, MixedDtypesAreRefused) {
  COLROW_REQUIRE_GPU();
  testing::expect_mixed_dtypes_refused(testing::test_gpu());
}

}  // namespace
}  // namespace colrow
