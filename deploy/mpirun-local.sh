#!/usr/bin/env bash
# A multi-node job on one machine: N daemons under mpirun (UCX over tcp on
# loopback) form one cluster; `collectivectl cluster` shows it; then the
# example job's clients run on every daemon and each says whether every
# element was exact. Communicators across daemons are not built yet
# (docs/multinode.md): each daemon's clients form a communicator of their own.
#   bash deploy/mpirun-local.sh [N]     (after deploy/build.sh)
set -u
root=$(cd "$(dirname "$0")/.." && pwd)
bin=${COLLECTIVED_BUILD_DIR:-$root/build}/bin
n=${1:-3}
work=$(mktemp -d /tmp/collectived-cluster-XXXXXX)
as_root=(); [ "$(id -u)" = 0 ] && as_root=(--allow-run-as-root)
cleanup() {
  [ -n "${job:-}" ] && kill -TERM "$job" 2>/dev/null && wait "$job" 2>/dev/null
  rm -rf "$work"
}
trap cleanup EXIT
mpirun "${as_root[@]}" -np "$n" --oversubscribe --bind-to none --enable-recovery --mca btl self,tcp \
  -x UCX_TLS=tcp,self -x UCX_NET_DEVICES=lo -x UCX_WARN_UNUSED_ENV_VARS=n \
  "$bin/collectived" --cluster mpi --socket "$work/c{node}.sock" --backend host --log-level warn \
  > "$work/daemons.log" 2>&1 &
job=$!
for _ in $(seq 300); do
  up=0; for k in $(seq 0 $((n - 1))); do [ -S "$work/c$k.sock.fds" ] && up=$((up + 1)); done
  [ "$up" = "$n" ] && break; sleep 0.1
done
if [ "$up" != "$n" ]; then echo "the daemons did not come up:"; cat "$work/daemons.log"; exit 1; fi
sleep 1  # a few heartbeats
"$bin/collectivectl" --socket "$work/c0.sock" cluster
status=0
for k in $(seq 0 $((n - 1))); do
  pids=()
  for rank in 0 1; do
    "$bin/allreduce_allgather" --socket "$work/c$k.sock" --key "node$k" --world 2 --rank "$rank" --mode daemon \
      --count 65536 > "$work/node$k-rank$rank.out" 2>&1 &
    pids+=($!)
  done
  for rank in 0 1; do
    if wait "${pids[$rank]}"; then
      echo "node $k rank $rank: $(grep -c 'exact' "$work/node$k-rank$rank.out") results, every element exact"
    else
      echo "node $k rank $rank: FAILED"; cat "$work/node$k-rank$rank.out"; status=1
    fi
  done
done
[ $status = 0 ] && echo "RESULT: every element exact on every node" || echo "RESULT: FAILED"
exit $status
