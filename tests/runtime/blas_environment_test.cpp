// What colrow sets in OpenBLAS's environment before restarting: only what is
// missing, never over the user's own settings, nothing with the OpenMP build
// on a CPU OpenBLAS knows.
#include "colrow/runtime/blas_environment.h"

#include <gtest/gtest.h>

#include <map>
#include <string>

namespace colrow {
namespace {

// An environment holding exactly `vars`.
std::function<const char*(const char*)> environment(
    const std::map<std::string, std::string>& vars) {
  return [vars](const char* name) -> const char* {
    const auto it = vars.find(name);
    return it == vars.end() ? nullptr : it->second.c_str();
  };
}

std::map<std::string, std::string> as_map(const std::vector<EnvironmentSetting>& changes) {
  std::map<std::string, std::string> m;
  for (const EnvironmentSetting& s : changes) {
    EXPECT_TRUE(m.emplace(s.name, s.value).second) << s.name << " set twice";
  }
  return m;
}

TEST(BlasEnvironmentTest, OpenMpBuildOnAKnownCpuNeedsNothing) {
  EXPECT_TRUE(
      blas_environment_changes("SkylakeX", "SkylakeX", BlasThreading::kOpenMP, environment({}))
          .empty());
  EXPECT_TRUE(
      blas_environment_changes("Haswell", "", BlasThreading::kSequential, environment({})).empty());
}

TEST(BlasEnvironmentTest, PthreadsBuildPutsBothPoolsToSleepWhenIdle) {
  const auto changes = as_map(
      blas_environment_changes("Haswell", "Haswell", BlasThreading::kPthreads, environment({})));
  EXPECT_EQ(changes, (std::map<std::string, std::string>{{"OMP_WAIT_POLICY", "passive"},
                                                         {"OPENBLAS_THREAD_TIMEOUT", "4"}}));
}

TEST(BlasEnvironmentTest, TheUsersOwnSettingsWin) {
  const auto changes =
      as_map(blas_environment_changes("Haswell", "Haswell", BlasThreading::kPthreads,
                                      environment({{"OMP_WAIT_POLICY", "active"}})));
  EXPECT_EQ(changes, (std::map<std::string, std::string>{{"OPENBLAS_THREAD_TIMEOUT", "4"}}));
  EXPECT_TRUE(blas_environment_changes("Prescott", "SkylakeX", BlasThreading::kPthreads,
                                       environment({{"OMP_WAIT_POLICY", "active"},
                                                    {"OPENBLAS_THREAD_TIMEOUT", "28"},
                                                    {"OPENBLAS_CORETYPE", "Prescott"}}))
                  .empty());
}

TEST(BlasEnvironmentTest, GenericKernelsAreReplacedWhenTheCpuSupportsBetter) {
  EXPECT_EQ(as_map(blas_environment_changes("Prescott", "SkylakeX", BlasThreading::kOpenMP,
                                            environment({}))),
            (std::map<std::string, std::string>{{"OPENBLAS_CORETYPE", "SkylakeX"}}));
  // A CPU with nothing better keeps the generic kernels.
  EXPECT_TRUE(
      blas_environment_changes("Prescott", "", BlasThreading::kOpenMP, environment({})).empty());
  // Both at once: one restart sets all three.
  EXPECT_EQ(
      blas_environment_changes("Prescott", "Haswell", BlasThreading::kPthreads, environment({}))
          .size(),
      3u);
}

TEST(BlasEnvironmentTest, TheLoadedLibraryIsNamed) {
  EXPECT_NE(blas_library_path().find("libopenblas"), std::string::npos) << blas_library_path();
  EXPECT_STRNE(to_string(blas_threading()), "unknown");
}

}  // namespace
}  // namespace colrow
