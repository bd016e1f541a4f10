#!/bin/sh
# colrow with OpenBLAS's pthreads build found first by the loader (as on a
# distribution whose default it is): it restarts itself once with both thread
# pools set to sleep when idle (OMP_WAIT_POLICY=passive,
# OPENBLAS_THREAD_TIMEOUT=4), keeps a variable the user set, says so in one
# line from rank 0 only, and reports the build in bench mlp's JSON. With the
# OpenMP build it links, nothing is said.
#   blas_environment_test.sh COLROW MPIEXEC PTHREADS_BUILD_DIR
set -eu
colrow=$1; mpiexec=$2; pthreads=$3
if [ ! -e "$pthreads/libopenblas.so.0" ]; then
  echo "skipped: no OpenBLAS pthreads build in $pthreads (apt-get install libopenblas0-pthread)"
  exit 77
fi
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT INT TERM
tiny="bench mlp --d-model 64 --tokens 32 --min-seconds 0 --min-iterations 2 --json"

# check NAME EXPECTED_BUILD EXPECTED_NOTICE_LINES [NOTICE_TEXT]: the last run's
# stdout ($work/out) and stderr ($work/err).
check() {
  if ! python3 - "$work/out" "$2" <<'PY'
import json, sys
r = json.loads(open(sys.argv[1]).read())
assert r["blas_threading"] == sys.argv[2], r["blas_threading"]
assert r["verify_relative_error"] < 1e-4, r
PY
  then
    echo "FAIL [$1]: the JSON"; cat "$work/out" "$work/err"; exit 1
  fi
  notes=$(grep -c '^\[blas\] note: ' "$work/err" || true)
  [ "$notes" -eq "$3" ] || { echo "FAIL [$1]: $notes notice line(s), expected $3"; cat "$work/err"; exit 1; }
  if [ "$#" -ge 4 ]; then
    grep -qF -- "$4" "$work/err" || { echo "FAIL [$1]: no '$4' in"; cat "$work/err"; exit 1; }
    grep -qF -- "$pthreads/libopenblas.so.0" "$work/err" || { echo "FAIL [$1]: library not named"; exit 1; }
  fi
  echo "ok [$1]"
}

# shellcheck disable=SC2086  # $tiny is a list of words
env -u OMP_WAIT_POLICY -u OPENBLAS_THREAD_TIMEOUT timeout 60 "$colrow" $tiny >"$work/out" 2>"$work/err"
check openmp-build openmp 0

# shellcheck disable=SC2086
env -u OMP_WAIT_POLICY -u OPENBLAS_THREAD_TIMEOUT LD_LIBRARY_PATH="$pthreads" \
  timeout 60 "$colrow" $tiny >"$work/out" 2>"$work/err"
check pthreads-build pthreads 1 "running with OMP_WAIT_POLICY=passive OPENBLAS_THREAD_TIMEOUT=4"

# shellcheck disable=SC2086
env -u OPENBLAS_THREAD_TIMEOUT LD_LIBRARY_PATH="$pthreads" OMP_WAIT_POLICY=active \
  timeout 60 "$colrow" $tiny >"$work/out" 2>"$work/err"
check users-setting-wins pthreads 1 "running with OMP_WAIT_POLICY=active OPENBLAS_THREAD_TIMEOUT=4"

# Every rank restarts alike; one line for the job, from rank 0.
# shellcheck disable=SC2086
env -u OMP_WAIT_POLICY -u OPENBLAS_THREAD_TIMEOUT LD_LIBRARY_PATH="$pthreads" \
  timeout 60 "$mpiexec" -np 2 -x LD_LIBRARY_PATH --oversubscribe --bind-to none --quiet \
  "$colrow" $tiny >"$work/out" 2>"$work/err"
check pthreads-build-np2 pthreads 1 "running with OMP_WAIT_POLICY=passive OPENBLAS_THREAD_TIMEOUT=4"
echo "blas_environment_test: all checks passed"
