#!/usr/bin/env bash
# What --overlap-grad-reduce and --ddp-bucket-size do to a data-parallel
# training step: the blocking reduction in one bucket (the default) and in
# small buckets, and the overlapped one at two bucket sizes, interleaved per
# round so that the machine's drift falls on every mode alike.
#   bench/compare_grad_overlap.sh      NP=2 ROUNDS=3 MODEL=gpt2-byte-small BATCH=4 SEQ=128 STEPS=16
#                                      BUCKETS="1000000 200000" (elements) EXTRA= (more train flags)
# Prints, per mode, its buckets, the median step_ms of steps 4.. in each round,
# the median over rounds, and its ratio to the default.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/env.sh
NP=${NP:-2}; ROUNDS=${ROUNDS:-3}; MODEL=${MODEL:-gpt2-byte-small}; BATCH=${BATCH:-4}
SEQ=${SEQ:-128}; STEPS=${STEPS:-16}; BUCKETS=${BUCKETS:-"1000000 200000"}; EXTRA=${EXTRA:-}
out=$(mktemp -d); trap 'rm -rf "$out"' EXIT
small=${BUCKETS##* }
modes=("blocking|" "blocking-$small|--ddp-bucket-size $small")
for b in $BUCKETS; do modes+=("overlap-$b|--overlap-grad-reduce --ddp-bucket-size $b"); done
for r in $(seq "$ROUNDS"); do
  for mode in "${modes[@]}"; do
    name=${mode%%|*}; flags=${mode#*|}
    # shellcheck disable=SC2086
    mpirun -np "$NP" --oversubscribe --bind-to none --quiet build/colrow train --model "$MODEL" \
      --dp "$NP" --steps "$STEPS" --batch "$BATCH" --seq-len "$SEQ" $flags $EXTRA \
      --metrics "$out/$name.$r.jsonl" > "$out/$name.$r.log"
  done
done
python3 - "$out" "$ROUNDS" "$NP" "$MODEL" "${modes[@]}" <<'PY'
import json, re, statistics, sys
d, rounds, np, model, modes = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4], sys.argv[5:]
print(f"# {model}, dp {np}, median step_ms of steps 4.. per round, then over rounds")
print(f"{'mode':22} {'buckets':>7} {'rounds':>24} {'median':>8} {'vs default':>10}")
base = None
for mode in modes:
    name = mode.split("|")[0]
    medians = []
    for r in range(1, rounds + 1):
        steps = [json.loads(l) for l in open(f"{d}/{name}.{r}.jsonl")][3:]
        medians.append(statistics.median(s["step_ms"] for s in steps))
    log = open(f"{d}/{name}.1.log").read()
    found = re.search(r"in (\d+) bucket\(s\)", log)
    buckets = found.group(1) if found else "1"
    m = statistics.median(medians)
    base = base or m
    print(f"{name:22} {buckets:>7} {' '.join(f'{x:.1f}' for x in medians):>24} {m:8.1f} {base / m:9.2f}x")
PY
