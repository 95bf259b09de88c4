#!/usr/bin/env bash
# Quick start: install what is missing, build, run the example job (a private
# collectived and 4 client processes doing all-reduce and all-gather, each
# mode) and stop the daemon. Backend: host (CPU); the CUDA backend is issue 3.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${COLLECTIVED_BUILD_DIR:-$root/build}
bash "$root/deploy/install-deps.sh"
bash "$root/deploy/build.sh"
exec bash "$root/tests/run_example.sh" "$build/bin/collectived" "$build/bin/allreduce_allgather" \
  "$build/bin/collectivectl" "${COLLECTIVED_EXAMPLE_COUNT:-1048576}"
