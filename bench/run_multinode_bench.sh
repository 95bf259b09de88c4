#!/usr/bin/env bash
# Communicators across daemons, timed against outside yardsticks in the same
# run (docs/multinode.md, bench/RESULTS.md):
#   1. ucx_perftest tag_bw at 64 MiB over the same transport (UCX tcp on
#      loopback): the network's own limit, one way, and two streams at
#      once in opposite directions (as two nodes exchanging use the link);
#   2. N daemons under mpirun and one client process per daemon (a second
#      mpirun, its MPI over tcp too): all-reduce at each size through the
#      daemons (daemon-executed, across nodes) and MPI_Allreduce among the
#      same processes (collectived-host-bench);
#   3. each node's time in the exchange between nodes and the bytes it sent
#      there, per size, from the daemons' stats.
#   bench/run_multinode_bench.sh [N=2] [sizes=16384,1048576,67108864] [iters=20]
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
bin=${COLLECTIVED_BUILD_DIR:-$root/build}/bin
n=${1:-2}
sizes=${2:-16384,1048576,67108864}
iters=${3:-20}
work=$(mktemp -d /tmp/collectived-mnbench-XXXXXX)
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export UCX_TLS=tcp,self UCX_NET_DEVICES=lo UCX_WARN_UNUSED_ENV_VARS=n
# The daemons' tcp segment size (cluster/ucx_transport.cc), for ucx_perftest too.
export UCX_TCP_TX_SEG_SIZE=${UCX_TCP_TX_SEG_SIZE:-256k} UCX_TCP_RX_SEG_SIZE=${UCX_TCP_RX_SEG_SIZE:-256k}
cleanup() {
  if [ -n "${job:-}" ]; then kill -TERM "$job" 2>/dev/null; wait "$job" 2>/dev/null || true; fi
  rm -rf "$work"
}
trap cleanup EXIT

perftest() {  # $1: port; prints the final line (MB/s column: 2^20 bytes per second)
  ucx_perftest -p "$1" > /dev/null 2>&1 &
  local srv=$!
  sleep 2
  (ucx_perftest 127.0.0.1 -p "$1" -t tag_bw -s 67108864 -n 40 -w 5 2>&1 || true) | tail -1
  kill "$srv" 2>/dev/null || true
  wait "$srv" 2>/dev/null || true
}
port=$((20000 + RANDOM % 20000))
echo "## ucx_perftest tag_bw, 64 MiB, loopback tcp: one stream"
echo "   iterations, typical/avg/overall us, avg/overall MiB/s, msg/s"
perftest "$port"
echo "## two streams at once"
perftest $((port + 1)) > "$work/stream2.txt" &
perftest $((port + 2))
wait
cat "$work/stream2.txt"

echo "## $n daemons, one client each: all-reduce float32 sum"
max=$(echo "$sizes" | tr ',' '\n' | sort -n | tail -1)
mpirun -np "$n" --oversubscribe --bind-to none --enable-recovery --mca btl self,tcp \
  -x UCX_TLS -x UCX_NET_DEVICES -x UCX_WARN_UNUSED_ENV_VARS \
  "$bin/collectived" --cluster mpi --socket "$work/c{node}.sock" --backend host --log-level warn \
  --max-message-bytes "$max" > "$work/daemons.log" 2>&1 &
job=$!
for _ in $(seq 300); do
  up=0; for k in $(seq 0 $((n - 1))); do [ -S "$work/c$k.sock.fds" ] && up=$((up + 1)); done
  [ "$up" = "$n" ] && break; sleep 0.1
done
[ "$up" = "$n" ] || { cat "$work/daemons.log"; exit 1; }
sleep 1
mpirun -np "$n" --oversubscribe --bind-to none --mca pml ob1 --mca btl self,tcp --mca mpi_yield_when_idle 1 \
  "$bin/collectived-host-bench" --socket "$work/c{node}.sock" --ranks-per-node 1 --modes daemon \
  --bytes "$sizes" --iters "$iters" --warmup 3 --ops 0

echo "## the exchange between nodes, node 0 (per communicator: one size)"
"$bin/collectivectl" --socket "$work/c0.sock" -o json stats | python3 -c '
import json, sys
for c in json.load(sys.stdin)["communicators"]:
    if not c.get("nodes"): continue
    size = c["key"].rsplit("-", 1)[-1]
    n, ns, b = c["exchanges"], c["exchange_ns"], c["exchange_bytes_sent"]
    if n == 0 or ns == 0: continue
    print("%10s bytes: %4d exchanges, %9.1f us each, sent %8.1f MB/s (MiB/s: %.1f)" %
          (size, n, ns / n / 1e3, b / (ns / 1e9) / 1e6, b / (ns / 1e9) / 2**20))
'
