#!/usr/bin/env bash
# Installs what is missing, builds, and runs every test (single-rank and
# multi-rank through ctest), then builds the downstream find_package(colrow)
# example against an installed copy. Exits non-zero on any failure.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/install-deps.sh
./scripts/build.sh
source scripts/env.sh
(cd build && ctest --output-on-failure -j "$(nproc)")

# The installed package must stay usable by other projects.
rm -rf build/install build/downstream
cmake --install build --prefix build/install >/dev/null
cmake -S examples/downstream -B build/downstream -G Ninja -DCMAKE_PREFIX_PATH="$PWD/build/install" >/dev/null
cmake --build build/downstream >/dev/null
build/downstream/tp_mlp_example
echo "test.sh: all tests passed"
