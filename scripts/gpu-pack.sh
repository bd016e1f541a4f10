#!/usr/bin/env bash
# Packs what the GPU suite needs from a CUDA build (build-cuda/ by default) into
# build-gpu/: the colrow binary, the GPU test executables and a ctest file that
# lists only the tests labelled gpu, with this checkout's path replaced by a
# placeholder. The whole build is over the device tool's 64 MiB; this is ~25 MiB.
# On the GPU machine: `scripts/gpu-test.sh --packed` (it fills in the path).
#   scripts/gpu-pack.sh [BUILD_DIR]
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
build=${1:-build-cuda}
pack=build-gpu
rm -rf "$pack"; mkdir -p "$pack/tests"
cp "$build/colrow" "$pack/"
tests=$(awk '/LABELS "gpu"/ { match($0, /\[=\[[^]]*\]=\]/); print substr($0, RSTART + 3, RLENGTH - 6) }' \
  "$build/tests/CTestTestfile.cmake")
for t in $tests; do
  exe="$build/tests/${t%_np[0-9]*}"
  [ -f "$exe" ] && cp -u "$exe" "$pack/tests/"
  grep -F "[=[$t]=]" "$build/tests/CTestTestfile.cmake" >> "$pack/tests/CTestTestfile.cmake"
done
sed -i "s#$root/$build#@ROOT@/$pack#g; s#$root#@ROOT@#g" "$pack/tests/CTestTestfile.cmake"
echo 'subdirs("tests")' > "$pack/CTestTestfile.cmake"
echo "gpu-pack.sh: $(echo "$tests" | wc -w) GPU tests, $(du -sh "$pack" | cut -f1) in $pack/"
