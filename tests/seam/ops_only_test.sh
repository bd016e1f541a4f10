#!/usr/bin/env bash
# The device seam holds: src/nn and src/train call kernels only through
# kernels/ops.h (which dispatches on the tensor's device) and run no loop of
# threads of their own. What would tie the model to one backend: a name in a
# backend's namespace (cpu:: or cuda::, however the namespaces above it are
# spelled or aliased, and a using directive or an alias of it), a backend's
# header, an OpenMP pragma, header or runtime call, or a thread of its own
# (std::thread, std::jthread, std::async). Comments are not code: a line whose text
# starts with // is skipped. Fails naming every offending line.
set -uo pipefail
root=${1:?usage: ops_only_test.sh SOURCE_ROOT}
pattern='kernels::(cpu|cuda)\b|\b(cpu|cuda)::[A-Za-z_]|"kernels/(cpu|cuda)/|#\s*pragma\s+omp|<omp\.h>|\bomp_[a-z_]+\s*\(|std::(thread|jthread|async)\b|<(thread|future)>'
scan() {
  grep -rnE "$pattern" "$@" | grep -vE '^[^:]+:[0-9]+:\s*//'
}
offenders=$(scan "$root/src/nn" "$root/src/train" "$root/include/colrow/nn" "$root/include/colrow/train")
if [ -n "$offenders" ]; then
  echo "FAIL: nn/ and train/ must compute through kernels/ops.h only:"
  echo "$offenders"
  exit 1
fi
# And the check itself must be able to fail: each kind of offence is found
# where it belongs, in the backends, or in a planted sample.
grep -rqE '#\s*pragma\s+omp' "$root/src/kernels/cpu" || { echo "FAIL: the pragma pattern matches nothing"; exit 1; }
samples=(
  'kernels::cpu::gelu_forward(x, y);'
  'using namespace colrow::kernels::cpu;'
  'namespace backend = colrow::kernels::cuda;'
  '#include "kernels/cpu/gemm.h"'
  '#include <omp.h>'
  'const int n = omp_get_max_threads();'
  'std::thread worker([&] { run(); });'
  'namespace k = colrow::kernels; k::cpu::add(a, b, c);'
  'auto done = std::async(std::launch::async, [] {});'
  '#include <thread>'
)
sample_dir=$(mktemp -d)
trap 'rm -rf "$sample_dir"' EXIT
for s in "${samples[@]}"; do
  printf '%s\n' "$s" > "$sample_dir/sample.cpp"
  [ -n "$(scan "$sample_dir")" ] || { echo "FAIL: the check misses: $s"; exit 1; }
done
printf '  // kernels::cpu:: is named in a comment only\n' > "$sample_dir/sample.cpp"
[ -z "$(scan "$sample_dir")" ] || { echo "FAIL: the check flags a comment"; exit 1; }
echo "nn/ and train/ use kernels/ops.h only"
