#!/usr/bin/env bash
# On the GPU machine: collective-bench through collectived (client-executed
# GPU communicators) next to the in-process baseline, in the same run.
#   tools/gpu-lab/gpu_daemon_bench.sh BIN [quick|latency]   (latency: only the latency rows, threads, no MPS)
# BIN holds collectived and collective-bench. Ranks as sessions of one process
# share a CUDA context; ranks as MPI processes share the GPU through MPS, or
# time-slice without it (both are measured). Output: stdout and
# $OUT/gpu_daemon_bench.txt.
set -u
bin=$(cd "$1" && pwd)
quick=${2:-}
out=${OUT:-/tmp}/gpu_daemon_bench.txt
work=$(mktemp -d)
sock=$work/c.sock
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
mpirun_flags="--oversubscribe --bind-to none"

start_daemon() {
  "$bin/collectived" --socket "$sock" --backend cuda --max-message-bytes $((64 << 20)) \
    --max-buffer-bytes $((32 << 30)) --log-level warn > "$work/daemon.log" 2>&1 &
  daemon=$!
  for _ in $(seq 200); do [ -S "$sock" ] && break; sleep 0.05; done
}
stop_daemon() { kill -TERM "$daemon" 2>/dev/null; wait "$daemon" 2>/dev/null; }
bench() { "$bin/collective-bench" "$@" 2>&1 | grep -v "^# least"; }

{
  date -u +"# %Y-%m-%dT%H:%MZ"
  nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
  "$bin/collective-bench" -t ceilings -e 2G -n 20 -w 3
  start_daemon
  if [ "$quick" != latency ]; then
  echo "## checked sweep through the daemon, 4 ranks (every element compared)"
  bench -D "$sock" -k chk-z -g 4 -b 1K -e 64M -f 16 -c 1 -n 3 -w 1 -z 1
  bench -D "$sock" -k chk-s -g 4 -b 1K -e 16M -f 16 -c 1 -n 3 -w 1 -z 0
  bench -D "$sock" -k chk-g -t all_gather -g 4 -b 4K -e 64M -f 16 -c 1 -n 3 -w 1 -z 1
  fi
  lo=16M; f=4; [ -n "$quick" ] && lo=256M
  for g in 2 4 8; do
    [ "$quick" = latency ] && break
    echo "## all_reduce throughput, $g ranks: in-process baseline (post/complete), then through the daemon (zero-copy)"
    bench -g "$g" -p post -b $lo -e 1G -f $f -c 0 -n 20 -w 5
    bench -D "$sock" -k tp-$g -g "$g" -b $lo -e 1G -f $f -c 0 -n 20 -w 5
    echo "## all_gather throughput, $g ranks: baseline, then daemon"
    bench -t all_gather -g "$g" -p post -b $lo -e 1G -f $f -c 0 -n 20 -w 5
    bench -D "$sock" -k ag-$g -t all_gather -g "$g" -b $lo -e 1G -f $f -c 0 -n 20 -w 5
  done
  for g in 2 8; do
    for G in 0 10; do
      echo "## latency, $g ranks, graph launches $G (0: eager): baseline single launch, baseline post/complete, daemon zero-copy, daemon staged"
      bench -g "$g" -b 16K -e 1M -f 4 -c 1 -n 50 -w 20 -G $G
      bench -g "$g" -p post -b 16K -e 1M -f 4 -c 1 -n 50 -w 20 -G $G
      bench -D "$sock" -k lz-$g-$G -g "$g" -b 16K -e 1M -f 4 -c 1 -n 50 -w 20 -G $G -z 1
      bench -D "$sock" -k ls-$g-$G -g "$g" -b 16K -e 1M -f 4 -c 1 -n 50 -w 20 -G $G -z 0
    done
  done
  echo "## daemon-executed (the daemon's fused launch; ranks as sessions of one process, no MPS: the daemon's"
  echo "## context and the clients' time-slice)"
  timeout 120 "$bin/collective-bench" -D "$sock" -k de-nomps -m daemon -g 2 -b 16K -e 1M -f 4 -c 1 -n 10 -w 2 2>&1 | grep -v "^# least"
  if [ "$quick" = latency ]; then stop_daemon; rm -rf "$work"; exit 0; fi
  echo "## one rank per process (mpirun), no MPS: contexts time-slice"
  timeout 120 mpirun $mpirun_flags -np 2 "$bin/collective-bench" -D "$sock" -k mpi-nomps -M 1 -b 16K -e 1M -f 4 -c 1 -n 10 -w 2 2>&1 | grep -v "^# least"
  stop_daemon
  echo "## one rank per process (mpirun) under MPS (private pipe directory, stopped afterwards)"
  export CUDA_MPS_PIPE_DIRECTORY=$work/mps-pipe CUDA_MPS_LOG_DIRECTORY=$work/mps-log
  mkdir -p "$CUDA_MPS_PIPE_DIRECTORY" "$CUDA_MPS_LOG_DIRECTORY"
  if nvidia-cuda-mps-control -d; then
    start_daemon
    # An MPS client gets 2 hardware queues by default: a process holding more
    # ranks must ask for more (the client library refuses it otherwise).
    export CUDA_DEVICE_MAX_CONNECTIONS=8
    for g in 2 8; do
      echo "## under MPS, $g ranks as sessions of one process (CUDA_DEVICE_MAX_CONNECTIONS=8): client-executed, then daemon-executed"
      bench -D "$sock" -k mps-c-$g -g "$g" -b 16K -e 1M -f 4 -c 1 -n 50 -w 20
      bench -D "$sock" -k mps-d-$g -m daemon -g "$g" -b 16K -e 1M -f 4 -c 1 -n 50 -w 20
      bench -D "$sock" -k mps-dg-$g -m daemon -g "$g" -b 16K -e 1M -f 4 -c 1 -n 50 -w 20 -G 10
      [ -z "$quick" ] && bench -D "$sock" -k mps-dt-$g -m daemon -g "$g" -b 16M -e 1G -f 4 -c 0 -n 20 -w 5
    done
    unset CUDA_DEVICE_MAX_CONNECTIONS
    for np in 2 8; do
      echo "## under MPS, one rank per process (mpirun), $np ranks: client-executed eager, graph, daemon-executed"
      timeout 180 mpirun $mpirun_flags -x CUDA_MPS_PIPE_DIRECTORY -x CUDA_MPS_LOG_DIRECTORY -np $np \
        "$bin/collective-bench" -D "$sock" -k mpi-mps-$np -M 1 -b 16K -e 1M -f 4 -c 1 -n 50 -w 20 2>&1 | grep -v "^# least"
      timeout 180 mpirun $mpirun_flags -x CUDA_MPS_PIPE_DIRECTORY -x CUDA_MPS_LOG_DIRECTORY -np $np \
        "$bin/collective-bench" -D "$sock" -k mpi-mpsg-$np -M 1 -b 16K -e 1M -f 4 -c 1 -n 50 -w 20 -G 10 2>&1 | grep -v "^# least"
      timeout 180 mpirun $mpirun_flags -x CUDA_MPS_PIPE_DIRECTORY -x CUDA_MPS_LOG_DIRECTORY -np $np \
        "$bin/collective-bench" -D "$sock" -k mpi-mpsd-$np -M 1 -m daemon -b 16K -e 1M -f 4 -c 1 -n 50 -w 20 2>&1 | grep -v "^# least"
    done
    [ -z "$quick" ] && timeout 180 mpirun $mpirun_flags -x CUDA_MPS_PIPE_DIRECTORY -x CUDA_MPS_LOG_DIRECTORY -np 8 \
        "$bin/collective-bench" -D "$sock" -k mpi-mps-tp -M 1 -b 16M -e 1G -f 4 -c 0 -n 20 -w 5 2>&1 | grep -v "^# least"
    stop_daemon
    echo quit | nvidia-cuda-mps-control
  else
    echo "MPS control daemon did not start"
  fi
  echo "## daemon log (warnings and errors)"
  cat "$work/daemon.log"
} 2>&1 | tee "$out"
rm -rf "$work"
