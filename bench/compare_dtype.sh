#!/usr/bin/env bash
# colrow's training step in bf16 beside fp32, on the same machine and device,
# interleaved rounds: what mixed precision costs or gains there
# (bench/compare_flags.sh with --dtype fp32 and --dtype bf16).
#   bench/compare_dtype.sh                ROUNDS=2 STEPS=8 MODEL=gpt2-byte-small
#   DEVICE=cuda MODEL=gpt2-124m BATCH=16 SEQ=1024 bench/compare_dtype.sh
#   EXTRA="--recompute-activation" adds flags to every colrow run.
# Prints each round's fp32 and bf16 tokens/s and peak memory, their ratio,
# and its median.
set -euo pipefail
cd "$(dirname "$0")"
A_NAME=fp32 A="--dtype fp32" B_NAME=bf16 B="--dtype bf16" exec ./compare_flags.sh
