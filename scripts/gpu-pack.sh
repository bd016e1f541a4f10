#!/usr/bin/env bash
# Packs what the GPU suite needs from a CUDA build (build-cuda/ by default) into
# build-gpu/: the colrow binary, the GPU test executables and a ctest file that
# lists only the tests labelled gpu, with this checkout's path replaced by a
# placeholder; beside them the benchmark's inputs a GPU machine lacks: the
# PyTorch peer (peers/, from ../shared/peers when present) and Debian's Jargon
# File; Debian's OpenMP build of OpenBLAS (xz, 4 MiB). The whole build is over
# the device tool's 64 MiB; this is ~45 MiB (28 GPU tests, 2026-11-24).
# On the GPU machine: `scripts/gpu-test.sh --packed` (it fills in the path),
# `DATA=build-gpu/jargon.txt.gz scripts/bench-gpu.sh build-gpu build-gpu/peers/torch_gpt2_gpu.py`.
#   scripts/gpu-pack.sh [BUILD_DIR]
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
build=${1:-build-cuda}
pack=build-gpu
rm -rf "$pack"; mkdir -p "$pack/tests"
cp "$build/colrow" "$pack/"
# Every test whose labels include gpu ("gpu", or "multirank;gpu" for the
# tests that run on two ranks).
tests=$(awk '/LABELS "([^"]*;)?gpu(;[^"]*)?"/ { match($0, /\[=\[[^]]*\]=\]/); print substr($0, RSTART + 3, RLENGTH - 6) }' \
  "$build/tests/CTestTestfile.cmake")
if [ -z "$tests" ]; then
  echo "gpu-pack.sh: $build lists no gpu-labelled test; is it a CUDA build (cmake -DCOLROW_CUDA=ON) with its tests?" >&2
  exit 1
fi
for t in $tests; do
  exe="$build/tests/${t%_np[0-9]*}"
  # A gtest executable (a script test such as cli_train_cuda runs colrow itself).
  if grep -qF "\"$root/$exe\"" "$build/tests/CTestTestfile.cmake"; then
    [ -f "$exe" ] || { echo "gpu-pack.sh: $exe is missing; build $build first" >&2; exit 1; }
    cp -u "$exe" "$pack/tests/"
  fi
  grep -F "[=[$t]=]" "$build/tests/CTestTestfile.cmake" >> "$pack/tests/CTestTestfile.cmake"
done
if [ -d ../shared/peers ]; then
  mkdir -p "$pack/peers" && cp ../shared/peers/*.py ../shared/peers/*.sh "$pack/peers/"
fi
# Debian's OpenMP build of OpenBLAS, the one colrow links: the GPU machine has
# only its distribution's pthreads build, which bench/cpu16.sh compares it with.
openblas=$(ldd "$build/colrow" | awk '/libopenblas/ { print $3 }')
if [ -n "$openblas" ]; then
  mkdir -p "$pack/openblas-openmp" && xz -T0 -c "$openblas" > "$pack/openblas-openmp/libopenblas.so.0.xz"
fi
corpus=/usr/share/doc/jargon-text/jargon.txt.gz
[ -f "$corpus" ] && cp "$corpus" "$pack/"
sed -i "s#$root/$build#@ROOT@/$pack#g; s#$root#@ROOT@#g" "$pack/tests/CTestTestfile.cmake"
echo 'subdirs("tests")' > "$pack/CTestTestfile.cmake"
echo "gpu-pack.sh: $(echo "$tests" | wc -w) GPU tests, $(du -sh "$pack" | cut -f1) in $pack/"
