#!/usr/bin/env bash
# Configures (Release, warnings as errors) and builds colrow into build/.
set -euo pipefail
cd "$(dirname "$0")/.."
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -DCOLROW_WERROR=ON >/dev/null
cmake --build build
