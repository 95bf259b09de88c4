#!/usr/bin/env bash
# PyTorch, unmodified, on collectived: starts a cuda-backend daemon (and a
# private MPS server, unless one is named), then runs torch_nccl_check.py
# under torchrun with LD_PRELOAD=libcollectived_nccl.so: the checks on 4
# ranks sharing the GPU, a DDP step on 2, and with BENCH="2 4 8" the
# all_reduce timings at BENCH_SIZES. Exit 77 (skipped) without torch or a GPU.
#   bash tests/frameworks/run_torch_nccl.sh
# Binaries: COLLECTIVED_BUILD_DIR (default build/), or COLLECTIVED_DAEMON_BIN
# and COLLECTIVED_NCCL_LIB.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
build=${COLLECTIVED_BUILD_DIR:-$here/../../build}
daemon=${COLLECTIVED_DAEMON_BIN:-$build/bin/collectived}
lib=${COLLECTIVED_NCCL_LIB:-$build/lib/libcollectived_nccl.so}
if ! python3 -c 'import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)' 2> /dev/null; then
  echo "SKIP: no PyTorch with a visible CUDA GPU here"
  exit 77
fi
[ -f "$lib" ] || { echo "no $lib (build the project first)" >&2; exit 1; }
work=$(mktemp -d)
daemon_pid=""
mps_started=""
cleanup() {
  [ -n "$daemon_pid" ] && kill "$daemon_pid" 2> /dev/null && wait "$daemon_pid" 2> /dev/null
  [ -n "$mps_started" ] && echo quit | nvidia-cuda-mps-control > /dev/null 2>&1
  rm -rf "$work"
}
trap cleanup EXIT
# Ranks in separate processes run their kernels concurrently only under MPS.
if [ -z "${CUDA_MPS_PIPE_DIRECTORY:-}" ] && command -v nvidia-cuda-mps-control > /dev/null; then
  export CUDA_MPS_PIPE_DIRECTORY=$work/mps-pipe CUDA_MPS_LOG_DIRECTORY=$work/mps-log
  mkdir -p "$CUDA_MPS_PIPE_DIRECTORY" "$CUDA_MPS_LOG_DIRECTORY"
  nvidia-cuda-mps-control -d && mps_started=1
fi
"$daemon" --socket "$work/c.sock" --backend cuda --max-message-bytes "${MAX_MESSAGE_BYTES:-16777216}" \
  --log-level warn > "$work/daemon.log" 2>&1 &
daemon_pid=$!
for _ in $(seq 200); do [ -S "$work/c.sock" ] && break; sleep 0.05; done
export COLLECTIVED_SOCKET=$work/c.sock
torchrun() {
  local np=$1
  shift
  LD_PRELOAD=$lib python3 -m torch.distributed.run --standalone --nproc-per-node "$np" "$here/torch_nccl_check.py" "$@"
}
status=0
if [ -z "${SKIP_CHECKS:-}" ]; then
  echo "## checks: 4 processes on one GPU"
  torchrun 4 check || status=1
  echo "## DDP step: 2 processes"
  torchrun 2 ddp || status=1
fi
sizes=${BENCH_SIZES:-16384,1048576,67108864,1073741824}
for np in ${BENCH:-}; do
  echo "## bench: $np processes, torch through the library"
  torchrun "$np" bench "$sizes" "${BENCH_ITERS:-200}" || status=1
  # The library alone, no framework: a program written against nccl.h
  # (nccl_check --mode bench), timed as collective-bench times the C++ client.
  check_bin=${COLLECTIVED_NCCL_CHECK_BIN:-$build/bin/nccl_check}
  if [ -n "${CPP_BENCH:-}" ] && [ -x "$check_bin" ]; then
    echo "## bench: $np processes, a program against nccl.h (nccl_check --mode bench)"
    mkdir -p "$work/ids-$np"
    mpirun --oversubscribe --bind-to none -np "$np" -x COLLECTIVED_SOCKET -x LD_LIBRARY_PATH \
      -x CUDA_MPS_PIPE_DIRECTORY -x CUDA_MPS_LOG_DIRECTORY "$check_bin" --mode bench --dir "$work/ids-$np" \
      --bytes "$sizes" 2>&1 | grep -v "^PASS" || status=1
  fi
  # The yardstick in the same run: the C++ client on the same daemon, the
  # same path (cudaMalloc buffers, staged), one rank per process.
  if [ -n "${CPP_BENCH:-}" ]; then
    echo "## bench: $np processes, the C++ client (collective-bench -M 1 -z 0), eager then graph-replayed"
    for s in ${sizes//,/ }; do
      for graph in 0 20; do
        mpirun --oversubscribe --bind-to none -np "$np" -x COLLECTIVED_SOCKET -x LD_LIBRARY_PATH \
          -x CUDA_MPS_PIPE_DIRECTORY -x CUDA_MPS_LOG_DIRECTORY "$CPP_BENCH" -D "$COLLECTIVED_SOCKET" -M 1 -z 0 \
          -k "cpp-$np-$s-$graph" -b "$s" -e "$s" -n 20 -w 5 -c 1 -G "$graph" 2>&1 | grep -v "^# least" || status=1
      done
    done
  fi
done
if [ "$status" -ne 0 ]; then
  echo "--- daemon log ---"
  tail -50 "$work/daemon.log"
fi
exit $status
