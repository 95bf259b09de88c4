#!/usr/bin/env bash
# On the GPU machine: does a process that holds several ranks of one GPU
# communicator hang under MPS because its streams share too few hardware
# queues? Runs collective-bench with g ranks as sessions of one process,
# under MPS and without, for several CUDA_DEVICE_MAX_CONNECTIONS values; an op
# that waits past the 5 s op timeout prints DEADLINE_EXCEEDED. (Since
# 2dc4476 the client refuses such a rank up front, so a rerun shows the
# FAILED_PRECONDITION instead; docs/results-history.md has the run before it.)
#   tools/gpu-lab/mps_connections_probe.sh BIN   (BIN holds collectived and collective-bench)
set -u
bin=$(cd "$1" && pwd)
work=$(mktemp -d)
sock=$work/c.sock
start_daemon() {
  "$bin/collectived" --socket "$sock" --backend cuda --op-timeout-ms 5000 --log-level error > "$work/d.log" 2>&1 &
  daemon=$!
  for _ in $(seq 200); do [ -S "$sock" ] && break; sleep 0.05; done
}
stop_daemon() { kill -TERM "$daemon" 2>/dev/null; wait "$daemon" 2>/dev/null; }
probe() {  # label, ranks, connections ("" = unset)
  local label=$1 g=$2 conn=$3 line
  line=$(env ${conn:+CUDA_DEVICE_MAX_CONNECTIONS=$conn} timeout 60 "$bin/collective-bench" -D "$sock" \
    -k "p-$label-$g-${conn:-def}" -g "$g" -b 64K -e 64K -c 1 -n 20 -w 2 2>&1 | grep -E "^ +65536|DEADLINE|error|rror" | head -1)
  printf "%-8s ranks %-2s connections %-7s %s\n" "$label" "$g" "${conn:-default}" "$line"
}
start_daemon
for g in 4 8; do probe no-mps $g ""; done
probe no-mps 4 2
stop_daemon
export CUDA_MPS_PIPE_DIRECTORY=$work/pipe CUDA_MPS_LOG_DIRECTORY=$work/log
mkdir -p "$CUDA_MPS_PIPE_DIRECTORY" "$CUDA_MPS_LOG_DIRECTORY"
nvidia-cuda-mps-control -d || { echo "MPS did not start"; exit 1; }
start_daemon
for g in 2 3 4 5 8; do probe mps $g ""; done
for c in 8 16 32; do probe mps 8 $c; done
stop_daemon
echo quit | nvidia-cuda-mps-control
rm -rf "$work"
