#!/usr/bin/env bash
# Configures and builds collectived into build/ (Ninja when present).
# CUDA sources are compiled whenever nvcc is found (no GPU needed).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${COLLECTIVED_BUILD_DIR:-$root/build}
generator=()
command -v ninja >/dev/null && generator=(-G Ninja)
if [ ! -f "$build/CMakeCache.txt" ]; then
  cmake -S "$root" -B "$build" "${generator[@]}" -DCMAKE_BUILD_TYPE=RelWithDebInfo "$@"
fi
cmake --build "$build" --parallel "$(nproc)"
