#!/bin/sh
# `colrow bench mlp --json` on a tiny MLP: at np = 2 (gelu and swiglu) and as a
# plain process (np = 1, no mpiexec), stdout is exactly one JSON object with the
# configuration echoed back, positive timings and rates, a communication share
# in [0, 1], and a verification error below 1e-4 (5e-2 with --dtype bf16, the
# bound bench mlp justifies for bf16). Text mode is checked once too.
# Usage: bench_mlp_test.sh <path-to-colrow> <mpiexec>
set -u

if [ "$#" -ne 2 ]; then
  echo "usage: $0 <path-to-colrow> <mpiexec>" >&2
  exit 2
fi
colrow=$1
mpiexec=$2
limit_s=60  # per run; a hang fails here, well before ctest's timeout

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT INT TERM
failures=0
tiny="--d-model 64 --tokens 32 --min-seconds 0 --min-iterations 2"

fail() {
  echo "FAIL [$case_name]: $*" >&2
  failures=$((failures + 1))
}

show_output() {
  echo "---- stdout of [$case_name] ----" >&2
  cat "$work/out" >&2
  echo "---- stderr of [$case_name] ----" >&2
  cat "$work/err" >&2
  echo "----" >&2
}

# finish_run STATUS: common checks after a run whose output is in $work/out, $work/err.
finish_run() {
  status=$1
  if [ "$status" -eq 124 ] || [ "$status" -eq 137 ]; then
    fail "did not finish within ${limit_s}s"
    show_output
    exit 1
  fi
  [ "$status" -eq 0 ] || fail "exit status $status, expected 0"
}

# check_json TP ACTIVATION DTYPE: stdout is one JSON object describing a verified run.
check_json() {
  lines=$(awk 'END { print NR }' "$work/out")
  [ "$lines" -eq 1 ] || fail "stdout has $lines lines, expected exactly one JSON line"
  if ! python3 - "$work/out" "$1" "$2" "${3:-fp32}" <<'EOF'
import json, math, sys

path, tp, activation, dtype = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]
errors = []
try:
    with open(path) as f:
        result = json.loads(f.read())  # the whole of stdout, nothing around it
except ValueError as e:
    print("stdout is not one JSON value: %s" % e)
    sys.exit(1)
if not isinstance(result, dict):
    print("stdout is JSON but not an object: %r" % (result,))
    sys.exit(1)

def number(key):
    value = result.get(key)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        errors.append("%s is %r, expected a finite number" % (key, value))
        return None
    return value

def expect(key, wanted):
    if result.get(key) != wanted:
        errors.append("%s is %r, expected %r" % (key, result.get(key), wanted))

expect("benchmark", "mlp")
expect("tp", tp)
expect("dp", 1)
expect("d_model", 64)
expect("ffn_hidden_size", 256)
expect("tokens", 32)
expect("activation", activation)
expect("dtype", dtype)
for key in ("fwd_ms", "fwdbwd_ms", "fwd_gflops_per_rank", "gflops_per_rank",
            "sgemm_gflops_per_rank", "efficiency"):
    value = number(key)
    if value is not None and not value > 0:
        errors.append("%s is %r, expected > 0" % (key, value))
gflops, sgemm, efficiency = (result.get(k) for k in
                             ("gflops_per_rank", "sgemm_gflops_per_rank", "efficiency"))
if all(isinstance(v, (int, float)) and v > 0 for v in (gflops, sgemm, efficiency)):
    if abs(efficiency - gflops / sgemm) > 1e-6 * efficiency:
        errors.append("efficiency %r is not gflops_per_rank / sgemm_gflops_per_rank (%r)"
                      % (efficiency, gflops / sgemm))
share = number("comm_fraction")
if share is not None and not (0 <= share <= 1 and (tp == 1 or share > 0)):
    errors.append("comm_fraction is %r, expected within [0, 1] (and > 0 at tp > 1)" % share)
verify = number("verify_relative_error")
bound = 5e-2 if dtype == "bf16" else 1e-4
if verify is not None and not (0 <= verify < bound):
    errors.append("verify_relative_error is %r, expected in [0, %g)" % (verify, bound))
if dtype == "bf16" and verify == 0:
    errors.append("verify_relative_error is 0 in bf16: did the MLP round anything?")
iterations = number("iterations")
if iterations is not None and not (isinstance(iterations, int) and iterations >= 2):
    errors.append("iterations is %r, expected an integer >= --min-iterations (2)" % iterations)
threads = number("threads_per_rank")
if threads is not None and not (isinstance(threads, int) and threads >= 1):
    errors.append("threads_per_rank is %r, expected a positive integer" % threads)
for e in errors:
    print(e)
sys.exit(1 if errors else 0)
EOF
  then
    fail "the JSON result is wrong (see above)"
  fi
}

# run_mpi NAME TP ACTIVATION DTYPE ARGS...: mpiexec -np TP, JSON checked.
run_mpi() {
  case_name=$1
  np=$2
  activation=$3
  dtype=$4
  shift 4
  failures_before=$failures
  # shellcheck disable=SC2086  # $tiny is a list of flags
  timeout "$limit_s" "$mpiexec" -np "$np" --quiet --oversubscribe --bind-to none \
    "$colrow" bench mlp $tiny --json "$@" >"$work/out" 2>"$work/err"
  finish_run $?
  check_json "$np" "$activation" "$dtype"
  if [ "$failures" -ne "$failures_before" ]; then show_output; fi
  echo "[$case_name] $(cat "$work/out")"
}

run_mpi np2-gelu 2 gelu fp32
run_mpi np2-swiglu 2 swiglu fp32 --activation swiglu
run_mpi np2-bf16 2 gelu bf16 --dtype bf16
run_mpi np2-swiglu-bf16 2 swiglu bf16 --activation swiglu --dtype bf16

# np = 1 without mpiexec: MPI starts as a singleton.
case_name=np1-json
failures_before=$failures
# shellcheck disable=SC2086
timeout "$limit_s" "$colrow" bench mlp $tiny --json >"$work/out" 2>"$work/err"
finish_run $?
check_json 1 gelu
if [ "$failures" -ne "$failures_before" ]; then show_output; fi
echo "[$case_name] $(cat "$work/out")"

# Text mode says what it verified.
case_name=np1-text
failures_before=$failures
# shellcheck disable=SC2086
timeout "$limit_s" "$colrow" bench mlp $tiny >"$work/out" 2>"$work/err"
finish_run $?
grep -q "verified against the unsharded MLP" "$work/out" || fail "no verification line in the text report"
if grep -q "^{" "$work/out"; then fail "text mode printed JSON"; fi
if [ "$failures" -ne "$failures_before" ]; then show_output; fi

if [ "$failures" -ne 0 ]; then
  echo "bench_mlp_test: $failures check(s) failed" >&2
  exit 1
fi
echo "bench_mlp_test: all checks passed"
