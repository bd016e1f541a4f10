#!/usr/bin/env bash
# colrow's training step in bf16 beside fp32, on the same machine and device,
# interleaved rounds: what mixed precision costs or gains there.
#   bench/compare_dtype.sh                ROUNDS=2 STEPS=8 MODEL=gpt2-byte-small
#   DEVICE=cuda MODEL=gpt2-124m BATCH=16 SEQ=1024 bench/compare_dtype.sh
#   EXTRA="--recompute-activation" adds flags to every colrow run.
# tokens/s = median over steps 3.. of each run (the metrics' tokens_per_s);
# prints each round's fp32 and bf16 figures, their ratio, and its median.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/env.sh
ROUNDS=${ROUNDS:-2}; STEPS=${STEPS:-8}; MODEL=${MODEL:-gpt2-byte-small}
BATCH=${BATCH:-8}; SEQ=${SEQ:-256}; DEVICE=${DEVICE:-cpu}
out=$(mktemp -d); trap 'rm -rf "$out"' EXIT
for r in $(seq "$ROUNDS"); do
  for dtype in fp32 bf16; do
    build/colrow train --model "$MODEL" --batch "$BATCH" --seq-len "$SEQ" --steps "$STEPS" \
      --eval-windows 1 --device "$DEVICE" --dtype "$dtype" --metrics "$out/$dtype.$r.jsonl" ${EXTRA:-} > /dev/null
  done
done
python3 - "$out" "$ROUNDS" <<'PY'
import json, statistics, sys
d, rounds = sys.argv[1], int(sys.argv[2])
def rate(dtype, r):
    steps = [s for s in map(json.loads, open(f"{d}/{dtype}.{r}.jsonl")) if "tokens_per_s" in s]
    return statistics.median(s["tokens_per_s"] for s in steps[2:])
def peak(dtype, r):  # the device's on cuda, the host allocator's on cpu
    steps = [s for s in map(json.loads, open(f"{d}/{dtype}.{r}.jsonl")) if "tokens_per_s" in s]
    return max(s.get("peak_device_mib", s.get("peak_host_tensor_mib", 0.0)) for s in steps)
ratios = []
for r in range(1, rounds + 1):
    f32, bf16 = rate("fp32", r), rate("bf16", r)
    ratios.append(bf16 / f32)
    print(f"round {r}: fp32 {f32:.0f} tokens/s (peak {peak('fp32', r):.0f} MiB), "
          f"bf16 {bf16:.0f} tokens/s (peak {peak('bf16', r):.0f} MiB), bf16 / fp32 {bf16 / f32:.2f}")
print(f"median bf16 / fp32 over {rounds} rounds: {statistics.median(ratios):.2f}")
PY
