# Sourced by the CLI tests that train, with their arguments (COLROW MPIEXEC):
#   . "$(dirname "$0")/train_fixture.sh"
# It sets colrow and mpiexec, makes a scratch directory $dir (removed on
# exit), and defines the launcher and the small inputs these tests share.
colrow=$1; mpiexec=$2
dir=$(mktemp -d); trap 'rm -rf "$dir"' EXIT

# run NP ARGS...: colrow ARGS on NP ranks, five minutes at most.
run() { np=$1; shift; timeout 300 "$mpiexec" -np "$np" --oversubscribe --bind-to none --quiet "$colrow" "$@"; }

# skip_without_gpu: a GPU test's first line. Where colrow finds no GPU (or
# was built without CUDA) it prints "GPU test skipped: <why>" and exits 0,
# which ctest reports as skipped; any other failure of the probe fails the
# test, so that a GPU bug cannot pass for a missing GPU.
skip_without_gpu() {
  run 1 bench mlp --d-model 48 --tokens 8 --device cuda > "$dir/probe.txt" 2>&1 && return 0
  if grep -q '\[device\] device (cuda) needs a GPU' "$dir/probe.txt"; then
    echo "GPU test skipped: $(grep -m1 '\[device\]' "$dir/probe.txt")"
    exit 0
  fi
  echo "FAIL: the GPU probe (bench mlp --device cuda) failed:"; cat "$dir/probe.txt"; exit 1
}

# write_corpus FILE LINES [SENTENCE]: LINES numbered lines of one sentence, a
# text every tokenizer reads and a small model learns in a few steps.
write_corpus() {
  sentence=${3:-"the quick brown fox jumps over the lazy dog; tensor parallel ranks agree."}
  i=0; while [ "$i" -lt "$2" ]; do echo "line $i: $sentence"; i=$((i+1)); done > "$1"
}

# write_gpt2_4l DIR: a 4-layer GPT-2 (d_model 64, 4 heads, a byte vocabulary,
# 128 positions) to train from scratch.
write_gpt2_4l() {
  mkdir -p "$1"
  echo '{"model_type": "gpt2", "n_layer": 4, "n_head": 4, "n_embd": 64, "vocab_size": 256, "n_positions": 128}' > "$1/config.json"
}
