#!/usr/bin/env bash
# Configures (Release, warnings as errors) and builds colrow into build/.
# The CUDA backend is built when the toolkit is found (CMake's COLROW_CUDA,
# AUTO by default); COLROW_CUDA=ON in the environment requires it (CI: the
# CUDA code must keep compiling), OFF leaves a CPU-only build.
set -euo pipefail
cd "$(dirname "$0")/.."
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -DCOLROW_WERROR=ON \
  ${COLROW_CUDA:+-DCOLROW_CUDA="$COLROW_CUDA"} >/dev/null
cmake --build build
