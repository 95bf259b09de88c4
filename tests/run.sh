#!/usr/bin/env bash
# Installs what is missing, builds, and runs the whole suite through CTest.
# GPU tests (label gpu) report themselves skipped where no GPU is present.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${COLLECTIVED_BUILD_DIR:-$root/build}
bash "$root/deploy/install-deps.sh"
bash "$root/deploy/build.sh"
# Open MPI refuses root without these; CI runs as root.
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
cd "$build"
ctest --output-on-failure --timeout 900 "$@"
