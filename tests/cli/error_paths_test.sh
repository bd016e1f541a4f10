#!/bin/sh
# The CLI's error paths at an odd world size (mpiexec -np 3): an indivisible
# ffn_hidden_size, tp x dp != world size, an unknown flag, a bad --activation,
# a non-positive --tokens, a --threads past 1024, and bad --device / --comm /
# --tf32 / --attention / --attention-backward choices (a GPU asked for where
# there is none, through every verb that takes --device) each exit non-zero,
# print exactly one line
# "[rank r/3] <message>" per rank with the same message everywhere, and never hang.
# With `verbs`, only the GPU refusal through every other verb (ctest's
# cli_error_paths_verbs_np3: what each rank decides alone, which the TCP rerun
# of the suite leaves out).
# Usage: error_paths_test.sh <path-to-colrow> <mpiexec> [verbs]
set -u

if [ "$#" -ne 2 ] && { [ "$#" -ne 3 ] || [ "$3" != verbs ]; }; then
  echo "usage: $0 <path-to-colrow> <mpiexec> [verbs]" >&2
  exit 2
fi
colrow=$1
mpiexec=$2
mode=${3:-flags}
. "$(dirname "$0")/mpi_nodes.sh"
np=3
limit_s=60  # per run; a hang fails here, well before ctest's timeout

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT INT TERM
failures=0
case_name=""
message=""

fail() {
  echo "FAIL [$case_name]: $*" >&2
  failures=$((failures + 1))
}

show_output() {
  echo "---- stderr of [$case_name] ----" >&2
  cat "$work/err" >&2
  echo "---- stdout of [$case_name] ----" >&2
  cat "$work/out" >&2
  echo "----" >&2
}

# run_case NAME ARGS...: runs `colrow $verb ARGS` on $np ranks and checks the
# shape of the failure; sets $message to the one message every rank printed.
verb="bench mlp"
run_case() {
  case_name=$1
  shift
  message=""
  failures_before=$failures
  start=$(date +%s)
  # --quiet keeps mpiexec's own "job aborted" banner out of stderr.
  timeout "$limit_s" "$mpiexec" -np "$np" --quiet --oversubscribe --bind-to none \
    "$colrow" $verb "$@" >"$work/out" 2>"$work/err"
  status=$?
  elapsed=$(($(date +%s) - start))
  echo "[$case_name] exit status $status after ${elapsed}s: colrow $verb $*"

  if [ "$status" -eq 124 ] || [ "$status" -eq 137 ]; then
    fail "did not finish within ${limit_s}s (a rank hangs)"
    show_output
    echo "error_paths_test: giving up after a hang" >&2
    exit 1
  fi
  [ "$status" -ne 0 ] || fail "exit status is 0, expected non-zero"
  [ "$elapsed" -le 20 ] || fail "took ${elapsed}s; a configuration error should end in about a second"
  [ ! -s "$work/out" ] || fail "printed to stdout; errors belong on stderr"

  # Exactly one line per rank, each "[rank r/3] message".
  drop_launcher_noise "$work/err"
  lines=$(awk 'END { print NR }' "$work/err")
  [ "$lines" -eq "$np" ] || fail "stderr has $lines lines, expected $np (one per rank)"
  if grep -v -E "^\[rank [0-9]+/$np\] \[[a-z]+\] [^ ]" "$work/err" | grep -q .; then
    fail "some stderr lines are not of the form '[rank r/$np] [component] message'"
  fi
  r=0
  while [ "$r" -lt "$np" ]; do
    count=$(grep -c "^\[rank $r/$np\] " "$work/err")
    [ "$count" -eq 1 ] || fail "rank $r printed $count lines, expected 1"
    r=$((r + 1))
  done
  distinct=$(sed -E "s/^\[rank [0-9]+\/$np\] //" "$work/err" | sort -u | awk 'END { print NR }')
  [ "$distinct" -eq 1 ] || fail "the ranks printed $distinct different messages, expected 1"
  message=$(sed -n -E "s/^\[rank 0\/$np\] //p" "$work/err" | head -n 1)
  [ -n "$message" ] || fail "rank 0 printed no message"

  if [ "$failures" -ne "$failures_before" ]; then show_output; fi
}

# expect_in_message TEXT: the message names TEXT literally.
expect_in_message() {
  case "$message" in
    *"$1"*) ;;
    *) fail "message does not contain '$1': $message" ;;
  esac
}

# Every verb checks the device before it reads its data or builds anything:
# train before it reads the corpus, eval and generate before the weights (a
# config.json alone gets there).
if [ "$mode" = verbs ]; then
  if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L 2>/dev/null | grep -q GPU; then
    echo "error_paths_test verbs: skipped: this machine has a GPU"
    exit 0
  fi
  mkdir -p "$work/model"
  printf '%s' '{"model_type": "gpt2", "n_embd": 48, "n_head": 4, "n_layer": 1, "n_positions": 64, "vocab_size": 256}' \
    > "$work/model/config.json"
  for verb in "train --model gpt2-byte-small --steps 1 --dp 3" \
              "eval --model $work/model --tokens $work/no-such-tokens.bin --seq-len 8 --dp 3" \
              "generate --model $work/model --prompt hi --dp 3" \
              "bench decode --model gpt2-byte-small"; do
    run_case "no-gpu ${verb%% --*}" --device cuda
    expect_in_message "[device] "
    expect_in_message "use --device cpu"
  done
  if [ "$failures" -ne 0 ]; then
    echo "error_paths_test verbs: $failures check(s) failed" >&2
    exit 1
  fi
  echo "error_paths_test verbs: all checks passed"
  exit 0
fi

# (a) 2048 hidden units cannot be split 3 ways; the fix lists the tp that can.
run_case indivisible --d-model 512 --ffn-hidden 2048 --tokens 8 --tp 3 --dp 1
expect_in_message "[mlp] ffn_hidden_size (2048) must be divisible by tp (3)."
expect_in_message "Choose tp in {1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048}"

# (b) a 2 x 1 mesh on 3 ranks.
run_case mesh --d-model 48 --tokens 8 --tp 2 --dp 1
expect_in_message "[mesh] tp (2) x pp (1) x dp (1) = 2 must equal the world size (3)"
expect_in_message "--tp 3 --dp 1"

# (c) unknown flags are errors, not ignored.
run_case unknown-flag --d-model 48 --tokens 8 --no-such-flag 7
expect_in_message "[cli] "
expect_in_message "--no-such-flag"

# A flag's explicit value past int64: CLI11 throws std::out_of_range, which
# colrow reports as a flag error (found by cli_flags_fuzz).
run_case flag-value-range --d-model 48 --tokens 8 --no-bias=99999999999999999999
expect_in_message "[cli] a flag's value is past the range of a 64-bit integer"

# A thread count past what a rank may run.
run_case threads-range --d-model 48 --tokens 8 --threads 2000
expect_in_message "[threads] threads (2000) must be 0 (OMP_NUM_THREADS if set, else cores / ranks on this node) or a count up to 1024."

# (d) an activation colrow does not have.
run_case activation --d-model 48 --tokens 8 --activation relu
expect_in_message "[mlp] activation (relu) must be one of {gelu, gelu-erf, swiglu}"

# (e) no tokens to run; a width whose 4 x d_model hidden layer would overflow
# (found by cli_flags_fuzz).
run_case tokens --d-model 48 --tokens 0
expect_in_message "tokens (0) must be in [1, 1048576]"
run_case huge-width --d-model 4611686018427387904 --tokens 8
expect_in_message "d-model (4611686018427387904) and ffn-hidden (0) must be in [1, 65536] and [0, 262144]"

# (f) where to run: a device colrow does not know, a communicator it does not
# have, TF32 on the CPU, and a GPU where none can be used.
run_case device-name --d-model 48 --tokens 8 --device gpu
expect_in_message "[device] device (gpu) must be cpu, cuda or cuda:N."
run_case comm-name --d-model 48 --tokens 8 --comm gloo
expect_in_message "[dist] comm (gloo) must be auto, mpi, shm, nccl or staged."
run_case comm-for-gpu-on-cpu --d-model 48 --tokens 8 --comm nccl
expect_in_message "[dist] comm (nccl) carries GPU tensors, but device is cpu. Use --comm auto, mpi or shm on the CPU."
run_case comm-timeout --d-model 48 --tokens 8 --comm-timeout 0
expect_in_message "[device] comm_timeout (0 s) must be a positive number of seconds."
run_case tf32-on-cpu --d-model 48 --tokens 8 --tf32
expect_in_message "[device] tf32 applies to fp32 GEMMs on a GPU"
run_case attention-name --d-model 48 --tokens 8 --attention flash
expect_in_message "[attention] attention (flash) must be auto, fused or plain."
run_case fused-attention-on-cpu --d-model 48 --tokens 8 --attention fused
expect_in_message "[attention] attention (fused) has no CPU kernel"
run_case attention-backward-name --d-model 48 --tokens 8 --attention-backward atomic
expect_in_message "[attention] attention-backward (atomic) must be recompute or ordered."
run_case ordered-backward-on-cpu --d-model 48 --tokens 8 --attention-backward ordered
expect_in_message "[attention] attention-backward (ordered) is a backward of the GPU's fused bf16"
run_case epilogues-name --d-model 48 --tokens 8 --epilogues cublaslt
expect_in_message "[device] epilogues (cublaslt) must be fused or separate."
if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L 2>/dev/null | grep -q GPU; then
  echo "[no-gpu] skipped: this machine has a GPU"
else
  run_case no-gpu --d-model 48 --tokens 8 --device cuda
  expect_in_message "[device] "
  expect_in_message "use --device cpu"
fi

if [ "$failures" -ne 0 ]; then
  echo "error_paths_test: $failures check(s) failed" >&2
  exit 1
fi
echo "error_paths_test: all checks passed"
