#!/usr/bin/env bash
# What --grad-reduce-dtype bf16 buys on the wire: the dp reduction's two sums
# (all_reduce for ZeRO-0, reduce_scatter for ZeRO-1) in fp32 and on the bf16
# wire, at equal element counts (the bf16 rows move half the bytes),
# interleaved rounds, shared memory and Open MPI side by side.
#   bench/compare_grad_reduce_dtype.sh        NP=2 ROUNDS=3 MIN=262144 MAX=8388608 (elements)
# Prints, per collective, transport and count, the median time over rounds of
# each dtype (bench comm's slowest-rank mean) and fp32 / bf16.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/env.sh
NP=${NP:-2}; ROUNDS=${ROUNDS:-3}; MIN=${MIN:-262144}; MAX=${MAX:-8388608}
out=$(mktemp -d); trap 'rm -rf "$out"' EXIT
for r in $(seq "$ROUNDS"); do
  for dtype in fp32 bf16; do
    bytes=$([ "$dtype" = fp32 ] && echo 4 || echo 2)
    mpirun -np "$NP" --oversubscribe --bind-to none build/colrow bench comm --threads 1 \
      --dtype "$dtype" --ops all_reduce,reduce_scatter --iterations 10 --warmup 2 --step-factor 4 \
      --min-bytes $((MIN * bytes)) --max-bytes $((MAX * bytes)) --json > "$out/$dtype.$r.json"
  done
done
python3 - "$out" "$ROUNDS" "$NP" <<'PY'
import json, statistics, sys
d, rounds, np = sys.argv[1], int(sys.argv[2]), sys.argv[3]
times = {}
for r in range(1, rounds + 1):
    for dtype in ("fp32", "bf16"):
        result = json.load(open(f"{d}/{dtype}.{r}.json"))
        assert result["wrong"] == 0, (dtype, r)
        for row in result["results"]:
            times.setdefault((row["op"], row["comm"], row["count"], dtype), []).append(row["time_us"])
print(f"# {np} ranks, median of {rounds} rounds, microseconds per call")
print(f"{'collective':15} {'comm':5} {'elements':>9} {'fp32':>10} {'bf16':>10} {'fp32/bf16':>9}")
for (op, comm, count, dtype) in sorted(times):
    if dtype != "fp32" or (op, comm, count, "bf16") not in times:
        continue
    f32 = statistics.median(times[(op, comm, count, "fp32")])
    b16 = statistics.median(times[(op, comm, count, "bf16")])
    print(f"{op:15} {comm:5} {count:9d} {f32:10.1f} {b16:10.1f} {f32 / b16:8.2f}x")
PY
