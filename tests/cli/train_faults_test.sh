#!/bin/sh
# Faults injected into colrow train (COLROW_INJECT_FAULT, include/colrow/
# train/injected_faults.h) at tp 2 on a small text file:
#  - kill -9 of one rank mid-step: the job ends within 10 s, `latest` loads
#    and resumes, and the resumed run's losses equal an uninterrupted run's;
#  - kill -9 of one rank mid-save: the previous checkpoint stays `latest`,
#    and the next save reuses or removes the step-N.tmp left behind;
#  - one rank failing alone while the others wait in a collective: the job
#    ends within 10 s with that rank's message;
#  - a NaN or Inf in one rank's gradient (also at pp 2): every rank stops at
#    that step with one message, or with --skip-nonfinite skips it (the
#    weights and moments stay as they were), counting the skips;
#  - a full disk during a save (a small tmpfs in a private mount namespace):
#    one clear error, `latest` intact, no partial step directory, training
#    stopped;
#  - a byte flipped in model.safetensors or an optimizer file: eval and
#    resume refuse it on every rank, naming the tensor (per-tensor CRC-32);
#  - a bad COLROW_INJECT_FAULT is refused on every rank.
#   train_faults_test.sh COLROW MPIEXEC
set -eu
colrow=$1; mpiexec=$2
dir=$(mktemp -d); trap 'rm -rf "$dir"' EXIT
# run NP FAULT ARGS...: colrow under mpiexec with COLROW_INJECT_FAULT=FAULT on every rank.
run() {
  np=$1; fault=$2; shift 2
  COLROW_INJECT_FAULT=$fault timeout 300 "$mpiexec" -x COLROW_INJECT_FAULT -np "$np" \
    --oversubscribe --bind-to none --quiet "$colrow" "$@"
}
now() { date +%s.%N; }
i=0; while [ $i -lt 400 ]; do echo "line $i: the quick brown fox jumps over the lazy dog; tensor parallel ranks agree."; i=$((i+1)); done > "$dir/text.txt"
python3 -c "import struct,sys; open(sys.argv[1],'wb').write(struct.pack('<64H', *[i % 256 for i in range(64)]))" "$dir/tokens.bin"
common="--model gpt2-tiny --data $dir/text.txt --seq-len 32 --lr 3e-3 --eval-windows 8 --batch 4"
step_of() { python3 -c "import json,sys; print(json.load(open(sys.argv[1]))['step'])" "$1/latest/train_state.json"; }

# run_killed NAME NP FAULT ARGS...: runs in the background, waits for the
# injected SIGKILL's line, then for the job to end; prints the seconds between.
run_killed() {
  name=$1; shift
  run "$@" > "$dir/$name.out" 2> "$dir/$name.err" &
  pid=$!
  n=0; until grep -q "SIGKILL" "$dir/$name.err" 2>/dev/null; do
    n=$((n+1)); [ $n -lt 1200 ] || { echo "FAIL: $name: the fault never fired"; cat "$dir/$name.err"; exit 1; }
    sleep 0.1
  done
  t0=$(now)
  if wait $pid; then echo "FAIL: $name: a killed job exited 0"; exit 1; fi
  python3 -c "import sys; print('%.1f' % (float(sys.argv[2]) - float(sys.argv[1])))" "$t0" "$(now)"
}
within_10s() { python3 -c "import sys; sys.exit(0 if float(sys.argv[1]) <= 10 else 1)" "$1"; }

# ---- kill -9 of rank 1 in step 3, after its backward pass: rank 0 waits in the optimizer's all-reduce.
took=$(run_killed step 2 kill-in-step@3:1 train $common --tp 2 --steps 6 --save-every 1 --out "$dir/step" --metrics "$dir/step.jsonl")
within_10s "$took" || { echo "FAIL: the job took $took s to end after a rank was killed mid-step"; exit 1; }
[ "$(step_of "$dir/step")" = 2 ] || { echo "FAIL: latest is not step 2 after a kill in step 3"; exit 1; }
run 1 "" eval --model "$dir/step/latest" --tokens "$dir/tokens.bin" --seq-len 16 > /dev/null
run 2 "" train $common --tp 2 --steps 6 --out "$dir/step" --resume "$dir/step" --metrics "$dir/step.jsonl" > /dev/null
run 2 "" train $common --tp 2 --steps 6 --metrics "$dir/whole.jsonl" > /dev/null
python3 - "$dir" <<'PY'
import json, sys
d = sys.argv[1]
killed = {}
for line in open(f"{d}/step.jsonl"):  # steps 1-2, then 3-6 resumed
    m = json.loads(line); killed[m["step"]] = m["loss"]
whole = {json.loads(l)["step"]: json.loads(l)["loss"] for l in open(f"{d}/whole.jsonl")}
assert sorted(killed) == list(range(1, 7)), sorted(killed)
assert killed == whole, (killed, whole)  # the same mesh: bitwise
PY
echo "kill -9 mid-step: the job ended $took s after the kill; latest (step 2) loads and resumes bitwise"

# ---- kill -9 of rank 0 while saving step 2, after model.safetensors: step-2.tmp is left behind.
took=$(run_killed save 2 kill-in-save@2:0 train $common --tp 2 --steps 6 --save-every 1 --out "$dir/save")
within_10s "$took" || { echo "FAIL: the job took $took s to end after a rank was killed mid-save"; exit 1; }
[ "$(step_of "$dir/save")" = 1 ] || { echo "FAIL: latest is not step 1 after a kill while saving step 2"; exit 1; }
[ -f "$dir/save/step-00000002.tmp/model.safetensors" ] || { echo "FAIL: the kill did not land mid-save"; ls -R "$dir/save"; exit 1; }
run 1 "" eval --model "$dir/save/latest" --tokens "$dir/tokens.bin" --seq-len 16 > /dev/null
run 2 "" train $common --tp 2 --steps 6 --save-every 1 --stop-after 2 --out "$dir/save" --resume "$dir/save" > /dev/null
left=$(cd "$dir/save" && ls -d step-* | tr '\n' ' ')
[ "$left" = "step-00000002 " ] || { echo "FAIL: after the next save: $left"; exit 1; }
echo "kill -9 mid-save: the job ended $took s after the kill; latest stayed step 1; the next save reused step-2.tmp"

# ---- one rank fails alone in step 2: the other waits in a collective until the job is aborted.
t0=$(now)
if run 2 error-in-step@2:1 train $common --tp 2 --steps 6 > /dev/null 2> "$dir/alone.err"; then
  echo "FAIL: a failing rank did not fail the job"; exit 1
fi
took=$(python3 -c "import sys; print('%.1f' % (float(sys.argv[2]) - float(sys.argv[1])))" "$t0" "$(now)")
within_10s "$took" || { echo "FAIL: the job took $took s to end after one rank failed alone"; exit 1; }
grep -q "^\[rank 1/2\] \[faults\] COLROW_INJECT_FAULT: error-in-step at step 2 on this rank alone" "$dir/alone.err" || { echo "FAIL: $(cat "$dir/alone.err")"; exit 1; }
echo "one rank failing alone: the job ended within $took s (run included) with its message"

# ---- a NaN in rank 1's gradient at step 3: both ranks stop there; latest stays step 2.
err=$(run 2 nan-grad@3:1 train $common --tp 2 --steps 6 --save-every 1 --out "$dir/nan" 2>&1 >/dev/null) && { echo "FAIL: a NaN gradient did not stop the run"; exit 1; }
[ "$(echo "$err" | grep -c 'the gradient norm (nan) at step 3 is not finite; training stopped before applying it')" = 2 ] || { echo "FAIL: $err"; exit 1; }
[ "$(step_of "$dir/nan")" = 2 ] || { echo "FAIL: latest is not step 2 after a NaN in step 3"; exit 1; }
# At pp 2, an Inf on the first stage: the last stage stops at the same step.
err=$(run 2 inf-grad@2:0 train $common --pp 2 --grad-accum 2 --steps 6 2>&1 >/dev/null) && { echo "FAIL: an Inf gradient did not stop the pp run"; exit 1; }
[ "$(echo "$err" | grep -c 'at step 2 is not finite; training stopped')" = 2 ] || { echo "FAIL: $err"; exit 1; }

# --skip-nonfinite: steps 3 (Inf on rank 1) and 5 (NaN on rank 0) are skipped and counted.
out=$(run 2 inf-grad@3:1,nan-grad@5:0 train $common --tp 2 --steps 6 --skip-nonfinite --metrics "$dir/skip.jsonl" --out "$dir/skip")
[ "$(echo "$out" | grep -c 'SKIPPED')" = 2 ] || { echo "FAIL: the log does not show 2 skips: $out"; exit 1; }
# The skipped step changes nothing: after step 3 (skipped) the weights and moments are step 2's.
run 2 "" train $common --tp 2 --steps 6 --stop-after 2 --out "$dir/two" > /dev/null
run 2 inf-grad@3:1 train $common --tp 2 --steps 6 --stop-after 3 --skip-nonfinite --out "$dir/three" > /dev/null
python3 - "$dir" <<'PY'
import json, struct, sys
d = sys.argv[1]
ms = [json.loads(l) for l in open(f"{d}/skip.jsonl")]
assert [m["step"] for m in ms] == [1, 2, 3, 4, 5, 6], ms
assert [m.get("skipped", False) for m in ms] == [False, False, True, False, True, False], ms
assert [m.get("skipped_steps", 0) for m in ms] == [0, 0, 1, 1, 2, 2], ms
assert ms[-1]["loss"] == ms[-1]["loss"] and ms[-1]["loss"] < ms[0]["loss"], ms  # finite, learning
assert json.load(open(f"{d}/skip/latest/train_state.json"))["skipped_steps"] == 2
def tensors(path):
    raw = open(path, "rb").read()
    n = struct.unpack("<Q", raw[:8])[0]
    header = json.loads(raw[8:8 + n])
    return {k: raw[8 + n + v["data_offsets"][0]: 8 + n + v["data_offsets"][1]]
            for k, v in header.items() if k != "__metadata__"}
for f in ["model.safetensors", "optimizer.exp_avg.safetensors", "optimizer.exp_avg_sq.safetensors"]:
    assert tensors(f"{d}/two/latest/{f}") == tensors(f"{d}/three/latest/{f}"), f
assert json.load(open(f"{d}/three/latest/train_state.json"))["adam_steps"] == 2
PY
echo "NaN/Inf gradients: every rank stops at the step (tp 2, pp 2); --skip-nonfinite skips and counts (2 of 6), changing nothing"

# ---- a full disk while saving step 2: a 2 MiB tmpfs holds one checkpoint (1.5 MiB), not two.
# Mounted in a private mount namespace (unshare -m), gone with it.
mkdir "$dir/disk"
export DIR="$dir" MPIEXEC="$mpiexec" COLROW="$colrow" COMMON="$common"
if unshare -m sh -c 'mount -t tmpfs -o size=2m tmpfs "$DIR/disk"' 2>/dev/null; then
  unshare -m sh -c '
    mount -t tmpfs -o size=2m tmpfs "$DIR/disk"
    code=0
    timeout 300 "$MPIEXEC" -np 2 --oversubscribe --bind-to none --quiet "$COLROW" train $COMMON \
      --tp 2 --steps 6 --save-every 1 --out "$DIR/disk/run" > /dev/null 2> "$DIR/full.err" || code=$?
    echo $code > "$DIR/full.code"
    ls "$DIR/disk/run" > "$DIR/full.ls"
    cp -rL "$DIR/disk/run/latest" "$DIR/full.latest"'
  [ "$(cat "$dir/full.code")" = 1 ] || { echo "FAIL: full disk: exit $(cat "$dir/full.code"): $(cat "$dir/full.err")"; exit 1; }
  [ "$(grep -c 'No space left on device.* Saving step-00000002 failed; training stopped' "$dir/full.err")" = 2 ] || { echo "FAIL: full disk: $(cat "$dir/full.err")"; exit 1; }
  [ "$(tr '\n' ' ' < "$dir/full.ls")" = "latest step-00000001 " ] || { echo "FAIL: full disk left: $(cat "$dir/full.ls")"; exit 1; }
  [ "$(python3 -c "import json,sys; print(json.load(open(sys.argv[1]))['step'])" "$dir/full.latest/train_state.json")" = 1 ] || { echo "FAIL: full disk: latest is not step 1"; exit 1; }
  run 1 "" eval --model "$dir/full.latest" --tokens "$dir/tokens.bin" --seq-len 16 > /dev/null
  echo "full disk: one error per rank, training stopped, latest (step 1) intact, no partial step left"
else
  echo "SKIP full disk: this machine cannot mount a tmpfs in a private mount namespace (needs CAP_SYS_ADMIN)"
fi

# ---- a byte flipped in a checkpoint: named by tensor on every rank, for the model and the moments.
flip() {  # flip FILE TENSOR: one bit in the middle of TENSOR's bytes
  python3 - "$1" "$2" <<'PY'
import json, struct, sys
path, name = sys.argv[1], sys.argv[2]
raw = bytearray(open(path, "rb").read())
n = struct.unpack("<Q", raw[:8])[0]
b, e = json.loads(raw[8:8 + n])[name]["data_offsets"]
raw[8 + n + (b + e) // 2] ^= 0x04
open(path, "wb").write(raw)
PY
}
cp -rL "$dir/step/latest" "$dir/corrupt"
flip "$dir/corrupt/model.safetensors" h.1.mlp.c_fc.weight
err=$(run 2 "" eval --model "$dir/corrupt" --tokens "$dir/tokens.bin" --seq-len 16 2>&1 >/dev/null) && { echo "FAIL: a corrupt model loaded"; exit 1; }
[ "$(echo "$err" | grep -c 'model.safetensors: tensor "h.1.mlp.c_fc.weight" fails its checksum')" = 2 ] || { echo "FAIL: $err"; exit 1; }
cp -rL "$dir/step/latest" "$dir/corrupt_moments"
flip "$dir/corrupt_moments/optimizer.exp_avg_sq.safetensors" wpe.weight
err=$(run 2 "" train $common --tp 2 --steps 8 --resume "$dir/corrupt_moments" 2>&1 >/dev/null) && { echo "FAIL: corrupt moments resumed"; exit 1; }
[ "$(echo "$err" | grep -c 'optimizer.exp_avg_sq.safetensors: tensor "wpe.weight" fails its checksum')" = 2 ] || { echo "FAIL: $err"; exit 1; }
echo "a flipped byte: eval and resume refuse the checkpoint on every rank, naming the tensor"

# ---- a bad fault spec: refused on every rank.
err=$(run 2 kill@3 train $common --tp 2 --steps 2 2>&1 >/dev/null) && { echo "FAIL: a bad COLROW_INJECT_FAULT accepted"; exit 1; }
[ "$(echo "$err" | grep -c 'COLROW_INJECT_FAULT entry (kill@3) names no known fault')" = 2 ] || { echo "FAIL: $err"; exit 1; }
echo "train_faults_test: all passed"
