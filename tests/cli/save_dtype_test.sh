#!/bin/sh
# train --save-dtype bf16: each checkpoint's model.safetensors is a BF16
# export for inference beside the fp32 masters, so
#  - the export holds every weight of the fp32 run rounded to nearest even
#    (half the bytes, torch_dtype "bfloat16"), and the masters file holds the
#    fp32 weights bit for bit;
#  - a run stopped at step 5 and resumed from that checkpoint gives the
#    uninterrupted run's losses bit for bit (resume reads the masters);
#  - eval and generate load the export at tp 1 and 2; its loss is within
#    bf16's rounding of the fp32 model's;
#  - a dtype colrow does not know is one error line on every rank.
#   save_dtype_test.sh COLROW MPIEXEC
set -eu
. "$(dirname "$0")/train_fixture.sh"
write_corpus "$dir/text.txt" 300
python3 -c "import struct,sys; open(sys.argv[2],'wb').write(b''.join(struct.pack('<H', c) for c in open(sys.argv[1],'rb').read()))" "$dir/text.txt" "$dir/tokens.bin"
common="--model gpt2-tiny --data $dir/text.txt --seq-len 32 --lr 3e-3 --eval-windows 8 --batch 4 --steps 10"

run 2 train $common --tp 2 --out "$dir/f32" --metrics "$dir/f32.jsonl" > /dev/null
run 2 train $common --tp 2 --stop-after 5 --save-dtype bf16 --out "$dir/bf16" > /dev/null
run 2 train $common --tp 2 --resume "$dir/bf16" --save-dtype bf16 --out "$dir/bf16" --metrics "$dir/bf16.jsonl" > /dev/null

python3 - "$dir" <<'PY'
import json, struct, sys
d = sys.argv[1]
def tensors(path):
    raw = open(path, "rb").read()
    n = struct.unpack("<Q", raw[:8])[0]
    header = json.loads(raw[8:8 + n])
    out = {}
    for k, v in header.items():
        if k == "__metadata__": continue
        b, e = v["data_offsets"]
        data = raw[8 + n + b: 8 + n + e]
        if v["dtype"] == "F32":
            out[k] = ("F32", list(struct.unpack(f"<{len(data) // 4}I", data)))
        else:
            assert v["dtype"] == "BF16", v
            out[k] = ("BF16", list(struct.unpack(f"<{len(data) // 2}H", data)))
    return out
def bf16_rne(bits):  # fp32 bits -> bf16 bits, nearest even (no NaN in weights)
    return ((bits + 0x7fff + ((bits >> 16) & 1)) >> 16) & 0xffff
f32 = tensors(f"{d}/f32/latest/model.safetensors")
export = tensors(f"{d}/bf16/latest/model.safetensors")
masters = tensors(f"{d}/bf16/latest/optimizer.master_weights.safetensors")
assert f32.keys() == export.keys() == masters.keys()
for name, (dtype, bits) in f32.items():
    assert dtype == "F32" and export[name][0] == "BF16" and masters[name][0] == "F32", name
    assert masters[name][1] == bits, ("masters differ from the fp32 run", name)
    assert export[name][1] == [bf16_rne(b) for b in bits], ("export is not the rounded weights", name)
assert json.load(open(f"{d}/bf16/latest/config.json"))["torch_dtype"] == "bfloat16"
assert json.load(open(f"{d}/f32/latest/config.json"))["torch_dtype"] == "float32"
a = [json.loads(l) for l in open(f"{d}/f32.jsonl")]
b = [json.loads(l) for l in open(f"{d}/bf16.jsonl")]
assert [m["step"] for m in b] == list(range(6, 11)), [m["step"] for m in b]
for x, y in zip(a[5:], b):
    assert x["loss"] == y["loss"], ("resume through a bf16 export is not exact", x, y)
print("export = rounded fp32 weights; masters = fp32 weights; resume bitwise")
PY

# The export serves: eval at tp 1 and 2 (same loss), within bf16's rounding
# of the fp32 model's loss; generate loads it.
for np in 1 2; do
  run $np eval --model "$dir/bf16/latest" --tokens "$dir/tokens.bin" --seq-len 32 --json > "$dir/eval-bf16-$np.json"
done
run 1 eval --model "$dir/f32/latest" --tokens "$dir/tokens.bin" --seq-len 32 --json > "$dir/eval-f32.json"
python3 - "$dir" <<'PY'
import json, sys
d = sys.argv[1]
tp1, tp2 = (json.load(open(f"{d}/eval-bf16-{n}.json"))["loss"] for n in (1, 2))
f32 = json.load(open(f"{d}/eval-f32.json"))["loss"]
# Same weights at two tp: only the summation order differs (fp32, ~1e-6).
assert abs(tp1 - tp2) <= 1e-5 * tp1, (tp1, tp2)
# Each weight moves by at most 2^-9 of itself; over this tiny model the loss
# moves by far less than 2%, and it does move (the export is not fp32).
assert abs(tp1 - f32) <= 0.02 * f32 and tp1 != f32, (tp1, f32)
print("eval: bf16 export %.5f (tp 1), %.5f (tp 2); fp32 %.5f" % (tp1, tp2, f32))
PY
run 2 generate --model "$dir/bf16/latest" --prompt "line 7: the" --max-new-tokens 8 --temperature 0 > /dev/null

err=$(run 2 train $common --tp 2 --save-dtype fp16 2>&1 >/dev/null) && { echo "FAIL: --save-dtype fp16 accepted"; exit 1; }
[ "$(echo "$err" | grep -c -- '--save-dtype fp16 is not a dtype colrow knows: use fp32 or bf16')" = 2 ] || { echo "FAIL: $err"; exit 1; }
echo "save_dtype_test: all passed"
