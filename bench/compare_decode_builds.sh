#!/usr/bin/env bash
# colrow bench decode of two builds (two commits' colrow binaries) in
# alternating rounds on the same machine: what a change to the decode path is
# worth. Prints one line per round, configuration and build: the median ms
# per decoding step and the run's bandwidth floor.
#   bench/compare_decode_builds.sh A_COLROW B_COLROW
#   ROUNDS=2 CONFIGS="1:2:fp32 4:2:fp32 8:2:fp32 8:2:bf16 8:1:fp32" (batch:threads
#   per rank:dtype; 1 thread runs tp 2 on two ranks, else tp 1), PROMPT=128 NEW=32,
#   model gpt2-124m (random weights).
# Build a commit without CUDA for it, e.g. `git worktree add /tmp/a COMMIT &&
# cmake -S /tmp/a -B /tmp/a/build -G Ninja -DCOLROW_CUDA=OFF -DCOLROW_BUILD_TESTS=OFF &&
# cmake --build /tmp/a/build --target colrow`.
set -euo pipefail
cd "$(dirname "$0")/.."
a=${1:?usage: bench/compare_decode_builds.sh A_COLROW B_COLROW}
b=${2:?usage: bench/compare_decode_builds.sh A_COLROW B_COLROW}
source scripts/env.sh
ROUNDS=${ROUNDS:-2}; PROMPT=${PROMPT:-128}; NEW=${NEW:-32}
CONFIGS=${CONFIGS:-1:2:fp32 2:2:fp32 4:2:fp32 8:2:fp32 8:2:bf16 2:1:fp32 4:1:fp32 8:1:fp32}
for round in $(seq "$ROUNDS"); do
  for config in $CONFIGS; do
    IFS=: read -r batch threads dtype <<< "$config"
    for side in A B; do
      bin=$a; [ "$side" = B ] && bin=$b
      args=(bench decode --model gpt2-124m --prompt-len "$PROMPT" --new-tokens "$NEW"
        --batch "$batch" --dtype "$dtype" --json)
      if [ "$threads" = 1 ]; then
        line=$(OMP_NUM_THREADS=1 mpirun --allow-run-as-root -np 2 --bind-to none "$bin" "${args[@]}" | tail -1)
        mesh="tp 2 x 1 thread"
      else
        line=$("$bin" "${args[@]}" --threads "$threads" | tail -1)
        mesh="tp 1 x $threads threads"
      fi
      echo "$line" | python3 -c "import json, sys; d = json.load(sys.stdin); \
print('round %s, %s, batch %s, %s, %s: %.2f ms per step (floor %.2f)' % (sys.argv[1], sys.argv[2], \
sys.argv[3], sys.argv[4], sys.argv[5], d['decode_ms_per_step_median'], d['floor_ms_per_step']))" \
        "$round" "$mesh" "$batch" "$dtype" "$side"
    done
  done
done
