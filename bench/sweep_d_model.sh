#!/usr/bin/env bash
# Where colrow stands as the GEMMs grow (issue 8's d_model sweep): GPT-2 of
# L layers (12), head_dim 64 and the GPT-2 vocabulary at each d_model of
# D_MODELS (768 1024 1600 2048), every run at the same tokens per step
# (B x T, 16 x 1024), colrow beside PyTorch (bench/torch_gpt2_width.py, the
# GPU peer's model at that width) on the same device, one after the other.
# Prints each run's JSON line, then one table row per width: tokens/s, MFU
# and peak memory of both, and colrow / PyTorch.
#   DEVICE=cuda DTYPE=bf16 PEER_MODE=bf16-compile bench/sweep_d_model.sh [BUILD_DIR]
#   DEVICE=cpu D_MODELS="64 128" L=2 B=2 T=32 STEPS=6 PEER_MODE=fp32 bench/sweep_d_model.sh
# DTYPE: fp32 (TF32 with TF32=1) or bf16; PEER_MODE: the peer's mode (fp32,
# tf32, bf16, bf16-compile) or none. colrow's figure is the median of its
# metrics over steps 3..STEPS; the peer times STEPS steps after 5 warm-up.
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
DEVICE=${DEVICE:-cuda}; DTYPE=${DTYPE:-bf16}; PEER_MODE=${PEER_MODE:-bf16-compile}
D_MODELS=${D_MODELS:-768 1024 1600 2048}; L=${L:-12}; B=${B:-16}; T=${T:-1024}; STEPS=${STEPS:-15}
out=$(mktemp -d); trap 'rm -rf "$out"' EXIT
source scripts/env.sh
tf32=""; [ "${TF32:-0}" = 1 ] && tf32="--tf32"

for d in $D_MODELS; do
  if [ $((d % 64)) -ne 0 ]; then echo "d_model $d: must be a multiple of 64 (head_dim 64)" >&2; exit 2; fi
  mkdir -p "$out/d$d"
  echo "{\"model_type\": \"gpt2\", \"n_layer\": $L, \"n_head\": $((d / 64)), \"n_embd\": $d," \
    "\"vocab_size\": 50257, \"n_positions\": $T}" > "$out/d$d/config.json"
  # shellcheck disable=SC2086
  "$build/colrow" train --model "$out/d$d" ${DATA:+--data "$DATA"} --batch "$B" --seq-len "$T" \
    --steps "$STEPS" --device "$DEVICE" --dtype "$DTYPE" $tf32 --eval-windows 1 \
    --metrics "$out/colrow_$d.jsonl" > "$out/colrow_$d.log"
  if [ "$PEER_MODE" != none ]; then
    C=$d L=$L B=$B T=$T STEPS=$STEPS DEVICE=$DEVICE python3 bench/torch_gpt2_width.py "$PEER_MODE" \
      > "$out/torch_$d.json"
  fi
done

python3 - "$out" "$PEER_MODE" $D_MODELS <<'PY'
import json, os, statistics, sys
out, peer_mode, widths = sys.argv[1], sys.argv[2], [int(w) for w in sys.argv[3:]]
def fmt(x, spec):
    return "-" if x is None else format(x, spec)
rows = []
for d in widths:
    steps = [r for r in map(json.loads, open(f"{out}/colrow_{d}.jsonl")) if "tokens_per_s" in r][2:]
    colrow = dict(engine="colrow", d_model=d, tokens_per_s=statistics.median(r["tokens_per_s"] for r in steps),
                  mfu=statistics.median(r["mfu"] for r in steps) if all("mfu" in r for r in steps) else None,
                  peak_mem_gib=max(r.get("peak_device_mib", r.get("peak_host_tensor_mib", 0.0)) for r in steps) / 1024)
    print(json.dumps(colrow))
    torch = None
    if peer_mode != "none":
        torch = json.loads(open(f"{out}/torch_{d}.json").read().strip().splitlines()[-1])
        print(json.dumps(torch))
    rows.append((d, colrow, torch))
print(f"\n| d_model | colrow tokens/s | colrow MFU | colrow peak GiB | PyTorch ({peer_mode}) tokens/s | PyTorch MFU | PyTorch peak GiB | colrow / PyTorch |")
print("|---|---|---|---|---|---|---|---|")
for d, c, t in rows:
    ratio = c["tokens_per_s"] / t["tokens_per_s"] if t else None
    print(f"| {d} | {c['tokens_per_s']:.0f} | {fmt(c['mfu'] and 100 * c['mfu'], '.1f')} | {c['peak_mem_gib']:.2f} | "
          f"{fmt(t and t['tokens_per_s'], '.0f')} | {fmt(t and t.get('mfu') and 100 * t['mfu'], '.1f')} | "
          f"{fmt(t and t.get('peak_mem_gib'), '.2f')} | {fmt(ratio, '.2f')} |")
PY
