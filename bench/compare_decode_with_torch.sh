#!/bin/bash
# Decoding speed of colrow (tp 1 and tp 2) beside the PyTorch peer with a KV
# cache (../shared/peers/torch_gpt2_decode.py), run interleaved per
# (batch, new tokens): GPT-2 124M shape, prompt 128, greedy. Prints one JSON
# line per colrow run and the peer's "result" line. Needs build/colrow and
# Debian's python3-torch (/usr/bin/python3). Results: docs/performance.md.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/env.sh
peer=${PEER:-../shared/peers/torch_gpt2_decode.py}
for cfg in "1 128" "1 512" "8 128" "8 512"; do
  set -- $cfg
  batch=$1 new=$2
  echo "== batch $batch, new tokens $new"
  build/colrow bench decode --model gpt2-124m --prompt-len 128 --new-tokens "$new" \
    --batch "$batch" --json | tail -1
  OMP_NUM_THREADS=1 mpirun -np 2 --bind-to none build/colrow bench decode --model gpt2-124m \
    --prompt-len 128 --new-tokens "$new" --batch "$batch" --json | tail -1
  P=128 N=$new B=$batch NTHREADS=2 OMP_WAIT_POLICY=passive /usr/bin/python3 "$peer" | grep result
done
