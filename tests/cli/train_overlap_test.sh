#!/bin/sh
# colrow train --overlap-grad-reduce: each gradient bucket's dp reduction
# starts during the last backward, while the layers below still compute.
#  - The same losses, gradient norms and validation loss as the blocking
#    reduction, at (tp, pp, dp) = (1,1,2), (2,1,2), (1,2,2) (1F1B: the last
#    micro-batch's backward on each stage reports) and with sequence
#    parallelism, over shared memory and Open MPI (several buckets' collectives
#    in flight at once), at ZeRO-1 and zero 0, with one bucket per block or less
#    (--ddp-bucket-size 20000 on a model of 4 blocks of 49k elements); and
#    on the bf16 wire (--grad-reduce-dtype bf16) over both, whose started
#    sums of two ranks are exact in either order too;
#  - stop at step 5 and resume to 10 with overlap and buckets = 10 steps
#    uninterrupted, bitwise (the moments cross the checkpoint per bucket);
#  - a bucket size below 0 is refused on every rank.
#   train_overlap_test.sh COLROW MPIEXEC
set -eu
. "$(dirname "$0")/train_fixture.sh"
write_corpus "$dir/text.txt" 400
write_gpt2_4l "$dir/gpt2-4l"
common="--model $dir/gpt2-4l --data $dir/text.txt --seq-len 32 --lr 3e-3 --eval-windows 8 --steps 10 --batch 2"
overlap="--overlap-grad-reduce --ddp-bucket-size 20000"

for spec in "2:--dp 2" "2:--dp 2 --comm mpi" "2:--dp 2 --grad-reduce-dtype bf16" \
  "2:--dp 2 --grad-reduce-dtype bf16 --comm mpi" "4:--tp 2 --dp 2" "4:--tp 2 --dp 2 --sequence-parallel" "4:--pp 2 --dp 2 --grad-accum 2"; do
  np=${spec%%:*}; mesh=${spec#*:}
  for zero in 0 1; do
    name=$(echo "$mesh z$zero" | tr -d ' -')
    # shellcheck disable=SC2086
    run $np train $common $mesh --zero $zero --metrics "$dir/$name-blocking.jsonl" > /dev/null
    # shellcheck disable=SC2086
    run $np train $common $mesh --zero $zero $overlap --metrics "$dir/$name-overlap.jsonl" > "$dir/$name.log"
    grep -q "grads reduced during backward in [0-9]* bucket(s)" "$dir/$name.log" ||
      { echo "FAIL: $name: the run does not say it overlaps"; cat "$dir/$name.log"; exit 1; }
  done
done
run 2 train $common --dp 2 $overlap --stop-after 5 --out "$dir/run" > /dev/null
run 2 train $common --dp 2 $overlap --resume "$dir/run" --metrics "$dir/resumed.jsonl" > /dev/null

python3 - "$dir" <<'PY'
import glob, json, os, sys
d = sys.argv[1]
def curve(path):
    return [json.loads(l) for l in open(path)]
names = sorted(os.path.basename(p)[:-len("-blocking.jsonl")] for p in glob.glob(f"{d}/*-blocking.jsonl"))
assert len(names) == 14, names
for name in names:
    blocking, overlap = curve(f"{d}/{name}-blocking.jsonl"), curve(f"{d}/{name}-overlap.jsonl")
    assert len(blocking) == len(overlap) == 10, name
    assert blocking[-1]["loss"] < blocking[0]["loss"] - 0.5, (name, "does not learn")
    for a, b in zip(blocking, overlap):
        # Shared memory sums each element over the ranks in rank order
        # whatever the collective's size, so the buckets' sums are the one
        # bucket's bits (Open MPI at 2 ranks adds one pair: exact too). zero 0: the norm sums the same segments in the same
        # order, so every bit agrees. ZeRO-1: each rank's slice of the norm
        # is cut per bucket, which reorders its double partial sums (~1e-16
        # relative); the fp32 clip factor and the update do not see that.
        if name.endswith("z0"):
            assert a["loss"] == b["loss"] and a["grad_norm"] == b["grad_norm"], (name, a["step"], a, b)
        else:
            assert a["loss"] == b["loss"], (name, a["step"], a["loss"], b["loss"])
            assert abs(a["grad_norm"] - b["grad_norm"]) <= 1e-12 * a["grad_norm"], (name, a["step"])
    assert blocking[-1]["val_loss"] == overlap[-1]["val_loss"], name
full, resumed = curve(f"{d}/dp2z1-overlap.jsonl"), curve(f"{d}/resumed.jsonl")
assert [r["step"] for r in resumed] == list(range(6, 11)), [r["step"] for r in resumed]
for a, b in zip(full[5:], resumed):
    assert a["loss"] == b["loss"] and a["grad_norm"] == b["grad_norm"], ("resume is not bitwise", a["step"])
print("overlapped bucketed reduction = blocking at 5 meshes and on the bf16 wire, zero 0 and 1; resume bitwise")
PY

if out=$(run 2 train $common --dp 2 --ddp-bucket-size -2 2>&1); then echo "FAIL: bucket size -2 accepted"; exit 1; fi
[ "$(echo "$out" | grep -c "ddp_bucket_size (-2) must be")" -eq 2 ] || { echo "FAIL: want one line per rank: $out"; exit 1; }
echo "a negative bucket size refused on every rank"
