#!/usr/bin/env bash
# Quick start: install what is missing, build, run the example job (a private
# collectived and 4 client processes doing all-reduce and all-gather, each
# mode) and stop the daemon. The daemon picks its backend: cuda when a GPU is
# visible (then 4 GPU client processes run too), host otherwise.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${COLLECTIVED_BUILD_DIR:-$root/build}
bash "$root/deploy/install-deps.sh"
bash "$root/deploy/build.sh"
exec bash "$root/tests/run_example.sh" "$build/bin/collectived" "$build/bin/allreduce_allgather" \
  "$build/bin/collectivectl" "${COLLECTIVED_EXAMPLE_COUNT:-1048576}" "$build/bin/gpu_allreduce_allgather"
