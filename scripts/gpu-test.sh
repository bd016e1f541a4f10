#!/usr/bin/env bash
# Builds colrow with its CUDA backend into build-cuda/ and runs the GPU suite
# (ctest label `gpu`: every CUDA kernel against its CPU twin, the staged and
# NCCL communicators, the allocator, the whole model against the CPU at tp 1
# and 2, and training curves, repeatability and resume through the CLI), then
# the whole CPU suite of that build. On a machine
# without a GPU the GPU tests report themselves skipped. Through the device
# tool: build here, carry build-cuda, run `scripts/gpu-test.sh --no-build`.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ "${1:-}" != "--no-build" ]; then
  cmake -S . -B build-cuda -G Ninja -DCMAKE_BUILD_TYPE=Release -DCOLROW_WERROR=ON -DCOLROW_CUDA=ON >/dev/null
  cmake --build build-cuda
fi
source scripts/env.sh
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>/dev/null || echo "gpu-test: no nvidia-smi"
(cd build-cuda && ctest --output-on-failure -L gpu)
(cd build-cuda && ctest --output-on-failure -j "$(nproc)" -LE gpu)
echo "gpu-test.sh: done"
