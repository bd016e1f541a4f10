#!/usr/bin/env bash
# Builds colrow with its CUDA backend into build-cuda/ and runs the GPU suite
# (ctest label `gpu`: every CUDA kernel against its CPU twin, the staged and
# NCCL communicators, the allocator, the whole model against the CPU at tp 1
# and 2, and training curves, repeatability and resume through the CLI), then
# the whole CPU suite of that build. On a machine
# without a GPU the GPU tests report themselves skipped. Through the device
# tool: build here, run scripts/gpu-pack.sh, carry build-gpu, and run
# `scripts/gpu-test.sh --packed` there (the GPU suite alone).
#   scripts/gpu-test.sh [--no-build | --packed]
set -euo pipefail
cd "$(dirname "$0")/.."
mode=${1:-}
case "$mode" in
  "" | --no-build | --packed) ;;
  *) echo "gpu-test.sh: unknown argument '$mode' (use --no-build or --packed)" >&2; exit 2 ;;
esac
if [ -z "$mode" ]; then
  cmake -S . -B build-cuda -G Ninja -DCMAKE_BUILD_TYPE=Release -DCOLROW_WERROR=ON -DCOLROW_CUDA=ON >/dev/null
  cmake --build build-cuda
fi
source scripts/env.sh
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>/dev/null || echo "gpu-test: no nvidia-smi"
if [ "$mode" = --packed ]; then
  # gpu-pack.sh wrote @ROOT@ where the packing checkout's path stood.
  sed -i "s#@ROOT@#$(pwd)#g" build-gpu/tests/CTestTestfile.cmake
  (cd build-gpu && ctest --output-on-failure -j4 -L gpu)
else
  (cd build-cuda && ctest --output-on-failure -j4 -L gpu)
  (cd build-cuda && ctest --output-on-failure -j "$(nproc)" -LE gpu)
fi
echo "gpu-test.sh: done"
