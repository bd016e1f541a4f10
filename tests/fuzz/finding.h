// A finding: a promise of the code under fuzzing broke. Says which target and
// what on stderr, then aborts, which libFuzzer reports with the input (saved
// under build-fuzz/fuzz-run/<target>/).
#pragma once

#include <cstdio>
#include <cstdlib>

namespace colrow::fuzz {

[[noreturn]] inline void report_finding(const char* target, const char* what,
                                        const char* detail = "") {
  std::fprintf(stderr, "[fuzz] %s: %s%s\n", target, what, detail);
  std::abort();
}

inline void require(const char* target, bool ok, const char* what) {
  if (!ok) report_finding(target, what);
}

}  // namespace colrow::fuzz
