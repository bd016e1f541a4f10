#!/usr/bin/env bash
# colrow's training step with flags A beside flags B, on the same machine and
# device, in interleaved rounds: what an option costs or gains there.
#   A_NAME=kept A="" B_NAME=recomputed B="--recompute-activation" bench/compare_flags.sh
#   ROUNDS=2 STEPS=8 MODEL=gpt2-byte-small BATCH=8 SEQ=256 DEVICE=cpu by default;
#   EXTRA adds flags to every run; BUILD picks the build (default build;
#   build-gpu for a packed one on a GPU machine), A_BUILD and B_BUILD one
#   per side (two commits' builds, the flags alike); NP=2 runs each under
#   mpiexec on 2 ranks (pass the mesh in EXTRA, e.g. EXTRA="--tp 2").
# tokens/s = median over steps 3.. of each run (the metrics' tokens_per_s);
# peak = the largest of the run's peak_device_mib (cuda) or
# peak_host_tensor_mib (cpu). Prints each round's figures, B / A, and the
# median ratio over the rounds.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/env.sh
ROUNDS=${ROUNDS:-2}; STEPS=${STEPS:-8}; MODEL=${MODEL:-gpt2-byte-small}
BATCH=${BATCH:-8}; SEQ=${SEQ:-256}; DEVICE=${DEVICE:-cpu}; BUILD=${BUILD:-build}
A_NAME=${A_NAME:-A}; B_NAME=${B_NAME:-B}; NP=${NP:-1}
A_BUILD=${A_BUILD:-$BUILD}; B_BUILD=${B_BUILD:-$BUILD}
launch=()
[ "$NP" -gt 1 ] && launch=(mpiexec -np "$NP" --oversubscribe --bind-to none)
out=$(mktemp -d); trap 'rm -rf "$out"' EXIT
for r in $(seq "$ROUNDS"); do
  for side in A B; do
    flags=${!side:-}
    build_of=${side}_BUILD
    # shellcheck disable=SC2086  # flags are words
    "${launch[@]}" "${!build_of}/colrow" train --model "$MODEL" --batch "$BATCH" --seq-len "$SEQ" --steps "$STEPS" \
      --eval-windows 1 --device "$DEVICE" --metrics "$out/$side.$r.jsonl" $flags ${EXTRA:-} > /dev/null
  done
done
python3 - "$out" "$ROUNDS" "$A_NAME" "$B_NAME" <<'PY'
import json, statistics, sys
d, rounds, a_name, b_name = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]
def steps(side, r):
    return [s for s in map(json.loads, open(f"{d}/{side}.{r}.jsonl")) if "tokens_per_s" in s]
def rate(side, r):
    return statistics.median(s["tokens_per_s"] for s in steps(side, r)[2:])
def peak(side, r):  # the device's on cuda, the host allocator's on cpu
    return max(s.get("peak_device_mib", s.get("peak_host_tensor_mib", 0.0)) for s in steps(side, r))
ratios = []
for r in range(1, rounds + 1):
    a, b = rate("A", r), rate("B", r)
    ratios.append(b / a)
    print(f"round {r}: {a_name} {a:.0f} tokens/s (peak {peak('A', r):.0f} MiB), "
          f"{b_name} {b:.0f} tokens/s (peak {peak('B', r):.0f} MiB), {b_name} / {a_name} {b / a:.2f}")
print(f"median {b_name} / {a_name} over {rounds} rounds: {statistics.median(ratios):.2f}")
PY
