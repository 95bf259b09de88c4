#!/usr/bin/env bash
# Installs the Debian packages collectived builds and tests with, skipping
# those already present. Needs root (or sudo). Debian 12 / Ubuntu 24.04.
set -euo pipefail
packages=(
  build-essential cmake ninja-build pkg-config
  libgrpc++-dev protobuf-compiler-grpc libprotobuf-dev protobuf-compiler
  libspdlog-dev libcli11-dev libgtest-dev prometheus-cpp-dev curl  # curl: the metrics test scrapes with it
  libopenmpi-dev openmpi-bin libucx-dev ucx-utils libsystemd-dev  # ucx_perftest: the network's own limit
  hipcc libamdhip64-dev   # ROCm 5.2: the GPU backend built for AMD (tests/hip_backend_build.sh)
  python3-matplotlib      # for bench/plot.py (PNG plots of collective-bench output; bench/plot_test.sh)
  clang libclang-rt-14-dev spin  # tests/sanitizers (ASan+UBSan, libFuzzer) and ring/model (SPIN): docs/proof.md
  python3-dev python3-venv python3-numpy python3-pytest  # the Python package (python/, tests/python)
)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
  echo "install-deps: all ${#packages[@]} packages present"
  exit 0
fi
sudo=""
if [ "$(id -u)" -ne 0 ]; then
  command -v sudo >/dev/null || { echo "install-deps: need root or sudo to install: ${missing[*]}" >&2; exit 1; }
  sudo=sudo
fi
echo "install-deps: installing ${missing[*]}"
$sudo apt-get update -qq
DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
echo "install-deps: done"
