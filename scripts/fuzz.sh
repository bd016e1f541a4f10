#!/usr/bin/env bash
# Builds colrow's libFuzzer targets (tests/fuzz/, clang with ASan + UBSan, CPU
# only, -O1 -g) into build-fuzz/ and runs each for N seconds over a copy of its
# seed corpus (tests/fuzz/corpus/<target>/), one after the other:
#   scripts/fuzz.sh [seconds per target]      (default: $FUZZ_SECONDS, else 30)
#   FUZZ_TARGETS="safetensors_fuzz cli_flags_fuzz" scripts/fuzz.sh 300
# Prints one line per target (executions, corpus size, result) and exits
# non-zero when any target found a crash, a sanitizer report, an uncaught
# exception, a leak, a timeout (an input running past 10 s) or an allocation
# past 2 GB. Each run's log, grown corpus and failing input stay in
# build-fuzz/fuzz-run/<target>/; rerun an input with build-fuzz/tests/fuzz/<target> FILE.
set -euo pipefail
cd "$(dirname "$0")/.."
seconds="${1:-${FUZZ_SECONDS:-30}}"
targets=(${FUZZ_TARGETS:-safetensors_fuzz model_config_fuzz token_file_fuzz vocab_merges_fuzz
  tokenizer_json_fuzz tokenizer_text_fuzz cli_flags_fuzz})
./scripts/install-deps.sh

start=$(date +%s)
cmake -S . -B build-fuzz -G Ninja -DCMAKE_CXX_COMPILER=clang++ -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O1 -g" -DCOLROW_FUZZ=ON -DCOLROW_CUDA=OFF \
  -DCOLROW_BUILD_TESTS=OFF -DCOLROW_WERROR=OFF >/dev/null
cmake --build build-fuzz --target colrow_fuzzers -j "$(nproc)"
echo "fuzz.sh: built in $(($(date +%s) - start)) s"

# Inputs up to 4 KiB (libFuzzer's own default for small seeds, stated here so
# that it stays): every format's structure fits (the largest seeds are 3 KiB),
# and longer inputs only slow each execution. The slowest is
# tokenizer_text_fuzz, which also runs a plain encoder.py bpe() over every
# piece: 25 ms for 4 KiB of "abab...", 0.5 s for 64 KiB.
max_len=4096
export OMP_NUM_THREADS=1
export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1"
failed=0
start=$(date +%s)
for target in "${targets[@]}"; do
  work="build-fuzz/fuzz-run/$target"
  rm -rf "$work"
  mkdir -p "$work/corpus"
  cp tests/fuzz/corpus/"$target"/* "$work/corpus/"
  seeds=$(find "$work/corpus" -type f | wc -l)
  # Each target's dictionary (tests/fuzz/<target>.dict): its format's keywords
  # and edge values, which byte-level mutation alone finds slowly.
  dict=()
  [ -f "tests/fuzz/$target.dict" ] && dict=(-dict="tests/fuzz/$target.dict")
  status=0
  # The outer timeout only guards against a harness that never returns.
  timeout $((seconds + 120)) "build-fuzz/tests/fuzz/$target" -max_total_time="$seconds" \
    -timeout=10 -rss_limit_mb=2048 -max_len="$max_len" -print_final_stats=1 "${dict[@]}" \
    -artifact_prefix="$work/" "$work/corpus" >"$work/log" 2>&1 || status=$?
  executions=$(sed -n 's/^stat::number_of_executed_units: *//p' "$work/log" | tail -1)
  corpus=$(find "$work/corpus" -type f | wc -l)
  artifacts=$(find "$work" -maxdepth 1 -type f \( -name 'crash-*' -o -name 'leak-*' \
    -o -name 'timeout-*' -o -name 'oom-*' \) | sort)
  if [ "$status" -eq 0 ] && [ -z "$artifacts" ]; then
    result="ok"
  else
    result="FAILED (exit $status) ${artifacts:-no input saved}; log $work/log"
    failed=1
  fi
  printf 'fuzz: %-20s %8s executions in %s s, corpus %d -> %d inputs: %s\n' "$target" \
    "${executions:-?}" "$seconds" "$seeds" "$corpus" "$result"
  if [ "$result" != "ok" ]; then
    grep -E -m 12 'ERROR|runtime error|\[fuzz\]|what\(\)|SUMMARY' "$work/log" |
      sed 's/^/  | /' || true
  fi
done
echo "fuzz.sh: ran ${#targets[@]} targets in $(($(date +%s) - start)) s"
if [ "$failed" -ne 0 ]; then
  echo "fuzz.sh: FAILED: a target found a bug (above); reproduce it with" \
    "build-fuzz/tests/fuzz/<target> <input>" >&2
  exit 1
fi
echo "fuzz.sh: all ${#targets[@]} targets ran ${seconds} s each and found nothing"
