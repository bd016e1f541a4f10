// OpenBLAS's load-time environment: kernels and thread pool; restart once when
// something is missing.
#include "colrow/runtime/blas_environment.h"

#include <cblas.h>
#include <dlfcn.h>
#include <unistd.h>

#include <cstdlib>

extern "C" char* openblas_get_corename(void);

namespace colrow {
namespace {

// OpenMP threads sleep at once when a loop ends instead of spinning first, and
// OpenBLAS's threads after 2^4 cycles instead of 2^28 (its minimum; a tenth of
// a second at its default). Measured on 2 cores with the pthreads build,
// `colrow bench mlp --d-model 1024 --tokens 2048`: 360-412 ms without, 345-351
// ms with both, the same as the OpenMP build; `bench decode` 98-100 ms per
// step without, 19.8-19.9 with, 17.2 on the OpenMP build (docs/performance.md).
constexpr const char* kOmpWaitPolicy = "OMP_WAIT_POLICY";
constexpr const char* kPassive = "passive";
constexpr const char* kOpenBlasThreadTimeout = "OPENBLAS_THREAD_TIMEOUT";
constexpr const char* kShortestTimeout = "4";

}  // namespace

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

BlasThreading blas_threading() {
  switch (openblas_get_parallel()) {
    case 0:
      return BlasThreading::kSequential;
    case 2:
      return BlasThreading::kOpenMP;
    default:
      return BlasThreading::kPthreads;
  }
}

const char* to_string(BlasThreading threading) {
  switch (threading) {
    case BlasThreading::kSequential:
      return "sequential";
    case BlasThreading::kPthreads:
      return "pthreads";
    case BlasThreading::kOpenMP:
      return "openmp";
  }
  return "unknown";
}

std::string blas_library_path() {
  Dl_info info{};
  if (dladdr(reinterpret_cast<void*>(&openblas_get_parallel), &info) == 0 || !info.dli_fname) {
    return "";
  }
  return info.dli_fname;
}

std::vector<EnvironmentSetting> blas_environment_changes(
    const std::string& core_name, const std::string& preferred_core, BlasThreading threading,
    const std::function<const char*(const char*)>& getenv) {
  std::vector<EnvironmentSetting> changes;
  if (core_name == "Prescott" && !preferred_core.empty() && !getenv("OPENBLAS_CORETYPE")) {
    changes.push_back({"OPENBLAS_CORETYPE", preferred_core});
  }
  if (threading == BlasThreading::kPthreads) {
    if (!getenv(kOmpWaitPolicy)) changes.push_back({kOmpWaitPolicy, kPassive});
    if (!getenv(kOpenBlasThreadTimeout))
      changes.push_back({kOpenBlasThreadTimeout, kShortestTimeout});
  }
  return changes;
}

void configure_blas_environment(char** argv) {
  const std::vector<EnvironmentSetting> changes = blas_environment_changes(
      blas_core_name(), preferred_blas_core(), blas_threading(),
      [](const char* name) { return static_cast<const char*>(std::getenv(name)); });
  if (changes.empty()) return;  // also after our own restart: everything is set then
  for (const EnvironmentSetting& s : changes) setenv(s.name.c_str(), s.value.c_str(), 1);
  execv("/proc/self/exe", argv);
  // exec failed (no /proc?): carry on as loaded, correct but slower.
}

std::string blas_environment_notice() {
  if (blas_threading() != BlasThreading::kPthreads) return "";
  auto value = [](const char* name) {
    const char* v = std::getenv(name);
    return std::string(name) + "=" + (v ? v : "(unset)");
  };
  const std::string path = blas_library_path();
  return "[blas] note: OpenBLAS is its pthreads build (" + (path.empty() ? "?" : path) +
         "), whose thread pool contends with colrow's OpenMP threads; running with " +
         value(kOmpWaitPolicy) + " " + value(kOpenBlasThreadTimeout) +
         ". The OpenMP build shares one pool: apt-get install libopenblas0-openmp "
         "(colrow looks for it first).";
}

}  // namespace colrow
