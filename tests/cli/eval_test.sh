#!/bin/sh
# colrow eval end to end: a checkpoint saved unsharded gives the same loss at
# tp 1, tp 2, tp 4, tp 2 x dp 2 and with pipeline stages (pp 2, tp 2 x pp 2,
# pp 2 x dp 2); more stages than layers is refused; windows and positions are counted as the
# issue defines them; bad token files fail with one clear line on every rank.
#   eval_test.sh COLROW MPIEXEC MAKE_TEST_CHECKPOINT
set -eu
colrow=$1; mpiexec=$2; maker=$3
dir=$(mktemp -d); trap 'rm -rf "$dir"' EXIT
run() { np=$1; shift; timeout 120 "$mpiexec" -np "$np" --oversubscribe --bind-to none --quiet "$colrow" "$@"; }
field() { python3 -c "import json,sys; print(json.loads(sys.argv[1])[sys.argv[2]])" "$1" "$2"; }

for preset in gpt2-tiny llama-tiny; do
  "$maker" "$preset" "$dir/$preset" "$dir/tokens.bin" 333
  # 333 tokens, T = 16: windows = (333 - 1) / 16 = 20, predicted positions 320.
  base=$(run 1 eval --model "$dir/$preset" --tokens "$dir/tokens.bin" --seq-len 16 --json)
  [ "$(field "$base" tokens)" = 320 ] || { echo "FAIL $preset: tokens $(field "$base" tokens) != 320"; exit 1; }
  [ "$(field "$base" windows)" = 20 ] || { echo "FAIL $preset: windows"; exit 1; }
  for mesh in "2 --tp 2" "4 --tp 4" "4 --tp 2 --dp 2" "2 --tp 1 --dp 2" "2 --pp 2" \
              "4 --tp 2 --pp 2" "4 --pp 2 --dp 2"; do
    np=${mesh%% *}; flags=${mesh#* }
    # shellcheck disable=SC2086
    out=$(run "$np" eval --model "$dir/$preset" --tokens "$dir/tokens.bin" --seq-len 16 --batch 3 --json $flags)
    python3 - "$base" "$out" "$preset $mesh" <<'PY'
import json, math, sys
a, b, what = json.loads(sys.argv[1]), json.loads(sys.argv[2]), sys.argv[3]
# fp32 forward passes summed in different orders: ~1e-6 relative; allow 1e-5.
assert abs(a["loss"] - b["loss"]) <= 1e-5 * a["loss"], (what, a["loss"], b["loss"])
assert a["tokens"] == b["tokens"], (what, a, b)
assert abs(b["perplexity"] - math.exp(b["loss"])) <= 1e-9 * b["perplexity"], (what, b)
print("ok", what, b["loss"])
PY
  done
  # A fresh model predicts close to uniformly: loss near ln(vocab) = ln(256) = 5.545.
  python3 -c "import sys; l=float(sys.argv[1]); assert 5.3 < l < 5.8, l" "$(field "$base" loss)"
done

# Errors: more stages than the 2 layers of gpt2-tiny, on every rank.
err=$(run 3 eval --model "$dir/gpt2-tiny" --tokens "$dir/tokens.bin" --seq-len 16 --pp 3 2>&1 >/dev/null) && { echo "FAIL: pp 3 accepted"; exit 1; }
[ "$(echo "$err" | grep -c '^\[rank [012]/3\] .*pp (3)')" = 3 ] || { echo "FAIL: pp 3: $err"; exit 1; }
# Errors: an id outside the vocabulary names id and position; too short a file.
printf '\001\000\000\001\002\000' > "$dir/bad.bin"   # ids 1, 256, 2
err=$(run 2 eval --model "$dir/gpt2-tiny" --tokens "$dir/bad.bin" --seq-len 1 2>&1 >/dev/null) && { echo "FAIL: bad ids accepted"; exit 1; }
echo "$err" | grep -q "^\[rank 0/2\] \[eval\] token id (256) at position 1 of $dir/bad.bin must be < vocab_size (256)" || { echo "FAIL: $err"; exit 1; }
[ "$(echo "$err" | grep -c '^\[rank [01]/2\] \[eval\] token id (256)')" = 2 ] || { echo "FAIL: not on every rank: $err"; exit 1; }
err=$(run 2 eval --model "$dir/gpt2-tiny" --tokens "$dir/bad.bin" --seq-len 8 2>&1 >/dev/null) && { echo "FAIL: short file accepted"; exit 1; }
echo "$err" | grep -q "fewer than one window of 8" || { echo "FAIL: $err"; exit 1; }
err=$(run 2 eval --model "$dir/nowhere" --tokens "$dir/bad.bin" --seq-len 1 2>&1 >/dev/null) && { echo "FAIL: missing model accepted"; exit 1; }
echo "$err" | grep -q "cannot read $dir/nowhere/config.json" || { echo "FAIL: $err"; exit 1; }
echo "eval_test: all passed"
