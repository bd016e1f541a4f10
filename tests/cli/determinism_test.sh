#!/bin/sh
# Determinism: the same seed and mesh give the same bits, run to run and at
# 1 or 2 threads per rank. For tp 2, tp 2 with sequence parallelism, dp 2
# (ZeRO-1) and pp 2 (2 micro-batches), two runs at 1 thread and one at 2
# threads per rank must print the same loss and gradient norm at every step
# (the metrics hold doubles at 17 digits) and save byte-identical checkpoints
# (model, both AdamW moments; their per-tensor CRC-32s included). No kernel
# may split a reduction by thread count, no collective may sum in arrival
# order, and nothing may depend on time or addresses.
#   determinism_test.sh COLROW MPIEXEC
set -eu
. "$(dirname "$0")/train_fixture.sh"
write_corpus "$dir/text.txt" 400
common="--model gpt2-tiny --data $dir/text.txt --seq-len 32 --lr 3e-3 --eval-windows 8 --batch 4 --steps 4"

for mesh in "--tp 2" "--tp 2 --sequence-parallel" "--dp 2 --tp 1" "--pp 2 --tp 1 --grad-accum 2"; do
  name=$(echo "$mesh" | tr -d ' -')
  for run_name in a b t2; do
    threads=1; [ $run_name = t2 ] && threads=2
    run 2 train $common $mesh --deterministic --threads $threads --metrics "$dir/$name-$run_name.jsonl" --out "$dir/$name-$run_name" > /dev/null
  done
  python3 - "$dir" "$name" "$mesh" <<'PY'
import json, sys
d, name, mesh = sys.argv[1:]
def steps(run):
    return [(m["step"], m["loss"], m["grad_norm"], m.get("val_loss")) for m in map(json.loads, open(f"{d}/{name}-{run}.jsonl"))]
a = steps("a")
assert len(a) == 4, a
for other in ["b", "t2"]:
    assert steps(other) == a, (mesh, other, steps(other), a)
    for f in ["model.safetensors", "optimizer.exp_avg.safetensors", "optimizer.exp_avg_sq.safetensors"]:
        assert open(f"{d}/{name}-a/latest/{f}", "rb").read() == open(f"{d}/{name}-{other}/latest/{f}", "rb").read(), (mesh, other, f)
print(f"{mesh}: run to run and 1 vs 2 threads per rank: the same bits")
PY
done
echo "determinism_test: all passed"
