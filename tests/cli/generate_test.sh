#!/bin/sh
# colrow generate end to end: the same text and ids at np 1 (tp 1), np 2
# (tp 2, tp 1 x dp 2, pp 2) and np 4 (tp 2 x pp 2), greedy and sampled; the prompt comes back first in
# text mode; --prompts decodes a file of prompts together, as each alone; a
# full context stops with reason "length"; config.json's eos_token_id stops
# with reason "stop" (the id kept, its text left out) unless --ignore-eos; bad knobs and a vocabulary below the byte tokenizer's 256 ids
# fail with one clear line on every rank, as do more stages than layers.
#   generate_test.sh COLROW MPIEXEC MAKE_TEST_CHECKPOINT
set -eu
colrow=$1; mpiexec=$2; maker=$3
dir=$(mktemp -d); trap 'rm -rf "$dir"' EXIT
run() { np=$1; shift; timeout 120 "$mpiexec" -np "$np" --oversubscribe --bind-to none --quiet "$colrow" "$@"; }

for preset in gpt2-tiny llama-tiny; do
  "$maker" "$preset" "$dir/$preset" "$dir/tokens.bin" 10
  for knobs in "--temperature 0" "--temperature 0.8 --top-k 50 --top-p 0.9 --seed 3"; do
    # shellcheck disable=SC2086
    base=$(run 1 generate --model "$dir/$preset" --prompt "Hello, world" --max-new-tokens 12 --json $knobs)
    for mesh in "2 --tp 2" "2 --tp 1 --dp 2" "2 --pp 2" "4 --tp 2 --pp 2"; do
      np=${mesh%% *}; flags=${mesh#* }
      # shellcheck disable=SC2086
      out=$(run "$np" generate --model "$dir/$preset" --prompt "Hello, world" --max-new-tokens 12 --json $knobs $flags)
      python3 - "$base" "$out" "$preset $knobs / $mesh" <<'PY'
import json, sys
a, b, what = json.loads(sys.argv[1]), json.loads(sys.argv[2]), sys.argv[3]
assert a["prompt"] == "Hello, world", (what, a)
assert len(a["tokens"]) == 12 and all(0 <= t < 256 for t in a["tokens"]), (what, a)
# fp32 rounding differs between tp 1 and tp 2; these seeds sit far from any
# argmax tie or draw boundary, so the ids agree exactly.
assert a["tokens"] == b["tokens"] and a["completion"] == b["completion"], (what, a, b)
assert a["pp"] == 1 and b["pp"] == (2 if "--pp 2" in what else 1), (what, b)
print("ok", what, a["tokens"])
PY
    done
  done
done

# Text mode: the prompt, then the completion, on rank 0 only.
out=$(run 2 generate --model "$dir/gpt2-tiny" --prompt "abc" --max-new-tokens 3 --temperature 0)
case "$out" in abc*) ;; *) echo "FAIL: text output does not start with the prompt: $out"; exit 1 ;; esac

# --prompts: decoded together = each alone (tp 2), empty lines skipped; a
# prompt that fills the context (128) stops for length.
printf 'Hello\n\nabc def\nxyz\n' > "$dir/prompts.txt"
together=$(run 2 generate --model "$dir/gpt2-tiny" --prompts "$dir/prompts.txt" --max-new-tokens 6 --temperature 0 --json)
alone=""
for p in "Hello" "abc def" "xyz"; do
  alone="$alone$(run 1 generate --model "$dir/gpt2-tiny" --prompt "$p" --max-new-tokens 6 --temperature 0 --json)
"
done
long=$(python3 -c 'print("a" * 125)')
at_end=$(run 2 generate --model "$dir/gpt2-tiny" --prompt "$long" --max-new-tokens 10 --temperature 0 --json)
python3 - "$together" "$alone" "$at_end" <<'PY'
import json, sys
together = [json.loads(l) for l in sys.argv[1].splitlines()]
alone = [json.loads(l) for l in sys.argv[2].splitlines() if l]
assert [t["prompt"] for t in together] == ["Hello", "abc def", "xyz"], together
assert [t["index"] for t in together] == [0, 1, 2], together
for t, a in zip(together, alone):
    assert t["tokens"] == a["tokens"] and len(t["tokens"]) == 6, (t, a)
    assert t["stop_reason"] == "max_new_tokens", t
end = json.loads(sys.argv[3])
assert len(end["tokens"]) == 3 and end["stop_reason"] == "length", end
print("ok --prompts: batched == one by one; stop at the context: length")
PY
err=$(run 2 generate --model "$dir/gpt2-tiny" --prompt "x" --prompts "$dir/prompts.txt" 2>&1 >/dev/null) && { echo "FAIL: --prompt with --prompts accepted"; exit 1; }
[ "$(echo "$err" | grep -c 'give exactly one of --prompt TEXT and --prompts FILE')" = 2 ] || { echo "FAIL: $err"; exit 1; }
printf '\n\n' > "$dir/empty_prompts.txt"
err=$(run 2 generate --model "$dir/gpt2-tiny" --prompts "$dir/empty_prompts.txt" 2>&1 >/dev/null) && { echo "FAIL: a prompts file of empty lines accepted"; exit 1; }
[ "$(echo "$err" | grep -c 'holds no prompt (every line is empty)')" = 2 ] || { echo "FAIL: $err"; exit 1; }
err=$(run 2 generate --model "$dir/gpt2-tiny" --prompts "$dir/missing.txt" 2>&1 >/dev/null) && { echo "FAIL: missing prompts file accepted"; exit 1; }
[ "$(echo "$err" | grep -c 'cannot read prompts file')" = 2 ] || { echo "FAIL: $err"; exit 1; }

# eos_token_id: a copy of the checkpoint whose EOS is the third token greedy
# decoding emits stops there (the first occurrence of that id).
free=$(run 2 generate --model "$dir/gpt2-tiny" --prompt "Hello" --max-new-tokens 6 --temperature 0 --json)
mkdir "$dir/eos"
cp "$dir/gpt2-tiny/model.safetensors" "$dir/eos/"
python3 - "$dir/gpt2-tiny/config.json" "$dir/eos/config.json" "$free" <<'PY'
import json, sys
c = json.load(open(sys.argv[1])); c["eos_token_id"] = json.loads(sys.argv[3])["tokens"][2]
json.dump(c, open(sys.argv[2], "w"))
PY
stopped=$(run 2 generate --model "$dir/eos" --prompt "Hello" --max-new-tokens 6 --temperature 0 --json)
ignored=$(run 2 generate --model "$dir/eos" --prompt "Hello" --max-new-tokens 6 --temperature 0 --json --ignore-eos)
python3 - "$free" "$stopped" "$ignored" <<'PY'
import json, sys
free, stopped, ignored = (json.loads(a) for a in sys.argv[1:4])
eos = free["tokens"][2]
n = free["tokens"].index(eos) + 1
assert stopped["tokens"] == free["tokens"][:n] and stopped["stop_reason"] == "stop", (free, stopped)
assert stopped["completion"] == free["completion"][:n - 1], (free, stopped)  # bytes: one per token
assert ignored["tokens"] == free["tokens"] and ignored["stop_reason"] == "max_new_tokens", ignored
print("ok eos_token_id: stop after", n, "tokens; --ignore-eos runs on")
PY

# Errors on every rank.
err=$(run 2 generate --model "$dir/gpt2-tiny" --prompt "x" --top-p 1.5 2>&1 >/dev/null) && { echo "FAIL: top-p 1.5 accepted"; exit 1; }
[ "$(echo "$err" | grep -c '^\[rank [01]/2\] \[sampling\] top_p (1.5) must be > 0 and <= 1. Use 1 to turn nucleus sampling off.$')" = 2 ] || { echo "FAIL: $err"; exit 1; }
err=$(run 2 generate --model "$dir/gpt2-tiny" --prompt "x" --temperature -1 2>&1 >/dev/null) && { echo "FAIL: temperature -1 accepted"; exit 1; }
echo "$err" | grep -q '^\[rank 1/2\] \[sampling\] temperature (-1) must be >= 0' || { echo "FAIL: $err"; exit 1; }
mkdir "$dir/small"
python3 - "$dir/gpt2-tiny/config.json" "$dir/small/config.json" <<'PY'
import json, sys
c = json.load(open(sys.argv[1])); c["vocab_size"] = 100
json.dump(c, open(sys.argv[2], "w"))
PY
err=$(run 2 generate --model "$dir/small" --prompt "x" 2>&1 >/dev/null) && { echo "FAIL: vocab 100 accepted"; exit 1; }
[ "$(echo "$err" | grep -c '\[generate\] vocab_size (100) must be >= the byte tokenizer')" = 2 ] || { echo "FAIL: $err"; exit 1; }
err=$(run 3 generate --model "$dir/gpt2-tiny" --prompt "x" --pp 3 2>&1 >/dev/null) && { echo "FAIL: pp 3 over 2 layers accepted"; exit 1; }
[ "$(echo "$err" | grep -c '\[pipeline\] pp (3) is more stages than the 2 layers of the model')" = 3 ] || { echo "FAIL: $err"; exit 1; }
echo "generate_test: all passed"
