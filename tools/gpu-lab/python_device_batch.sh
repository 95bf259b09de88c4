#!/usr/bin/env bash
# Issue 22 on the GPU machine: builds the Python package there against the
# bundle's client library (python-prefix, packed by make_gpu_bundle.sh) for
# the machine's own Python and torch, then runs tests/python (host tests and
# the GPU tests: torch eager, CUDA graphs, torch.compile; 2 and 4 ranks under
# a private MPS), the Python per-op bench (BENCH=1) and, in the same run, the
# C++ client's figures through a daemon of the same build (collective-bench).
#   BENCH=1 ROUNDS=2 bash gpu-bundle/python_device_batch.sh
source "$(dirname "$0")/gpu_bundle_env.sh"
bundle=$PWD
repo=$(cd .. && pwd)
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
work=$(mktemp -d)
start_private_mps "$work"
# A step cut off by its timeout still stops its MPS server and removes its files.
trap 'echo quit | nvidia-cuda-mps-control; rm -rf "$work"' EXIT
trap 'exit 143' TERM INT
{
  echo "## $(date -u +%FT%TZ) $(python3 --version) torch $(python3 -c 'import torch; print(torch.__version__)') nanobind $(python3 -c 'import nanobind; print(nanobind.__version__)')"
  echo "## pip install ./python"
  CMAKE_PREFIX_PATH=$bundle/python-prefix python3 -m pip install -q --no-build-isolation --no-deps \
    --target "$work/site" "$repo/python" 2>&1 | tail -20
  export PYTHONPATH=$work/site
  export COLLECTIVED_DAEMON_BIN=$bundle/bin/collectived
  export COLLECTIVED_DAEMON_ARGS="--backend cuda --max-message-bytes 16777216"
  echo "## pytest tests/python"
  (cd "$repo/tests/python" && timeout 420 python3 -m pytest -q -p no:cacheprovider -rs . 2>&1 | tail -40)
  if [ -n "${BENCH:-}" ]; then
    echo "## probe: the Python path's steps before the native call"
    timeout 60 python3 "$repo/tools/gpu-lab/python_overhead_probe.py" 2>&1 | tail -12
    # ROUNDS alternates the two benches (Python, C++, Python, C++, ...): the
    # C++ figure alone moved 3-8 us between calls on the H100.
    for round in $(seq "${ROUNDS:-1}"); do
    echo "## bench: Python (round $round)"
    (cd "$repo/tests/python" && COLLECTIVED_PY_BENCH=1 timeout 200 python3 -m pytest -q -s -p no:cacheprovider \
      -k bench test_gpu.py 2>&1 | grep -E "BENCH|passed|failed|Error")
    echo "## bench: the C++ client (collective-bench -M 1, one rank per process, same daemon flags; round $round)"
    "$bundle/bin/collectived" --socket "$work/c.sock" $COLLECTIVED_DAEMON_ARGS --log-level warn > "$work/d.log" 2>&1 &
    d=$!
    for _ in $(seq 200); do [ -S "$work/c.sock" ] && break; sleep 0.05; done
    for np in 2 4; do
      for z in 0 1; do
        # "0 -Y 1" / "0 -Y 2": eager with the host waiting for each op (its stream / its handle: the
        # Python loop waits on the handle).
        for g in "0" "0 -Y 1" "0 -Y 2" "10"; do
          timeout 60 mpirun --oversubscribe --bind-to none -np $np -x LD_LIBRARY_PATH -x CUDA_MPS_PIPE_DIRECTORY \
            -x CUDA_MPS_LOG_DIRECTORY "$bundle/bin/collective-bench" -D "$work/c.sock" -M 1 -z $z -k "c$np$z${g// /}r$round" \
            -b 16K -e 16K -n 20 -w 5 -c 1 -G $g 2>&1 | grep -v "^# least" | sed "s/^/np=$np z=$z G=$g: /"
        done
      done
    done
    kill $d; wait $d
    done
  fi
} 2>&1 | tee "$out/python.txt"
