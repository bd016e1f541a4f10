#!/usr/bin/env bash
# GPT-2 124M training, B 16 x T 1024, on one GPU: colrow beside the PyTorch
# peer on the same GPU in the same run, mode by mode. Prints one JSON line per
# run and the ratios colrow / PyTorch.
#   scripts/bench-gpu.sh [BUILD_DIR] [PEER]
#   BUILD_DIR: a CUDA build (default build-cuda)
#   PEER: torch_gpt2_gpu.py (default ../shared/peers/torch_gpt2_gpu.py)
#   MODES="fp32 tf32 bf16" (default "fp32 tf32"): fp32 (TF32 off), --tf32, and
#   --dtype bf16, which runs beside both the peer's bf16 (eager autocast) and
#   bf16-compile (torch.compile), issue 8's benchmark.
#   PEER_MODES="bf16" limits the peer's modes beside colrow's bf16 (default
#   "bf16 bf16-compile"; torch.compile takes a minute or more to compile).
#   Where $OUT is set (the device tool), the logs and metrics stay in
#   $OUT/bench-gpu, so a run cut off by a timeout still brings back what ran.
#   DATA=FILE trains on FILE instead of the default corpus (a GPU machine may
#   not have Debian's jargon-text).
#   ATTENTION=auto|fused|plain picks colrow's attention kernel (default auto:
#   the fused one). EXTRA="..." adds colrow flags (--recompute-activation).
# colrow's figure is the median over steps 6..STEPS (default 15) of its
# metrics file; the peer times 20 steps after 5 warm-up steps.
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build-cuda}
peer=${2:-../shared/peers/torch_gpt2_gpu.py}
steps=${STEPS:-15}
modes=${MODES:-fp32 tf32}
if [ -n "${OUT:-}" ]; then
  out=$OUT/bench-gpu; mkdir -p "$out"
else
  out=$(mktemp -d); trap 'rm -rf "$out"' EXIT
fi
source scripts/env.sh
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader

peer_modes() {  # the peer's modes that colrow's mode runs beside
  case "$1" in
    fp32 | tf32) echo "$1" ;;
    bf16) echo "${PEER_MODES:-bf16 bf16-compile}" ;;
    *) echo "bench-gpu.sh: unknown mode '$1' (fp32, tf32 or bf16)" >&2; exit 2 ;;
  esac
}
for mode in $modes; do
  case "$mode" in
    fp32) flag="" ;;
    tf32) flag="--tf32" ;;
    bf16) flag="--dtype bf16" ;;
  esac
  peers=$(peer_modes "$mode")
  # shellcheck disable=SC2086  # flag and EXTRA are lists of words
  "$build/colrow" train --model gpt2-124m ${DATA:+--data "$DATA"} --batch 16 --seq-len 1024 --steps "$steps" \
    --device cuda $flag ${EXTRA:-} --attention "${ATTENTION:-auto}" --eval-windows 1 \
    --metrics "$out/colrow_$mode.jsonl" > "$out/colrow_$mode.log"
  for p in $peers; do python3 "$peer" "$p" > "$out/torch_$p.json"; done
done

# shellcheck disable=SC2086  # one argument per mode
python3 - "$out" "$steps" $modes <<'PY'
import json, os, statistics, sys
out, steps, modes = sys.argv[1], int(sys.argv[2]), sys.argv[3:]
beside = {"fp32": ["fp32"], "tf32": ["tf32"], "bf16": ["bf16", "bf16-compile"]}
for mode in modes:
    rows = [json.loads(l) for l in open(f"{out}/colrow_{mode}.jsonl")][5:steps]
    colrow = dict(engine="colrow", mode=mode,
                  tokens_per_s=statistics.median(r["tokens_per_s"] for r in rows),
                  mfu=statistics.median(r["mfu"] for r in rows),
                  peak_mem_gib=max(r["peak_device_mib"] for r in rows) / 1024)
    print(json.dumps(colrow))
    for peer_mode in beside[mode]:
        if not os.path.exists(f"{out}/torch_{peer_mode}.json"):
            continue
        torch = json.loads(open(f"{out}/torch_{peer_mode}.json").read().strip().splitlines()[-1])
        print(json.dumps(dict(engine="pytorch", **torch)))
        print(f"{mode}: colrow {colrow['tokens_per_s']:.0f} tok/s (MFU {100 * colrow['mfu']:.1f}%, "
              f"peak {colrow['peak_mem_gib']:.1f} GiB) vs PyTorch {peer_mode} "
              f"{torch['tokens_per_s']:.0f} tok/s (MFU {100 * torch['mfu']:.1f}%, "
              f"peak {torch['peak_mem_gib']:.1f} GiB): "
              f"{colrow['tokens_per_s'] / torch['tokens_per_s']:.2f}x")
PY
