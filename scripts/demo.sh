#!/usr/bin/env bash
# The first thing a new user runs: installs what is missing, builds, trains a
# small GPT with tensor parallelism (tp = 2: two MPI ranks, one core each) on
# the Jargon File for about five minutes, then generates text from the saved
# checkpoint. Idempotent; a second run trains afresh into the same directory.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/install-deps.sh
./scripts/build.sh
source scripts/env.sh

run=build/demo-run
STEPS=${STEPS:-2000}
cat <<TXT

== colrow demo: train a byte-level GPT at tp = 2 on the Jargon File ==
Each of the 2 ranks holds half of every attention head group and of every MLP,
and half of the vocabulary's embedding rows; the logits never leave their rank
(the loss needs one small all-gather of four numbers per token). Watch the training loss and the
validation loss fall below the unigram baseline printed first: that is what a
model that ignores context scores. Checkpoints go to $run/latest.

TXT
rm -rf "$run"
mpirun -np 2 build/colrow train --model gpt2-byte-mini --tp 2 --steps "$STEPS" --seq-len 128 \
  --batch 16 --lr 2e-3 --eval-every 250 --save-every 500 --out "$run" --metrics "$run.jsonl"
python3 - "$run.jsonl" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
vals = [r for r in rows if "val_loss" in r]
print(f"\nvalidation loss: {vals[0]['val_loss']:.3f} at step {vals[0]['step']} -> "
      f"{vals[-1]['val_loss']:.3f} at step {vals[-1]['step']} (nats per byte; the unigram "
      f"baseline printed above is what ignoring context gets)")
PY
echo
echo "== sampling from $run/latest (tp = 2) =="
mpirun -np 2 build/colrow generate --model "$run/latest" --tp 2 --prompt "hacker n." \
  --max-new-tokens 300 --temperature 0.8 --top-k 40 --seed 7
echo
echo "metrics per step: $run.jsonl; evaluate with: mpirun -np 2 build/colrow eval --model $run/latest ..."
