#!/usr/bin/env bash
# The first thing a new user runs: installs what is missing, builds, then
# checks the tensor-parallel MLP against the unsharded one and times it at
# tp = 2 (two MPI ranks, one core each), beside plain sgemm on the same rank.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/install-deps.sh
./scripts/build.sh
source scripts/env.sh

cat <<'TXT'

== colrow demo: the tensor-parallel MLP at tp = 2 ==
Two MPI ranks each hold half of the MLP's hidden units: c_fc is split by rows
(column-parallel), c_proj by columns (row-parallel). Forward needs one
all-reduce, backward one. colrow first checks the sharded MLP against the
unsharded one (output, input gradient, every weight-gradient shard), then
times it and compares the rate with plain sgemm calls of the same shapes.

TXT
for d in 512 1024; do
  mpirun -np 2 build/colrow bench mlp --d-model "$d" --tokens 2048 --min-seconds 1
  echo
done
cat <<'TXT'
Efficiency near 1.0 means the layer runs at the machine's matrix-multiply
rate: the activations, bias sums and all-reduces cost little beside the GEMMs.
See docs/performance.md for the full table and the PyTorch comparison.
TXT
