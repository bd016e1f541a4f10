#!/usr/bin/env bash
# Pipeline against tensor parallelism on this machine's cores (issue 11):
# gpt2-byte-small (6 layers, d 384, vocab 256), micro-batches of 2 x 256
# tokens, m = 2, 4, 8 micro-batches per step (1F1B for pp, accumulation for
# tp), at tp 1 (one process, 2 threads), tp 2 and pp 2 (2 ranks, 1 thread
# each). Interleaved rounds; per run the medians over steps 3.. of tokens/s
# and of the measured bubble, and the largest peak RSS per rank; medians over
# rounds. pp 2 runs twice: with Open MPI's shared-memory transport copying
# through its own buffers (single_copy_mechanism none, what containers
# without ptrace need: a send then progresses only while its sender is inside
# MPI) and with CMA (the receiver reads the sender's memory directly), when
# this machine allows it.
#   bench/compare_pipeline_with_tensor.sh        ROUNDS=3 STEPS=12 by default
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/env.sh
ROUNDS=${ROUNDS:-3}; STEPS=${STEPS:-12}
out=$(mktemp -d)
run() {  # name np copy-mechanism train-flags...
  local name=$1 np=$2 copy=$3; shift 3
  local launch=(build/colrow); [ "$np" -gt 1 ] && launch=(mpirun -np "$np" --bind-to none build/colrow)
  OMPI_MCA_btl_vader_single_copy_mechanism=$copy "${launch[@]}" train --model gpt2-byte-small \
    --seq-len 256 --batch 2 --steps "$STEPS" --eval-windows 1 "$@" \
    --metrics "$out/$name.$r.jsonl" > /dev/null
}
# CMA needs ptrace rights between the ranks; probe with a short pipeline run.
copies="none"
if OMPI_MCA_btl_vader_single_copy_mechanism=cma timeout 60 mpirun -np 2 --bind-to none \
    build/colrow train --model gpt2-byte-small --seq-len 256 --batch 2 --steps 1 --eval-windows 1 \
    --pp 2 > /dev/null 2>&1; then
  copies="none cma"
fi
for r in $(seq "$ROUNDS"); do
  for m in 2 4 8; do
    run "tp1-m$m" 1 none --grad-accum "$m"
    run "tp2-m$m" 2 none --tp 2 --grad-accum "$m"
    for copy in $copies; do run "pp2-$copy-m$m" 2 "$copy" --pp 2 --grad-accum "$m"; done
  done
done
python3 - "$out" "$copies" <<'PY'
import glob, json, statistics, sys
d, copies = sys.argv[1], sys.argv[2].split()
med = statistics.median
def measure(name):
    rounds = []
    for path in sorted(glob.glob(f"{d}/{name}.*.jsonl")):
        rows = [json.loads(l) for l in open(path)][2:]
        rounds.append((med(r["tokens_per_s"] for r in rows),
                       max(max(r["peak_rss_mib_per_rank"]) for r in rows),
                       med(r.get("pipeline_bubble", 0.0) for r in rows),
                       rows[0].get("pipeline_bubble_ideal", 0.0)))
    return tuple(med(x[i] for x in rounds) for i in range(4))
print("| m | tp 1 tokens/s | tp 2 tokens/s | " +
      " | ".join(f"pp 2 ({c}) tokens/s | bubble ({c})" for c in copies) +
      " | bubble 1F1B | pp 2 / tp 2 | peak RSS per rank MiB (tp 1, tp 2, pp 2) |")
print("|---|---|---|" + "---|---|" * len(copies) + "---|---|---|")
for m in (2, 4, 8):
    t1, rss1, _, _ = measure(f"tp1-m{m}")
    t2, rss2, _, _ = measure(f"tp2-m{m}")
    cells, best, rss_pp = [], 0.0, 0.0
    for c in copies:
        tp_, rss_pp, bubble, ideal = measure(f"pp2-{c}-m{m}")
        cells += [f"{tp_:.0f}", f"{100 * bubble:.0f}%"]
        best = max(best, tp_)
    print(f"| {m} | {t1:.0f} | {t2:.0f} | " + " | ".join(cells) +
          f" | {100 * ideal:.0f}% | {best / t2:.2f}x | {rss1:.0f}, {rss2:.0f}, {rss_pp:.0f} |")
PY
echo "# raw metrics in $out (rounds $ROUNDS, steps $STEPS, copy mechanisms: $copies)"
