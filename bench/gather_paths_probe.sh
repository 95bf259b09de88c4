#!/usr/bin/env bash
# On the GPU machine: all-gather at 8 ranks, where the SM kernels stay just
# under 85 % of the copy ceiling. Compares the in-process kernel at one and two
# blocks per SM (is it short of warps?) and, under MPS, the daemon-executed
# fused kernel against the copy-engine path (peer copies, no SMs).
#   bench/gather_paths_probe.sh BIN
set -u
bin=$(cd "$1" && pwd)
work=$(mktemp -d)
sock=$work/c.sock
bench() { "$bin/collective-bench" "$@" 2>&1 | grep -v "^# least\|^#  *size\|Avg bus"; }
bench -t ceilings -e 2G -n 20 -w 3  # an 8-rank all-gather writes 8 bytes per byte read: the memset ceiling bounds it
for B in 1 2; do
  echo "## in-process all_gather, 8 ranks, $B blocks per SM"
  bench -t all_gather -g 8 -p post -B $B -b 256M -e 1G -f 4 -c 0 -n 10 -w 3
done
export CUDA_MPS_PIPE_DIRECTORY=$work/pipe CUDA_MPS_LOG_DIRECTORY=$work/log
mkdir -p "$CUDA_MPS_PIPE_DIRECTORY" "$CUDA_MPS_LOG_DIRECTORY"
nvidia-cuda-mps-control -d || { echo "MPS did not start"; exit 1; }
for path in fused copy-engine; do
  "$bin/collectived" --socket "$sock" --backend cuda --gpu-gather-path $path --max-buffer-bytes $((64 << 30)) \
    --log-level error > "$work/d.log" 2>&1 &
  daemon=$!
  for _ in $(seq 200); do [ -S "$sock" ] && break; sleep 0.05; done
  echo "## under MPS, daemon-executed all_gather, 2 ranks as sessions, gather path $path"
  timeout 120 "$bin/collective-bench" -D "$sock" -k ag-$path-2 -m daemon -t all_gather -g 2 -b 64M -e 1G -f 4 \
    -c 1 -n 10 -w 2 2>&1 | grep -v "^# least\|^#  *size\|Avg bus"
  echo "## under MPS, daemon-executed all_gather, 8 ranks as processes (mpirun), gather path $path"
  OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 timeout 150 mpirun --oversubscribe --bind-to none \
    -x CUDA_MPS_PIPE_DIRECTORY -x CUDA_MPS_LOG_DIRECTORY -np 8 "$bin/collective-bench" -D "$sock" -k ag-$path-8 -M 1 \
    -m daemon -t all_gather -b 64M -e 1G -f 4 -c 1 -n 10 -w 2 2>&1 | grep -v "^# least\|^#  *size\|Avg bus"
  kill -TERM "$daemon" 2>/dev/null; wait "$daemon" 2>/dev/null
done
echo quit | nvidia-cuda-mps-control
rm -rf "$work"
