// Restart with OPENBLAS_CORETYPE when OpenBLAS did not recognize the CPU.
#include "colrow/runtime/blas_kernels.h"

#include <cblas.h>
#include <unistd.h>

#include <cstdlib>

extern "C" char* openblas_get_corename(void);

namespace colrow {

std::string blas_core_name() {
  const char* name = openblas_get_corename();
  return name ? name : "unknown";
}

std::string preferred_blas_core() {
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
      __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq")) {
    return "SkylakeX";  // the AVX-512 sgemm kernels (later cores reuse them for fp32)
  }
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) return "Haswell";
  return "";
}

void select_blas_kernels(char** argv) {
  if (std::getenv("OPENBLAS_CORETYPE") != nullptr) return;  // the user's choice, or our restart
  if (blas_core_name() != "Prescott") return;               // OpenBLAS knew the CPU
  const std::string core = preferred_blas_core();
  if (core.empty()) return;
  setenv("OPENBLAS_CORETYPE", core.c_str(), 1);
  execv("/proc/self/exe", argv);
  // exec failed (no /proc?): carry on with the generic kernels, correct but slow.
}

}  // namespace colrow
