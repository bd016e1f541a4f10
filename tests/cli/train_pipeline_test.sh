#!/bin/sh
# colrow train with pipeline parallelism (tp x pp x dp, 1F1B over 4 micro-batches):
#  - the same loss curve and gradient norms at (tp, pp, dp) = (1,1,1), (1,2,1),
#    (2,2,1), (1,2,2), (1,4,1), with sequence parallelism, and with an uneven
#    --pp-layers split, on a 4-layer GPT-2 (tied embeddings across stages);
#  - stop at step 10 and resume to 20 at (2,2,1) = 20 uninterrupted steps, bitwise;
#  - a checkpoint saved at (2,2,1) loads at (1,1,1), (4,1,1) and (1,2,1) and
#    gives the saving run's validation loss;
#  - every step's metrics carry the measured bubble and 1F1B's ideal one;
#  - bad pipeline configurations fail before training, on every rank.
#   train_pipeline_test.sh COLROW MPIEXEC
set -eu
. "$(dirname "$0")/train_fixture.sh"
write_corpus "$dir/text.txt" 400
write_gpt2_4l "$dir/gpt2-4l"
common="--model $dir/gpt2-4l --data $dir/text.txt --seq-len 32 --lr 3e-3 --eval-windows 8 --steps 20 --grad-accum 4"

run 1 train $common --batch 2 --metrics "$dir/m111.jsonl" > /dev/null
run 2 train $common --batch 2 --pp 2 --metrics "$dir/m121.jsonl" > /dev/null
run 4 train $common --batch 2 --tp 2 --pp 2 --metrics "$dir/m221.jsonl" --out "$dir/run221" > /dev/null
run 4 train $common --batch 1 --pp 2 --dp 2 --metrics "$dir/m122.jsonl" > /dev/null
run 4 train $common --batch 2 --pp 4 --metrics "$dir/m141.jsonl" > /dev/null
run 4 train $common --batch 2 --tp 2 --pp 2 --sequence-parallel --metrics "$dir/m221sp.jsonl" > /dev/null
run 2 train $common --batch 2 --pp 2 --pp-layers 3,1 --metrics "$dir/m121u.jsonl" > /dev/null
run 4 train $common --batch 2 --tp 2 --pp 2 --stop-after 10 --out "$dir/resumed" > /dev/null
run 4 train $common --batch 2 --tp 2 --pp 2 --resume "$dir/resumed" --metrics "$dir/r221.jsonl" > /dev/null
# lr 0: the loaded model unchanged, so its validation loss is the saved model's.
load="--model $dir/gpt2-4l --data $dir/text.txt --seq-len 32 --eval-windows 8 --steps 1 --batch 2 --lr 0 --min-lr 0 --init $dir/run221/latest"
run 1 train $load --metrics "$dir/l111.jsonl" > /dev/null
run 4 train $load --tp 4 --metrics "$dir/l411.jsonl" > /dev/null
run 2 train $load --pp 2 --metrics "$dir/l121.jsonl" > /dev/null

python3 - "$dir" <<'PY'
import json, sys
d = sys.argv[1]
def curve(name):
    return [json.loads(l) for l in open(f"{d}/{name}.jsonl")]
ref = curve("m111")
assert len(ref) == 20 and ref[-1]["loss"] < ref[0]["loss"] - 0.5, ("does not learn", ref[0], ref[-1])
# A pipeline changes only where sums happen: the tied embedding's two gradient
# halves are added after the micro-batches, not inside each backward, and tp/dp
# sum in their own order. Each is ~1e-7 relative in fp32, and Adam keeps such
# differences small over 20 steps (measured <= 1.5e-7), so 1e-6 relative is the
# issue's bound and far below what a wrong stage, a lost micro-batch or a
# missing sum does: without the tied embedding's gradient sum the loss is off
# by 1.9e-3 relative at step 2 and the gradient norm by 4% at step 1 (measured
# at (1,2,1) by leaving the sum out). The gradient norm sums squares in
# another order per mesh; measured <= 1.8e-5 relative, so 1e-4.
for name in ["m121", "m221", "m122", "m141", "m221sp", "m121u"]:
    c = curve(name)
    assert len(c) == 20, name
    for a, b in zip(ref, c):
        assert abs(a["loss"] - b["loss"]) <= 1e-6 * a["loss"], (name, a["step"], a["loss"], b["loss"])
        assert abs(a["grad_norm"] - b["grad_norm"]) <= 1e-4 * a["grad_norm"], (name, a["step"], a["grad_norm"], b["grad_norm"])
    assert abs(ref[-1]["val_loss"] - c[-1]["val_loss"]) <= 1e-6 * ref[-1]["val_loss"], (name, c[-1]["val_loss"])
full, resumed = curve("m221"), curve("r221")
assert [r["step"] for r in resumed] == list(range(11, 21)), [r["step"] for r in resumed]
for a, b in zip(full[10:], resumed):
    assert a["loss"] == b["loss"] and a["grad_norm"] == b["grad_norm"], ("resume is not bitwise", a["step"], a["loss"], b["loss"])
# Every pipeline step reports its measured bubble beside 1F1B's (pp-1)/(m+pp-1);
# a step without pipeline reports none. The measured share depends on timing;
# it is a share (0..1) whatever the machine.
for name, ideal in [("m121", 1 / 5), ("m221", 1 / 5), ("m141", 3 / 7)]:
    for r in curve(name):
        assert abs(r["pipeline_bubble_ideal"] - ideal) < 1e-12, (name, r)
        assert 0.0 <= r["pipeline_bubble"] < 1.0 and r["step_ms"] > 0, (name, r)
assert all("pipeline_bubble" not in r and r["step_ms"] > 0 for r in ref), ref[0]
saved = full[-1]["val_loss"]
for name in ["l111", "l411", "l121"]:
    got = curve(name)[-1]["val_loss"]
    assert abs(got - saved) <= 1e-6 * saved, (name, got, saved)
print("pipeline meshes agree within 1e-6; resume bitwise at tp2 x pp2; the tp2 x pp2 checkpoint loads at tp1, tp4 and pp2")
PY

# Bad pipeline configurations: one clear line on every rank, non-zero exit.
expect_error() {  # pattern np args...
  pattern=$1; shift
  if out=$(run "$@" 2>&1); then echo "expected failure: $*"; exit 1; fi
  echo "$out" | grep -q "$pattern" || { echo "missing '$pattern' in: $out"; exit 1; }
}
expect_error "more stages than the 2 layers" 4 train --model gpt2-tiny --data "$dir/text.txt" --pp 4 --steps 1
expect_error "must list 2 layer counts" 2 train $common --pp 2 --pp-layers 3,2
expect_error "must list 2 layer counts" 2 train $common --pp 2 --pp-layers 0,4
expect_error "must equal the world size" 2 train $common --pp 4
echo "bad pipeline configurations refused"
