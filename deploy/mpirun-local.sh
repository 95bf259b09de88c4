#!/usr/bin/env bash
# A multi-node job on one machine: N daemons under mpirun (UCX over tcp on
# loopback) form one cluster; `collectivectl cluster` shows it; then the
# example job runs two clients on every daemon, all of them ranks of one
# communicator across the daemons (docs/multinode.md), and each says whether
# every element was exact.
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
world=$((2 * n))
pids=()
for rank in $(seq 0 $((world - 1))); do
  k=$((rank / 2))  # ranks 2k and 2k+1 on node k
  "$bin/allreduce_allgather" --socket "$work/c$k.sock" --key across --world "$world" --rank "$rank" --mode daemon \
    --count 65536 > "$work/rank$rank.out" 2>&1 &
  pids+=($!)
done
for rank in $(seq 0 $((world - 1))); do
  k=$((rank / 2))
  if wait "${pids[$rank]}"; then
    echo "node $k rank $rank of $world: $(grep -c 'exact' "$work/rank$rank.out") results, every element exact"
  else
    echo "node $k rank $rank of $world: FAILED"; cat "$work/rank$rank.out"; status=1
  fi
done
"$bin/collectivectl" --socket "$work/c0.sock" stats | grep -iE "across|nodes|exchange" || true
[ $status = 0 ] && echo "RESULT: every element exact on every node" || echo "RESULT: FAILED"
exit $status
