#!/usr/bin/env bash
# What a session with a lent GPU runs, in parts that each fit one device call
# (10 minutes at most; part lengths as measured on the H200 on 2026-11-28
# where given, else estimated). Build CUDA here (scripts/build.sh finds nvcc), pack it with
# `scripts/gpu-pack.sh build`, then per part, carrying build-gpu.
# Since 2026-11-28 a session gets 15 minutes of device time in all, the
# machine's start-up included, so one call is what a session can count on:
#   scripts/gpu-agenda.sh first    the whole GPU suite (each test capped at
#                                  120 s), the linear test with cuBLASLt's
#                                  log, issue 8's bf16 step beside PyTorch's
#                                  bf16 eager and torch.compile, and its
#                                  --profile; each stage under a timeout, 9
#                                  minutes at most (timeout_s 560), about 3
#                                  on the H200 (2026-11-28: the suite without
#                                  the CLI took 45 s, the CLI runs 30 s, the
#                                  bench with eager only 45 s), logs as they
#                                  finish; then the output head in one chunk
#                                  (--logits-chunk-mib 0) beside the bench's
#                                  default chunks, and the --profile again
#                                  with --attention-backward ordered (dQ in
#                                  the dK, dV kernel: is it faster?)
# Then, in later sessions (2026-11-28 on an H200 ran first, tests, cli,
# bench and the --cuda-graph A/B at 124M; see docs/performance.md), in this
# order:
#   scripts/gpu-agenda.sh tests    the GPU suite without the CLI runs: every
#                                  CUDA kernel against its CPU twin, the
#                                  communicators, the model, CUDA graphs; then
#                                  the linear test again with cuBLASLt's log
#   scripts/gpu-agenda.sh cli      the CLI GPU runs (fp32 curves at three
#                                  meshes, --cuda-graph, 300 bf16 steps)
#   scripts/gpu-agenda.sh bench    issue 8's benchmark: bf16 beside PyTorch's
#                                  bf16 and bf16-compile, then --profile 5
#   scripts/gpu-agenda.sh ab       --epilogues, --cuda-graph,
#                                  --logits-chunk-mib 0 and
#                                  --attention-backward ordered, each A/B
#   scripts/gpu-agenda.sh attention  Nsight Compute on the tensor-core attention
#                                  kernels (forward, dK/dV, dQ): what stalls them
#   scripts/gpu-agenda.sh sweep    the d_model sweep beside PyTorch (not run yet)
#   scripts/gpu-agenda.sh cpu16 PHASE   issue 10 on the machine's CPU cores
#                                  (bench/cpu16.sh pools|scaling|comm|profile|train;
#                                  not run yet)
# Each part writes its log (and ctest's or the bench's files) under $OUT,
# which the device tool brings back; docs/performance.md says what each
# measurement is for.
set -uo pipefail
cd "$(dirname "$0")/.."
part=${1:?usage: scripts/gpu-agenda.sh first|tests|cli|bench|ab|attention|sweep|cpu16 [PHASE]}
out=${OUT:-/tmp/gpu-agenda}
mkdir -p "$out"
[ -x build-gpu/colrow ] || { echo "gpu-agenda.sh: no build-gpu/colrow; run scripts/gpu-pack.sh here and carry build-gpu" >&2; exit 1; }
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
data=build-gpu/jargon.txt.gz
peer=build-gpu/peers/torch_gpt2_gpu.py

case "$part" in
  first)
    # Stage timeouts add up to 515 s, inside the 560 the call is given.
    timeout 200 scripts/gpu-test.sh --packed --timeout 120 -j6 2>&1 | tee "$out/tests.log"
    status=${PIPESTATUS[0]}
    CUBLASLT_LOG_LEVEL=2 timeout 20 build-gpu/tests/kernels_cuda_linear_test > "$out/linear-cublaslt.log" 2>&1
    DATA=$data MODES=bf16 STEPS=12 timeout 160 scripts/bench-gpu.sh build-gpu "$peer" 2>&1 | tee "$out/bench-bf16.log"
    [ "${PIPESTATUS[0]}" = 0 ] || status=1
    timeout 45 build-gpu/colrow train --device cuda --dtype bf16 --model gpt2-124m --batch 16 --seq-len 1024 \
      --steps 8 --data "$data" --profile 5 2>&1 | tee "$out/profile-bf16.log"
    # The output head in one chunk (all 1.65 GB of bf16 logits at once), to
    # set beside the bench's default chunks: tokens/s and peak memory.
    timeout 45 build-gpu/colrow train --device cuda --dtype bf16 --model gpt2-124m --batch 16 --seq-len 1024 \
      --steps 12 --data "$data" --logits-chunk-mib 0 2>&1 | tee "$out/logits-one-chunk.log"
    # dQ summed in key-tile order by the dK, dV kernel (5 products, not 7):
    # the attention phase beside the default profile's.
    timeout 45 build-gpu/colrow train --device cuda --dtype bf16 --model gpt2-124m --batch 16 --seq-len 1024 \
      --steps 8 --data "$data" --profile 5 --attention-backward ordered 2>&1 | tee "$out/profile-bf16-ordered.log"
    exit "$status"
    ;;
  tests)
    scripts/gpu-test.sh --packed -E '^cli_' 2>&1 | tee "$out/tests.log"
    status=${PIPESTATUS[0]}
    CUBLASLT_LOG_LEVEL=2 build-gpu/tests/kernels_cuda_linear_test > "$out/linear-cublaslt.log" 2>&1
    exit "$status"
    ;;
  cli)
    scripts/gpu-test.sh --packed -R '^cli_' 2>&1 | tee "$out/cli.log"
    exit "${PIPESTATUS[0]}"
    ;;
  bench)
    DATA=$data MODES=bf16 scripts/bench-gpu.sh build-gpu "$peer" 2>&1 | tee "$out/bench-bf16.log"
    status=${PIPESTATUS[0]}
    build-gpu/colrow train --device cuda --dtype bf16 --model gpt2-124m --batch 16 --seq-len 1024 \
      --steps 8 --data "$data" --profile 5 2>&1 | tee "$out/profile-bf16.log"
    [ "${PIPESTATUS[0]}" = 0 ] || status=1
    exit "$status"
    ;;
  ab)
    BUILD=build-gpu A_NAME=fused A="" B_NAME=separate B="--epilogues separate" DEVICE=cuda \
      EXTRA="--dtype bf16 --data $data" MODEL=gpt2-124m BATCH=16 SEQ=1024 \
      bench/compare_flags.sh 2>&1 | tee "$out/ab-epilogues.log"
    status=${PIPESTATUS[0]}
    for m in "gpt2-byte-small 8 256" "gpt2-124m 16 1024"; do
      set -- $m
      STEPS=20 BUILD=build-gpu A_NAME=eager A="" B_NAME=graph B="--cuda-graph" DEVICE=cuda \
        EXTRA="--dtype bf16 --data $data" MODEL=$1 BATCH=$2 SEQ=$3 \
        bench/compare_flags.sh 2>&1 | tee "$out/ab-cuda-graph-$1.log"
      [ "${PIPESTATUS[0]}" = 0 ] || status=1
    done
    STEPS=20 BUILD=build-gpu A_NAME=chunked A="" B_NAME=one-chunk B="--logits-chunk-mib 0" DEVICE=cuda \
      EXTRA="--dtype bf16 --data $data" MODEL=gpt2-124m BATCH=16 SEQ=1024 \
      bench/compare_flags.sh 2>&1 | tee "$out/ab-logits-chunks.log"
    [ "${PIPESTATUS[0]}" = 0 ] || status=1
    STEPS=20 BUILD=build-gpu A_NAME=recompute A="" B_NAME=ordered B="--attention-backward ordered" \
      DEVICE=cuda EXTRA="--dtype bf16 --data $data" MODEL=gpt2-124m BATCH=16 SEQ=1024 \
      bench/compare_flags.sh 2>&1 | tee "$out/ab-attention-backward.log"
    [ "${PIPESTATUS[0]}" = 0 ] || status=1
    exit "$status"
    ;;
  attention)
    # Where the tensor-core attention kernels stall, before tuning them:
    # Nsight Compute on one forward, dK/dV and dQ launch each at GPT-2 124M's
    # B 16 x T 1024 (head_dim 64): speed of light, occupancy, warp stalls,
    # memory and the tensor pipe. About a minute; ncu from the toolkit.
    ncu=$(command -v ncu || echo /usr/local/cuda/bin/ncu)
    timeout 300 "$ncu" --kernel-name regex:'tc_(forward|backward)' --launch-count 3 \
      --section SpeedOfLight --section Occupancy --section LaunchStats --section WarpStateStats \
      --section MemoryWorkloadAnalysis --section ComputeWorkloadAnalysis \
      --metrics sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active,sm__inst_executed_pipe_xu.avg.pct_of_peak_sustained_active \
      build-gpu/colrow train --device cuda --dtype bf16 --model gpt2-124m --batch 16 --seq-len 1024 \
      --steps 1 --eval-windows 1 --data "$data" 2>&1 | tee "$out/attention-ncu.log"
    exit "${PIPESTATUS[0]}"
    ;;
  sweep)
    DATA=$data DEVICE=cuda DTYPE=bf16 PEER_MODE=bf16-compile \
      bench/sweep_d_model.sh build-gpu 2>&1 | tee "$out/sweep.log"
    exit "${PIPESTATUS[0]}"
    ;;
  cpu16)
    bench/cpu16.sh "${2:?a phase: pools|scaling|comm|profile|train}" "$out/cpu16-$2"
    ;;
  *)
    echo "gpu-agenda.sh: unknown part '$part' (first, tests, cli, bench, ab, attention, sweep or cpu16)" >&2
    exit 2
    ;;
esac
