#!/usr/bin/env bash
# Repro of the twelfth session's wrong staged eager all-reduce (nccl batch,
# collective-bench -M 1 -z 0 at 1 MiB, 2 and 4 ranks): which path, how often.
#   (in the bundle) bash staged_repro.sh
source "$(dirname "$0")/gpu_bundle_env.sh"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1  # the device machine runs as root
work=$(mktemp -d)
start_private_mps "$work" > /dev/null
./bin/collectived --socket "$work/c.sock" --backend cuda --max-message-bytes 16777216 --log-level info > "$work/daemon.log" 2>&1 &
dpid=$!
for _ in $(seq 200); do [ -S "$work/c.sock" ] && break; sleep 0.05; done
export COLLECTIVED_SOCKET=$work/c.sock
k=0
bench=./bin/collective-bench
run() {  # label, np, extra args
  local label=$1 np=$2; shift 2
  k=$((k + 1))
  local o
  o=$(timeout 60 mpirun --oversubscribe --bind-to none -np "$np" -x COLLECTIVED_SOCKET -x LD_LIBRARY_PATH \
    -x CUDA_MPS_PIPE_DIRECTORY -x CUDA_MPS_LOG_DIRECTORY $bench -D "$COLLECTIVED_SOCKET" -M 1 \
    -k "r$k" "$@" 2>&1)
  echo "$o" | grep -E "^ +[0-9]" | sed "s/^/$label np=$np: /"
  echo "$o" | grep -iE "error|fail|abort" | grep -v "Out of bounds" | head -3 | sed "s/^/$label np=$np !! /"
}
# The bench as it was (Prepare's pageable copies unsynchronized, if
# collective-bench-old, of df34e2a, is in bin/) beside the fixed one, alternately.
for rep in 1; do
  for bench in ./bin/collective-bench-old ./bin/collective-bench; do
    [ -x "$bench" ] || continue
    run "twoshot-eager ${bench#./bin/}" 2 -z 0 -b 1M -e 1M -n 20 -w 5 -c 1 -G 0
    run "twoshot-eager-np4 ${bench#./bin/}" 4 -z 0 -b 1M -e 1M -n 20 -w 5 -c 1 -G 0
  done
done
bench=./bin/collective-bench
if [ -z "${QUICK:-}" ]; then  # QUICK=1: the old/new pair only
run "oneshot-eager" 2 -z 0 -b 1M -e 1M -n 20 -w 5 -c 1 -G 0 -a oneshot
run "twoshot-eager-sync" 2 -z 0 -b 1M -e 1M -n 20 -w 5 -c 1 -G 0 -Y 1
run "twoshot-graph" 2 -z 0 -b 1M -e 1M -n 20 -w 5 -c 1 -G 20
run "twoshot-heap" 2 -z 1 -b 1M -e 1M -n 20 -w 5 -c 1 -G 0
# In one process, through the daemon (no MPI between ranks).
k=$((k + 1))
timeout 60 ./bin/collective-bench -D "$COLLECTIVED_SOCKET" -g 2 -k "r$k" -z 0 -b 1M -e 1M -n 20 -w 5 -c 1 -G 0 2>&1 | grep -E "^ +[0-9]" | sed "s/^/inproc-daemon np=2: /"
fi
kill $dpid; wait $dpid 2>/dev/null
grep -iE "warn|error|abort" "$work/daemon.log" | tail -20
echo quit | nvidia-cuda-mps-control
rm -rf "$work"
