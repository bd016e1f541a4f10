#!/usr/bin/env bash
# The device seam holds: src/nn and src/train call kernels only through
# kernels/ops.h (which dispatches on the tensor's device) and run no OpenMP
# loop of their own. A kernels::cpu:: call or a "#pragma omp" there would tie
# the model to the CPU. Fails naming every offending line.
set -uo pipefail
root=${1:?usage: ops_only_test.sh SOURCE_ROOT}
offenders=$(grep -rnE 'kernels::cpu::|#\s*pragma\s+omp|"kernels/cpu/' "$root/src/nn" "$root/src/train" \
            "$root/include/colrow/nn" "$root/include/colrow/train")
if [ -n "$offenders" ]; then
  echo "FAIL: nn/ and train/ must compute through kernels/ops.h only:"
  echo "$offenders"
  exit 1
fi
# And the check itself must be able to fail: it finds the CPU kernels' own pragmas.
grep -rqE '#\s*pragma\s+omp' "$root/src/kernels/cpu" || { echo "FAIL: the pattern matches nothing"; exit 1; }
echo "nn/ and train/ use kernels/ops.h only"
