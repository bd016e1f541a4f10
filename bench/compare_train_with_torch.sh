#!/usr/bin/env bash
# Training throughput of colrow beside the PyTorch peer's training step
# (../shared/peers/torch_gpt2_step.py), same model shapes, same machine,
# interleaved rounds, medians.
#   bench/compare_train_with_torch.sh [PEERS_DIR]        ROUNDS=3 by default
# Shapes (the peer's): small = 6 layers, 6 heads, d 384, vocab 256, B 8, T 256
# (colrow's gpt2-byte-small); 124M = GPT-2 small, vocab 50257, B 4, T 64.
# colrow: tp 1 (one process, 2 threads) and tp 2 (2 ranks, 1 thread each),
# tokens/s = median over steps 3.. of the step time (forward, backward, AdamW).
# The peer: 2 threads, passive OpenMP waiting, OPENBLAS_CORETYPE as colrow picks.
set -euo pipefail
cd "$(dirname "$0")/.."
peers=${1:-../shared/peers}
source scripts/env.sh
ROUNDS=${ROUNDS:-3}; STEPS=${STEPS:-15}
export OPENBLAS_CORETYPE=${OPENBLAS_CORETYPE:-$(build/colrow bench mlp --d-model 64 --tokens 8 \
  --min-seconds 0 --min-iterations 1 --json | python3 -c 'import json,sys; print(json.load(sys.stdin)["blas_core"])')}
out=$(mktemp -d)
colrow_run() {  # name np tp model batch seq
  local name=$1 np=$2 tp=$3 model=$4 batch=$5 seq=$6
  local launch=(build/colrow); [ "$np" -gt 1 ] && launch=(mpirun -np "$np" build/colrow)
  "${launch[@]}" train --model "$model" --tp "$tp" --batch "$batch" --seq-len "$seq" --steps "$STEPS" \
    --eval-windows 1 --metrics "$out/$name.$r.jsonl" > /dev/null
}
for r in $(seq "$ROUNDS"); do
  colrow_run small-tp1 1 1 gpt2-byte-small 8 256
  colrow_run small-tp2 2 2 gpt2-byte-small 8 256
  OMP_WAIT_POLICY=passive CONFIG=small NTHREADS=2 OPENBLAS_NUM_THREADS=2 /usr/bin/python3 \
    "$peers/torch_gpt2_step.py" | grep '^result' | sed 's/^result //' >> "$out/torch-small.jsonl"
  colrow_run 124m-tp1 1 1 gpt2-124m 4 64
  colrow_run 124m-tp2 2 2 gpt2-124m 4 64
  OMP_WAIT_POLICY=passive CONFIG=124M NTHREADS=2 OPENBLAS_NUM_THREADS=2 /usr/bin/python3 \
    "$peers/torch_gpt2_step.py" | grep '^result' | sed 's/^result //' >> "$out/torch-124M.jsonl"
done
python3 - "$out" "$ROUNDS" <<'PY'
import json, statistics, sys, glob
d, rounds = sys.argv[1], int(sys.argv[2])
med = statistics.median
def colrow(name):
    per_round = []
    for path in sorted(glob.glob(f"{d}/{name}.*.jsonl")):
        rows = [json.loads(l) for l in open(path)][2:]
        per_round.append((med(r["tokens_per_s"] for r in rows), med(r["gflops_per_s"] for r in rows),
                          max(r["peak_rss_mib"] for r in rows)))
    return med(p[0] for p in per_round), med(p[1] for p in per_round), med(p[2] for p in per_round)
def torch(cfg):
    rows = [json.loads(l) for l in open(f"{d}/torch-{cfg}.jsonl")]
    return med(r["tokens_per_s"] for r in rows), med(r["approx_train_gflops"] for r in rows)
print(f"| model | B x T | PyTorch tokens/s (2 threads) | colrow tp 1 tokens/s | colrow tp 2 tokens/s | tp 1 / PyTorch | tp 2 / PyTorch | colrow GFLOP/s per rank (tp 1, tp 2) | peak RSS per rank MiB (tp 1, tp 2) |")
print("|---|---|---|---|---|---|---|---|---|")
for cfg, name, bt in [("small", "small", "8 x 256"), ("124M", "124m", "4 x 64")]:
    pt, _ = torch(cfg)
    t1, g1, m1 = colrow(f"{name}-tp1"); t2, g2, m2 = colrow(f"{name}-tp2")
    print(f"| {cfg} | {bt} | {pt:.0f} | {t1:.0f} | {t2:.0f} | {t1/pt:.2f}x | {t2/pt:.2f}x | {g1:.1f}, {g2:.1f} | {m1:.0f}, {m2:.0f} |")
PY
echo "# raw results in $out (rounds=$ROUNDS, OPENBLAS_CORETYPE=$OPENBLAS_CORETYPE)"
