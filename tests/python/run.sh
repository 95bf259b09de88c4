#!/usr/bin/env bash
# The Python package's tests (CTest python_package, label python): installs
# the client library of BUILD into BUILD/python-prefix, the package into a
# virtual environment BUILD/python-venv (`pip install ./python`: the build
# tools scikit-build-core and nanobind from the Python registry, NumPy and
# pytest from Debian, through --system-site-packages), then runs pytest here
# against BUILD's daemon. Exit 77 (skipped) when the build tools cannot be had.
#   bash tests/python/run.sh BUILD_DIR SOURCE_DIR [pytest args]
set -euo pipefail
build=$(cd "$1" && pwd)
src=$(cd "$2" && pwd)
shift 2
py=${PYTHON:-$(command -v /usr/bin/python3 || command -v python3)}
venv=$build/python-venv
prefix=$build/python-prefix
if [ ! -x "$venv/bin/python" ]; then
  "$py" -m venv --system-site-packages "$venv" || { echo "SKIP: no venv for $py (python3-venv)"; exit 77; }
fi
if ! "$venv/bin/python" -c 'import nanobind, scikit_build_core' 2> /dev/null; then
  "$venv/bin/pip" install -q "scikit-build-core>=0.10" "nanobind>=2.4" ||
    { echo "SKIP: scikit-build-core and nanobind are not installable (no Python registry)"; exit 77; }
fi
"$venv/bin/python" -c 'import numpy, pytest' || { echo "numpy and pytest missing (deploy/install-deps.sh)" >&2; exit 1; }
for component in libcollectived-client libcollectived-dev; do
  cmake --install "$build" --prefix "$prefix" --component "$component" > /dev/null
done
CMAKE_PREFIX_PATH=$prefix "$venv/bin/pip" install -q --no-build-isolation --no-deps "$src/python"
cd "$src/tests/python"
COLLECTIVED_DAEMON_BIN=$build/bin/collectived exec "$venv/bin/python" -m pytest -q -p no:cacheprovider "$@"
