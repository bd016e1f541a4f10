#!/bin/sh
# colrow train end to end on a small text file:
#  - the same loss curve at (tp, dp) = (1,1), (2,1), (4,1), (1,2), (2,2), and
#    the same gradient norms across tp (global batch fixed: batch x dp = 4);
#  - ZeRO-1 and plain AdamW give the same losses and the same model;
#  - stop at step 10 and resume to 20 = 20 uninterrupted steps, bitwise on the
#    same mesh, within tolerance on another mesh;
#  - a run killed at random moments (while saving every step) leaves `latest`
#    a loadable checkpoint;
#  - threads per rank: OMP_NUM_THREADS replaces cores / ranks on the node,
#    --threads wins over both;
#  - the output head in token chunks (--logits-chunk-mib) gives the same
#    losses with less memory; a negative size is refused;
#  - --profile prints each phase's and operation's time per step and its rate;
#  - bad configurations and data fail before training, on every rank.
#   train_test.sh COLROW MPIEXEC
set -eu
. "$(dirname "$0")/train_fixture.sh"
# Waits (up to 2 minutes) until the command holds: the kills and signals
# below must reach a run that trains, however slowly it starts (under
# cli_tcp_namespaces an rsh launch and two daemons come first).
await() {
  n=0
  until "$@" 2>/dev/null; do
    n=$((n + 1)); [ $n -lt 1200 ] || { echo "FAIL: still not true after 120 s: $*"; exit 1; }
    sleep 0.1
  done
}
trained() { grep -q '^step ' "$1"; }  # the run logged a finished step
write_corpus "$dir/text.txt" 400
common="--model gpt2-tiny --data $dir/text.txt --seq-len 32 --lr 3e-3 --eval-windows 8"

run 1 train $common --steps 20 --batch 4 --metrics "$dir/m11.jsonl" --out "$dir/run11" > /dev/null
run 2 train $common --steps 20 --batch 4 --tp 2 --metrics "$dir/m21.jsonl" > /dev/null
run 4 train $common --steps 20 --batch 4 --tp 4 --metrics "$dir/m41.jsonl" > /dev/null
run 2 train $common --steps 20 --batch 2 --tp 1 --dp 2 --metrics "$dir/m12.jsonl" --out "$dir/run12" > /dev/null
run 4 train $common --steps 20 --batch 2 --tp 2 --dp 2 --metrics "$dir/m22.jsonl" > /dev/null
run 2 train $common --steps 20 --batch 2 --tp 1 --dp 2 --zero 0 --metrics "$dir/m12z0.jsonl" --out "$dir/run12z0" > /dev/null

python3 - "$dir" <<'PY'
import json, sys, struct
d = sys.argv[1]
def curve(name):
    return [json.loads(l) for l in open(f"{d}/{name}.jsonl")]
ref = curve("m11")
assert len(ref) == 20 and ref[-1]["step"] == 20, ref[-1]
assert ref[-1]["loss"] < ref[0]["loss"] - 0.5, ("does not learn", ref[0]["loss"], ref[-1]["loss"])
# Each mesh sums in its own order (fp32, ~1e-6 relative per operation); Adam
# amplifies such differences slowly over 20 steps. 2e-3 relative is far above
# that drift and far below what a wrong shard or a missing reduction does.
for name in ["m21", "m41", "m12", "m22", "m12z0"]:
    c = curve(name)
    assert len(c) == 20, name
    for a, b in zip(ref, c):
        assert abs(a["loss"] - b["loss"]) <= 2e-3 * a["loss"], (name, a["step"], a["loss"], b["loss"])
        assert abs(a["grad_norm"] - b["grad_norm"]) <= 2e-3 * a["grad_norm"] + 1e-6, (name, a["step"], a["grad_norm"], b["grad_norm"])
# ZeRO-1 and plain AdamW on the same mesh: the same model.
def tensors(path):
    raw = open(path, "rb").read()
    n = struct.unpack("<Q", raw[:8])[0]
    header = json.loads(raw[8:8 + n])
    out = {}
    for k, v in header.items():
        if k == "__metadata__": continue
        b, e = v["data_offsets"]
        out[k] = struct.unpack(f"<{(e - b) // 4}f", raw[8 + n + b: 8 + n + e])
    return out
z1 = tensors(f"{d}/run12/latest/model.safetensors")
z0 = tensors(f"{d}/run12z0/latest/model.safetensors")
worst = max(abs(x - y) for k in z1 for x, y in zip(z1[k], z0[k]))
assert worst <= 1e-4, ("zero 1 differs from zero 0", worst)
print("meshes agree; zero 1 == zero 0 (max |dw| = %.2e)" % worst)
PY

# Resume: stop at 10, continue to 20 -> the uninterrupted run's losses.
run 1 train $common --steps 20 --batch 4 --stop-after 10 --out "$dir/resumed" --metrics "$dir/r1.jsonl" > /dev/null
run 1 train $common --steps 20 --batch 4 --resume "$dir/resumed" --out "$dir/resumed" --metrics "$dir/r1.jsonl" > /dev/null
run 2 train $common --steps 20 --batch 2 --stop-after 10 --tp 1 --dp 2 --out "$dir/moved" > /dev/null
run 4 train $common --steps 20 --batch 2 --tp 2 --dp 2 --resume "$dir/moved" --metrics "$dir/moved.jsonl" > /dev/null
python3 - "$dir" <<'PY'
import json, sys
d = sys.argv[1]
ref = [json.loads(l) for l in open(f"{d}/m11.jsonl")]
res = [json.loads(l) for l in open(f"{d}/r1.jsonl")]
assert [r["step"] for r in res] == list(range(1, 21)), [r["step"] for r in res]
for a, b in zip(ref, res):
    assert a["loss"] == b["loss"], ("resume is not bitwise", a["step"], a["loss"], b["loss"])
moved = [json.loads(l) for l in open(f"{d}/moved.jsonl")]
assert [m["step"] for m in moved] == list(range(11, 21))
for a, b in zip(ref[10:], moved):
    assert abs(a["loss"] - b["loss"]) <= 2e-3 * a["loss"], ("resharded resume", a["step"], a["loss"], b["loss"])
print("resume: bitwise on the same mesh, within tolerance from tp1 x dp2 to tp2 x dp2")
PY

# Killed at random moments while saving every step: latest stays loadable
# (the model by eval, the whole training state by a resume).
python3 -c "import struct,sys; open(sys.argv[2],'wb').write(b''.join(struct.pack('<H', c) for c in open(sys.argv[1],'rb').read()))" "$dir/text.txt" "$dir/tokens.bin"
for delay in 0.1 0.5 0.9; do
  run 2 train $common --batch 4 --tp 2 --steps 100000 --save-every 1 --out "$dir/killed" > "$dir/killed.log" 2>&1 &
  await trained "$dir/killed.log"; await test -e "$dir/killed/latest/train_state.json"
  sleep "$delay"; pkill -9 -f "train.*$dir/killed" || true; wait || true
  run 1 eval --model "$dir/killed/latest" --tokens "$dir/tokens.bin" --seq-len 16 > /dev/null || { echo "FAIL: latest not loadable after a kill at $delay s"; exit 1; }
  step=$(python3 -c "import json,sys; print(json.load(open(sys.argv[1]))['step'])" "$dir/killed/latest/train_state.json")
  run 1 train $common --batch 4 --steps 100000 --resume "$dir/killed" --stop-after $((step + 1)) > /dev/null || { echo "FAIL: cannot resume after a kill at $delay s"; exit 1; }
done
# What kills mid-save leave (a step-N.tmp with a partial file, an older
# step-N beside latest's) is removed by the next save; latest's step stays.
mkdir -p "$dir/killed/step-99999999.tmp" "$dir/killed/step-00000000"
head -c 1000 /dev/urandom > "$dir/killed/step-99999999.tmp/model.safetensors"
step=$(python3 -c "import json,sys; print(json.load(open(sys.argv[1]))['step'])" "$dir/killed/latest/train_state.json")
run 1 train $common --batch 4 --steps 100000 --resume "$dir/killed" --out "$dir/killed" --stop-after $((step + 1)) > /dev/null
left=$(cd "$dir/killed" && ls -d step-* | tr '\n' ' ')
[ "$left" = "$(cd "$dir/killed" && readlink latest) " ] || { echo "FAIL: stale checkpoints left after a save: $left"; exit 1; }
echo "killed runs: latest stays loadable; the next save removes what the kills left"

# SIGUSR1 to mpirun (which forwards it) stops every rank after the same step,
# saved, with status 0.
run 2 train $common --batch 4 --tp 2 --steps 100000 --out "$dir/usr1" > "$dir/usr1.log" 2>&1 &
await trained "$dir/usr1.log"; pkill -USR1 -f "^[^ ]*mpiexec .*$dir/usr1" || true  # mpiexec itself, not timeout
wait $! || { echo "FAIL: SIGUSR1 did not end the run cleanly"; cat "$dir/usr1.log"; exit 1; }
grep -q "continue with --resume" "$dir/usr1.log" || { echo "FAIL: no clean stop"; cat "$dir/usr1.log"; exit 1; }
[ -f "$dir/usr1/latest/train_state.json" ] || { echo "FAIL: nothing saved on SIGUSR1"; exit 1; }

# Ctrl-C on mpirun: Open MPI stops relaying output and signals the ranks,
# which finish the step and save within its one-second grace.
run 2 train $common --batch 4 --tp 2 --steps 100000 --out "$dir/sigint" > "$dir/sigint.log" 2>&1 &
await trained "$dir/sigint.log"; pkill -INT -f "^[^ ]*mpiexec .*$dir/sigint" || true; wait $! || true
[ -f "$dir/sigint/latest/train_state.json" ] || { echo "FAIL: nothing saved on Ctrl-C"; exit 1; }

# --init starts a new run from a model checkpoint: its first loss is the loss
# the checkpoint has on that batch, far below a fresh model's.
run 1 train $common --steps 1 --batch 4 --init "$dir/run11/latest" --metrics "$dir/init.jsonl" > /dev/null
python3 - "$dir" <<'PY'
import json, sys
d = sys.argv[1]
fresh = json.loads(open(f"{d}/m11.jsonl").readline())["loss"]
init = json.loads(open(f"{d}/init.jsonl").readline())["loss"]
assert init < fresh - 0.5, ("--init did not load the trained weights", init, fresh)
print("init: first loss %.3f (fresh model %.3f)" % (init, fresh))
PY

# A loss that blows up stops the run with one clear line on every rank.
err=$(run 2 train $common --steps 20 --batch 4 --tp 2 --lr 1e30 --grad-clip 0 2>&1 >/dev/null) && { echo "FAIL: divergence not caught"; exit 1; }
[ "$(echo "$err" | grep -c 'is not finite; training stopped')" = 2 ] || { echo "FAIL: $err"; exit 1; }

# Errors before training, on every rank alike.
err=$(run 2 train $common --steps 20 --batch 4 --tp 2 --out /proc/nope 2>&1 >/dev/null) && { echo "FAIL: unwritable out accepted"; exit 1; }
[ "$(echo "$err" | grep -c 'cannot create directory /proc/nope')" = 2 ] || { echo "FAIL: $err"; exit 1; }
: > "$dir/empty.txt"
err=$(run 2 train --model gpt2-tiny --data "$dir/empty.txt" --steps 20 --batch 4 2>&1 >/dev/null) && { echo "FAIL: empty data accepted"; exit 1; }
[ "$(echo "$err" | grep -c "$dir/empty.txt")" = 2 ] || { echo "FAIL: $err"; exit 1; }
err=$(run 2 train $common --steps 20 --batch 4611686018427387904 --grad-accum 4 --tp 2 2>&1 >/dev/null) && { echo "FAIL: an overflowing batch accepted"; exit 1; }
[ "$(echo "$err" | grep -c 'must fit in 64 bits: the tokens of one step')" = 2 ] || { echo "FAIL: $err"; exit 1; }
err=$(run 2 train $common --steps 20 --batch 4 --tp 2 --profile -1 2>&1 >/dev/null) && { echo "FAIL: --profile -1 accepted"; exit 1; }
[ "$(echo "$err" | grep -c 'profile must not be negative')" = 2 ] || { echo "FAIL: $err"; exit 1; }
err=$(run 2 train $common --steps 20 --batch 4 --tp 2 --cuda-graph 2>&1 >/dev/null) && { echo "FAIL: --cuda-graph on the CPU accepted"; exit 1; }
[ "$(echo "$err" | grep -c 'cuda-graph captures GPU work, but --device is cpu')" = 2 ] || { echo "FAIL: $err"; exit 1; }

# --profile 2: steps 2-3 timed per operation, the report once, after step 3.
# The header's threads per rank: OMP_NUM_THREADS (passed to every node's
# ranks with -x) replaces cores / ranks on the node; --threads wins.
threads_in_header() {
  OMP_NUM_THREADS=$1 timeout 300 "$mpiexec" -np 1 --oversubscribe --bind-to none --quiet \
    -x OMP_NUM_THREADS "$colrow" train $common --steps 1 --batch 4 $2 |
    sed -n 's/.*, \([0-9]*\) thread(s)\/rank;.*/\1/p'
}
[ "$(threads_in_header 3 "")" = 3 ] || { echo "FAIL: OMP_NUM_THREADS=3 not followed: $(threads_in_header 3 "")"; exit 1; }
[ "$(threads_in_header 3 "--threads 1")" = 1 ] || { echo "FAIL: --threads 1 does not win over OMP_NUM_THREADS"; exit 1; }
echo "threads per rank: OMP_NUM_THREADS, then --threads"

# The output head and loss in token chunks: a 50257-class toy whose 256
# tokens' logits take 25 MiB per rank at tp 2, in chunks of 8 MiB or less.
mkdir -p "$dir/bigvocab"
echo '{"model_type": "gpt2", "n_layer": 2, "n_head": 2, "n_embd": 32, "vocab_size": 50257, "n_positions": 128}' > "$dir/bigvocab/config.json"
chunks="--model $dir/bigvocab --data $dir/text.txt --seq-len 64 --batch 4 --steps 4 --tp 2 --eval-windows 8"
run 2 train $chunks --logits-chunk-mib 0 --metrics "$dir/one-chunk.jsonl" > /dev/null
run 2 train $chunks --logits-chunk-mib 8 --metrics "$dir/chunks.jsonl" > "$dir/chunks.log"
grep -q "output head in 4 chunks of 64 tokens" "$dir/chunks.log" || { echo "FAIL: chunks not announced"; cat "$dir/chunks.log"; exit 1; }
python3 - "$dir" <<'PY'
import json, sys
d = sys.argv[1]
one, chunked = ([json.loads(l) for l in open(f"{d}/{n}.jsonl")] for n in ("one-chunk", "chunks"))
assert len(one) == len(chunked) == 4
for a, b in zip(one, chunked):
    # The same kernels on fewer rows, summed in another order at most (tests/nn/gpt_model_test.cpp).
    assert abs(a["loss"] - b["loss"]) <= 1e-6 * a["loss"], (a["step"], a["loss"], b["loss"])
    assert abs(a["grad_norm"] - b["grad_norm"]) <= 1e-5 * a["grad_norm"], (a["step"], a["grad_norm"], b["grad_norm"])
assert abs(one[-1]["val_loss"] - chunked[-1]["val_loss"]) <= 1e-6 * one[-1]["val_loss"]
# 25 MiB of logits per rank at once, then 6.3 (and the whole-batch dlogits no more).
saved = one[-1]["peak_host_tensor_mib"] - chunked[-1]["peak_host_tensor_mib"]
assert saved > 15, (one[-1]["peak_host_tensor_mib"], chunked[-1]["peak_host_tensor_mib"])
print(f"output head in 4 chunks: the same losses, {saved:.1f} MiB less at the peak")
PY
if out=$(run 2 train $chunks --logits-chunk-mib -1 2>&1); then echo "FAIL: --logits-chunk-mib -1 accepted"; exit 1; fi
[ "$(echo "$out" | grep -c "logits_chunk_mib (-1) must be")" -eq 2 ] || { echo "FAIL: want one line per rank: $out"; exit 1; }

out=$(run 2 train $common --steps 4 --batch 4 --tp 2 --profile 2)
[ "$(echo "$out" | grep -c '^profile: steps 2-3, ')" = 1 ] || { echo "FAIL: profile header: $out"; exit 1; }
for row in gemm attention 'norms and elementwise' loss optimizer communication 'untimed (host, idle)' attention_backward adamw_update all_reduce_sum; do
  echo "$out" | grep -q "^  $row  " || { echo "FAIL: profile row '$row' missing: $out"; exit 1; }
done
# What each phase achieved: the products' rate for the GEMMs, bytes for the rest.
echo "$out" | grep -q '^  gemm  .* [0-9.]* [GT]FLOP/s$' || { echo "FAIL: no GEMM rate: $out"; exit 1; }
echo "$out" | grep -q '^  norms and elementwise  .* [0-9.]* GB/s$' || { echo "FAIL: no bandwidth: $out"; exit 1; }
echo "$out" | grep -q "^  communication  .* [0-9.]* GB/s$" || { echo "FAIL: no communication rate: $out"; exit 1; }
err=$(run 1 train $common --steps 20 --batch 4 --bogus 2>&1 >/dev/null) && { echo "FAIL: unknown flag accepted"; exit 1; }
echo "$err" | grep -q "bogus" || { echo "FAIL: $err"; exit 1; }
echo "train_test: all passed"
