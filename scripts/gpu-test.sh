#!/usr/bin/env bash
# Builds colrow with its CUDA backend into build-cuda/ and runs the GPU suite
# (ctest label `gpu`: every CUDA kernel against its CPU twin, the staged and
# NCCL communicators, the allocator, the whole model against the CPU at tp 1
# and 2, and training curves, repeatability and resume through the CLI), then
# the whole CPU suite of that build. On a machine
# without a GPU the GPU tests report themselves skipped. Through the device
# tool: build here, run scripts/gpu-pack.sh, carry build-gpu, and run
# `scripts/gpu-test.sh --packed` there (the GPU suite alone). Arguments after
# the mode go to ctest, so that a device call of at most 10 minutes can take
# part of the suite: `--packed -E cli_` (the kernels, communicators and model,
# a few minutes), then `--packed -R cli_` (the CLI runs: 300 training steps
# each way in bf16). Where $OUT is set (the device tool), ctest's log of every
# test's output is copied there too.
#   scripts/gpu-test.sh [--no-build | --packed] [ctest arguments...]   (ctest
#   arguments only after a mode: the first argument is the mode)
set -euo pipefail
cd "$(dirname "$0")/.."
mode=${1:-}
case "$mode" in
  "" | --no-build | --packed) ;;
  *) echo "gpu-test.sh: unknown argument '$mode' (use --no-build or --packed)" >&2; exit 2 ;;
esac
shift || true
if [ -z "$mode" ]; then
  cmake -S . -B build-cuda -G Ninja -DCMAKE_BUILD_TYPE=Release -DCOLROW_WERROR=ON -DCOLROW_CUDA=ON >/dev/null
  cmake --build build-cuda
fi
source scripts/env.sh
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>/dev/null || echo "gpu-test: no nvidia-smi"
if [ "$mode" = --packed ]; then
  # gpu-pack.sh wrote @ROOT@ where the packing checkout's path stood.
  sed -i "s#@ROOT@#$(pwd)#g" build-gpu/tests/CTestTestfile.cmake
  (cd build-gpu && ctest --output-on-failure -j4 -L gpu "$@") || status=$?
  [ -z "${OUT:-}" ] || cp build-gpu/Testing/Temporary/LastTest.log "$OUT/gpu-tests-full.log" 2>/dev/null || true
  [ "${status:-0}" = 0 ] || { echo "gpu-test.sh: ctest failed ($status)"; exit "$status"; }
else
  (cd build-cuda && ctest --output-on-failure -j4 -L gpu "$@")
  (cd build-cuda && ctest --output-on-failure -j "$(nproc)" -LE gpu)
fi
echo "gpu-test.sh: done"
