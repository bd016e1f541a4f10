#!/usr/bin/env bash
# colrow's tensor-parallel MLP beside the PyTorch peer (../shared/peers), same
# shapes, same machine, interleaved so both see the same conditions.
#   bench/compare_mlp_with_torch.sh [PEERS_DIR]
# Environment: SEQS (default "512 2048"), DIMS ("512 1024 2048"), TPS ("1 2"),
# ROUNDS (1; repeat colrow/peer pairs and take each side's median).
# Needs Debian's python3-torch for the peer. The peer gets its best settings:
# passive OpenMP waiting, one BLAS thread per rank at R=2, and the same
# OPENBLAS_CORETYPE colrow selects (it shares OpenBLAS with colrow).
set -euo pipefail
cd "$(dirname "$0")/.."
peers=${1:-../shared/peers}
source scripts/env.sh
SEQS=${SEQS:-"512 2048"}; DIMS=${DIMS:-"512 1024 2048"}; TPS=${TPS:-"1 2"}; ROUNDS=${ROUNDS:-1}
core=$(build/colrow bench mlp --d-model 64 --tokens 8 --min-seconds 0 --min-iterations 1 --json \
       | python3 -c 'import json,sys; print(json.load(sys.stdin)["blas_core"])')
export OPENBLAS_CORETYPE=${OPENBLAS_CORETYPE:-$core}
out=$(mktemp -d)
echo "# OPENBLAS_CORETYPE=$OPENBLAS_CORETYPE, $(nproc) cores, rounds=$ROUNDS"
for r in $(seq "$ROUNDS"); do
  for tp in $TPS; do
    for T in $SEQS; do
      for d in $DIMS; do
        if [ "$tp" = 1 ]; then
          build/colrow bench mlp --d-model "$d" --tokens "$T" --json >> "$out/colrow.jsonl"
        else
          mpirun -np "$tp" build/colrow bench mlp --d-model "$d" --tokens "$T" --json >> "$out/colrow.jsonl"
        fi
        SEQS=$T DIMS=$d bash "$peers/run_torch_tp_mlp.sh" "$tp" | grep '^result' | sed 's/^result //' >> "$out/torch.jsonl"
      done
    done
  done
done
python3 - "$out" <<'PY'
import json, statistics, sys, collections
d = sys.argv[1]
c = collections.defaultdict(list); t = collections.defaultdict(list)
for line in open(f"{d}/colrow.jsonl"):
    j = json.loads(line); c[(j["tp"], j["tokens"], j["d_model"])].append(j)
for line in open(f"{d}/torch.jsonl"):
    j = json.loads(line); t[(j["R"], j["S"], j["d"], j["mode"])].append(j)
med = lambda xs: statistics.median(xs)
print("| tp | tokens | d_model | colrow fwd ms | torch fwd ms | colrow fwd+bwd ms | torch fwd+bwd ms | speed-up fwd+bwd | colrow comm % | torch all-reduce % | colrow GFLOP/s/rank | sgemm GFLOP/s/rank | efficiency |")
print("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
for (tp, T, dm), js in sorted(c.items()):
    tf = t.get((tp, T, dm, "fwd"), []); tb = t.get((tp, T, dm, "fwdbwd"), [])
    cf = med([j["fwd_ms"] for j in js]); cb = med([j["fwdbwd_ms"] for j in js])
    pf = med([j["ms_median"] for j in tf]) if tf else float("nan")
    pb = med([j["ms_median"] for j in tb]) if tb else float("nan")
    par = med([j.get("allreduce_frac_median_rank0", 0.0) for j in tb]) if tb else float("nan")
    print(f"| {tp} | {T} | {dm} | {cf:.1f} | {pf:.1f} | {cb:.1f} | {pb:.1f} | {pb/cb:.2f}x | "
          f"{100*med([j['comm_fraction'] for j in js]):.1f} | {100*par:.1f} | "
          f"{med([j['gflops_per_rank'] for j in js]):.1f} | {med([j['sgemm_gflops_per_rank'] for j in js]):.1f} | "
          f"{med([j['efficiency'] for j in js]):.2f} |")
PY
echo "# raw results in $out"
