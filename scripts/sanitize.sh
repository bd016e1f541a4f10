#!/usr/bin/env bash
# Builds colrow with AddressSanitizer + UndefinedBehaviorSanitizer into
# build-sanitize/ (CPU only, -O1 -g; warnings not errors there: GCC 12 warns
# falsely under -fsanitize, e.g. maybe-uninitialized in std::regex; the
# Release build keeps -Werror) and runs the test suite under them:
# every single-rank and multi-rank test, the CLI tests included.
#   scripts/sanitize.sh [ctest arguments, e.g. -R generator]
#   scripts/sanitize.sh --ci   builds and runs only the tests labelled
#                              sanitize-ci (tests/CMakeLists.txt says which)
# A memory error, a leak outside Open MPI (tests/sanitize/lsan.supp says why
# those are suppressed) or any undefined behaviour fails the test it happens in.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/install-deps.sh
# Every executable links a dlclose that keeps modules loaded
# (tests/sanitize/keep_loaded_modules.cpp says why).
mkdir -p build-sanitize
c++ -shared -fPIC -O1 -o build-sanitize/libkeep_loaded_modules.so \
  tests/sanitize/keep_loaded_modules.cpp
cmake -S . -B build-sanitize -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O1 -g" -DCOLROW_SANITIZE=ON -DCOLROW_CUDA=OFF \
  -DCOLROW_WERROR=OFF -DCOLROW_TEST_TIMEOUT_SCALE=4 -DCMAKE_EXE_LINKER_FLAGS="-Wl,--no-as-needed -L$PWD/build-sanitize \
  -lkeep_loaded_modules -Wl,-rpath,$PWD/build-sanitize" >/dev/null
if [ "${1:-}" = --ci ]; then
  shift
  cmake --build build-sanitize --target sanitize_ci_tests
  set -- -L sanitize-ci "$@"
else
  cmake --build build-sanitize
fi
source scripts/env.sh
# detect_leaks at exit; abort (not just report) on the first error of either
# sanitizer so that ctest sees a failure; Open MPI's own leaks suppressed.
# fast_unwind_on_malloc=0: whole allocation stacks through libc (which has no
# frame pointers), so that suppressions see the Open MPI frame that allocated.
# allocator_may_return_null=1: an allocation too large returns null as it does
# without ASan, so the tests of colrow's out-of-memory error see that error.
export ASAN_OPTIONS="detect_leaks=1:abort_on_error=1:halt_on_error=1:strict_string_checks=1:detect_stack_use_after_return=1:fast_unwind_on_malloc=0:allocator_may_return_null=1"
export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1"
export LSAN_OPTIONS="suppressions=$PWD/tests/sanitize/lsan.supp:print_suppressions=0"
(cd build-sanitize && ctest --output-on-failure -j "$(nproc)" "$@")
echo "sanitize.sh: all tests passed under ASan + UBSan"
