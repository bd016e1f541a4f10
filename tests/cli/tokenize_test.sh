#!/bin/sh
# colrow tokenize end to end: GPT-2's ids of a sentence (reference ids from
# Encoder.js, as in tests/data/gpt2_tokenizer_test.cpp) and of the Jargon File
# in raw and llm.c token files; gzip input; the byte tokenizer for a directory
# without tokenizer files, its file read by colrow eval; bad input fails with
# one line per rank, a non-zero exit, and the previous output intact.
#   tokenize_test.sh COLROW MPIEXEC MAKE_TEST_CHECKPOINT GPT2_TOKENIZER_DIR
set -eu
colrow=$1; mpiexec=$2; maker=$3; gpt2=$4
. "$(dirname "$0")/mpi_nodes.sh"
if [ ! -f "$gpt2/vocab.json" ] || [ ! -f "$gpt2/merges.txt" ]; then
  echo "FAIL: GPT-2's vocab.json and merges.txt are missing from $gpt2. Run scripts/install-deps.sh."
  exit 1
fi
dir=$(mktemp -d); trap 'rm -rf "$dir"' EXIT
run() { np=$1; shift; timeout 120 "$mpiexec" -np "$np" --oversubscribe --bind-to none --quiet "$colrow" "$@"; }
field() { python3 -c "import json,sys; print(json.loads(sys.argv[1])[sys.argv[2]])" "$1" "$2"; }
# The ids of a token file, comma-separated; an llm.c header is checked and skipped.
ids() {
  python3 - "$1" <<'PY'
import struct, sys
data = open(sys.argv[1], "rb").read()
if len(data) >= 4 and struct.unpack("<i", data[:4])[0] == 20240520:
    magic, version, count = struct.unpack("<3i", data[:12])
    assert version == 1 and len(data) == 1024 + 2 * count, (version, count, len(data))
    assert data[12:1024] == bytes(1012), "header padding is not zero"
    data = data[1024:]
print(",".join(str(i) for (i,) in struct.iter_unpack("<H", data)))
PY
}

hello=15496,11,995,0,770,318,402,11571,12,17,338,11241,7509,13
printf "Hello, world! This is GPT-2's tokenizer." > "$dir/hello.txt"
out=$(run 2 tokenize --tokenizer "$gpt2" --input "$dir/hello.txt" --output "$dir/hello.bin" --json)
[ "$(field "$out" tokens)" = 14 ] || { echo "FAIL: tokens in $out"; exit 1; }
[ "$(field "$out" bytes)" = 40 ] || { echo "FAIL: bytes in $out"; exit 1; }
[ "$(field "$out" tokenizer)" = gpt2-bpe ] || { echo "FAIL: tokenizer in $out"; exit 1; }
[ "$(ids "$dir/hello.bin")" = "$hello" ] || { echo "FAIL: raw ids $(ids "$dir/hello.bin")"; exit 1; }
line=$(run 1 tokenize --tokenizer "$gpt2" --input "$dir/hello.txt" --output "$dir/hello.llmc" --format llmc)
echo "$line" | grep -q "^tokenize .*(llmc): 14 tokens from 40 bytes, gpt2-bpe tokenizer (50257 ids), [0-9]* tokens/s$" || { echo "FAIL: report $line"; exit 1; }
[ "$(ids "$dir/hello.llmc")" = "$hello" ] || { echo "FAIL: llmc ids"; exit 1; }
gzip -c "$dir/hello.txt" > "$dir/hello.txt.gz"
run 1 tokenize --tokenizer "$gpt2" --input "$dir/hello.txt.gz" --output "$dir/gz.bin" >/dev/null
cmp -s "$dir/hello.bin" "$dir/gz.bin" || { echo "FAIL: gzip input differs"; exit 1; }

# The Jargon File: 476849 tokens by the reference encoder.
out=$(run 1 tokenize --tokenizer "$gpt2" --input /usr/share/doc/jargon-text/jargon.txt.gz --output "$dir/jargon.bin" --format llmc --json)
echo "jargon: $out"
[ "$(field "$out" tokens)" = 476849 ] || { echo "FAIL: jargon tokens"; exit 1; }

# No tokenizer files: one token per byte, and colrow eval reads the result.
mkdir "$dir/bytes"
run 1 tokenize --tokenizer "$dir/bytes" --input "$dir/hello.txt" --output "$dir/bytes.bin" >/dev/null
[ "$(ids "$dir/bytes.bin" | cut -d, -f1-3)" = 72,101,108 ] || { echo "FAIL: byte ids"; exit 1; }
"$maker" gpt2-tiny "$dir/model" "$dir/unused.bin" 2
out=$(run 2 eval --model "$dir/model" --tokens "$dir/bytes.bin" --seq-len 8 --json)
[ "$(field "$out" windows)" = 4 ] || { echo "FAIL: eval of the byte tokens: $out"; exit 1; }  # (40 - 1) / 8

# Errors: one line per rank, the same message, non-zero exit, nothing written.
expect_error() {
  message=$1; shift
  if run 2 tokenize "$@" >"$dir/out" 2>"$dir/err"; then echo "FAIL: accepted: $*"; exit 1; fi
  [ ! -s "$dir/out" ] || { echo "FAIL: stdout for $*: $(cat "$dir/out")"; exit 1; }
  drop_launcher_noise "$dir/err"
  [ "$(wc -l < "$dir/err")" -eq 2 ] || { echo "FAIL: not one line per rank: $(cat "$dir/err")"; exit 1; }
  for r in 0 1; do
    grep -qF "[rank $r/2] $message" "$dir/err" || { echo "FAIL: rank $r: $(cat "$dir/err")"; exit 1; }
  done
}
cp "$dir/hello.bin" "$dir/before.bin"
expect_error "[tokenizer] directory ($dir/nowhere) does not exist." \
  --tokenizer "$dir/nowhere" --input "$dir/hello.txt" --output "$dir/hello.bin"
expect_error "[tokenize] format (csv) must be raw (uint16 ids) or llmc" \
  --tokenizer "$gpt2" --input "$dir/hello.txt" --output "$dir/hello.bin" --format csv
expect_error "[data] cannot open text file $dir/missing.txt: No such file or directory." \
  --tokenizer "$gpt2" --input "$dir/missing.txt" --output "$dir/hello.bin"
expect_error "[tokenize] output directory ($dir/no/such) does not exist." \
  --tokenizer "$gpt2" --input "$dir/hello.txt" --output "$dir/no/such/out.bin"
printf '{"model": {"type": "WordPiece"}}' > "$dir/bytes/tokenizer.json"
expect_error "[tokenizer] $dir/bytes/tokenizer.json: model.type (WordPiece) must be BPE" \
  --tokenizer "$dir/bytes" --input "$dir/hello.txt" --output "$dir/hello.bin"
cmp -s "$dir/hello.bin" "$dir/before.bin" || { echo "FAIL: a failed run changed the output"; exit 1; }
if ls "$dir" | grep -q '\.tmp\.'; then echo "FAIL: temporary files left: $(ls "$dir")"; exit 1; fi
echo "tokenize_test: all passed"
