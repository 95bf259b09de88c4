#!/usr/bin/env bash
# On the GPU machine, under MPS: the daemon-executed paths side by side, the
# fused kernels against the copy-engine paths (--gpu-reduce-path and
# --gpu-gather-path copy-engine): a checked sweep (every element compared),
# then throughput, 2 ranks as sessions of one process and 8 as processes.
#   tools/gpu-lab/daemon_paths_probe.sh BIN [all_reduce|all_gather]   (default all_reduce)
# Output: stdout and $OUT/daemon_paths_probe_KIND.txt. Succeeds gather_paths_probe.sh (deleted).
set -u
bin=$(cd "$1" && pwd)
kind=${2:-all_reduce}
work=$(mktemp -d)
sock=$work/c.sock
bench() { timeout 150 "$@" 2>&1 | grep -v "^# least\|^#  *size\|Avg bus"; }
mpi() {
  OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 bench mpirun --oversubscribe --bind-to none \
    -x CUDA_MPS_PIPE_DIRECTORY -x CUDA_MPS_LOG_DIRECTORY -np 8 "$bin/collective-bench" -M 1 "$@"
}
export CUDA_MPS_PIPE_DIRECTORY=$work/pipe CUDA_MPS_LOG_DIRECTORY=$work/log
mkdir -p "$CUDA_MPS_PIPE_DIRECTORY" "$CUDA_MPS_LOG_DIRECTORY"
nvidia-cuda-mps-control -d || { echo "MPS did not start"; exit 1; }
{
  for path in fused copy-engine; do
    "$bin/collectived" --socket "$sock" --backend cuda --gpu-gather-path $path --gpu-reduce-path $path \
      --max-buffer-bytes $((64 << 30)) --log-level info > "$work/d.log" 2>&1 &
    daemon=$!
    for _ in $(seq 200); do [ -S "$sock" ] && break; sleep 0.05; done
    echo "## $kind, daemon-executed, path $path, 2 ranks as sessions: checked sweep, then throughput"
    CUDA_DEVICE_MAX_CONNECTIONS=8 bench "$bin/collective-bench" -D "$sock" -k c2-$path -m daemon -t $kind -g 2 -b 4K -e 64M -f 16 -c 1 -n 3 -w 1
    CUDA_DEVICE_MAX_CONNECTIONS=8 bench "$bin/collective-bench" -D "$sock" -k t2-$path -m daemon -t $kind -g 2 -b 64M -e 1G -f 4 -c 0 -n 10 -w 2
    echo "## $kind, daemon-executed, path $path, 8 ranks as processes (mpirun): checked sweep, then throughput"
    mpi -D "$sock" -k c8-$path -m daemon -t $kind -b 4K -e 64M -f 16 -c 1 -n 3 -w 1
    mpi -D "$sock" -k t8-$path -m daemon -t $kind -b 64M -e 1G -f 4 -c 0 -n 10 -w 2
    kill -TERM "$daemon" 2>/dev/null; wait "$daemon" 2>/dev/null
    grep -E "scratch|error|warn" "$work/d.log" | head -5
  done
} 2>&1 | tee "${OUT:-/tmp}/daemon_paths_probe_$kind.txt"
echo quit | nvidia-cuda-mps-control
rm -rf "$work"
