#!/bin/sh
# colrow bench decode end to end at tp 1 and 2 on a tiny model: one JSON
# object with every figure positive and the floor derived from the measured
# bandwidth; a context it cannot hold, or a tp that is not the world size,
# fails with one clear line on every rank.
#   bench_decode_test.sh COLROW MPIEXEC
set -eu
colrow=$1; mpiexec=$2
run() { np=$1; shift; timeout 120 "$mpiexec" -np "$np" --oversubscribe --bind-to none --quiet "$colrow" "$@"; }
for np in 1 2; do
  out=$(run "$np" bench decode --model gpt2-tiny --prompt-len 8 --new-tokens 8 --batch 3 --json)
  python3 - "$out" "$np" <<'PY'
import json, sys
r, np = json.loads(sys.argv[1]), int(sys.argv[2])
assert r["tp"] == np and r["batch"] == 3, r
for key in ["prefill_tokens_per_s", "decode_ms_per_step_median", "decode_ms_per_step_start",
            "decode_ms_per_step_end", "read_bandwidth_gb_s", "floor_ms_per_step", "weight_bytes"]:
    assert r[key] > 0, (key, r)
floor = 1e3 * (r["weight_bytes"] + 3 * 12 * r["kv_bytes_per_position"]) / (r["read_bandwidth_gb_s"] * 1e9)
assert abs(floor - r["floor_ms_per_step"]) <= 1e-6 * floor, (floor, r)
print("ok bench decode at tp", np)
PY
done
err=$(run 2 bench decode --model gpt2-tiny --prompt-len 100 --new-tokens 100 2>&1 >/dev/null) && { echo "FAIL: 200 tokens in a 128-token context accepted"; exit 1; }
[ "$(echo "$err" | grep -c 'must fit max_position_embeddings (128)')" = 2 ] || { echo "FAIL: $err"; exit 1; }
err=$(run 2 bench decode --model gpt2-tiny --prompt-len 8 --new-tokens 8 --tp 1 2>&1 >/dev/null) && { echo "FAIL: tp 1 on 2 ranks accepted"; exit 1; }
[ "$(echo "$err" | grep -c 'decode runs one tp group: tp (1) must equal the world size (2)')" = 2 ] || { echo "FAIL: $err"; exit 1; }
echo "bench_decode_test: all passed"
