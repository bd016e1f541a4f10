#!/usr/bin/env bash
# GPT-2 124M training, B 16 x T 1024, on one GPU: colrow in fp32 (TF32 off) and
# with --tf32, beside the PyTorch peer in fp32 and tf32 on the same GPU in the
# same run. Prints one JSON line per run and the ratios colrow / PyTorch.
#   scripts/bench-gpu.sh [BUILD_DIR] [PEER]
#   BUILD_DIR: a CUDA build (default build-cuda)
#   PEER: torch_gpt2_gpu.py (default ../shared/peers/torch_gpt2_gpu.py)
#   DATA=FILE trains on FILE instead of the default corpus (a GPU machine may
#   not have Debian's jargon-text).
#   ATTENTION=auto|fused|plain picks colrow's attention kernel (default auto:
#   the fused one).
# colrow's figure is the median over steps 6..STEPS (default 15) of its
# metrics file; the peer times 20 steps after 5 warm-up steps.
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build-cuda}
peer=${2:-../shared/peers/torch_gpt2_gpu.py}
steps=${STEPS:-15}
out=$(mktemp -d); trap 'rm -rf "$out"' EXIT
source scripts/env.sh
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader

for mode in fp32 tf32; do
  flag=""; [ "$mode" = tf32 ] && flag="--tf32"
  "$build/colrow" train --model gpt2-124m ${DATA:+--data "$DATA"} --batch 16 --seq-len 1024 --steps "$steps" \
    --device cuda $flag --attention "${ATTENTION:-auto}" --eval-windows 1 --metrics "$out/colrow_$mode.jsonl" > "$out/colrow_$mode.log"
  python3 "$peer" "$mode" > "$out/torch_$mode.json"
done

python3 - "$out" "$steps" <<'PY'
import json, statistics, sys
out, steps = sys.argv[1], int(sys.argv[2])
for mode in ["fp32", "tf32"]:
    rows = [json.loads(l) for l in open(f"{out}/colrow_{mode}.jsonl")][5:steps]
    colrow = dict(engine="colrow", mode=mode,
                  tokens_per_s=statistics.median(r["tokens_per_s"] for r in rows),
                  mfu=statistics.median(r["mfu"] for r in rows),
                  peak_mem_gib=max(r["peak_device_mib"] for r in rows) / 1024)
    torch = json.loads(open(f"{out}/torch_{mode}.json").read().strip().splitlines()[-1])
    print(json.dumps(colrow))
    print(json.dumps(dict(engine="pytorch", **torch)))
    print(f"{mode}: colrow {colrow['tokens_per_s']:.0f} tok/s (MFU {100 * colrow['mfu']:.1f}%, "
          f"peak {colrow['peak_mem_gib']:.1f} GiB) vs PyTorch {torch['tokens_per_s']:.0f} tok/s "
          f"(MFU {100 * torch['mfu']:.1f}%, peak {torch['peak_mem_gib']:.1f} GiB): "
          f"{colrow['tokens_per_s'] / torch['tokens_per_s']:.2f}x")
PY
