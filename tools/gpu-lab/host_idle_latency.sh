#!/usr/bin/env bash
# Issue 16 on the GPU machine's cores: the daemon's idle cost (400 idle
# daemon-executed communicators, a pending WaitOp), then host small-op latency
# through this build's daemon and client and older ones (bin/collectived-old and
# bin/collectived-host-bench-old with its old-lib/libcollectived_client.so.0,
# packed by hand) alternating, ROUNDS times,
# with Open MPI's MPI_Allreduce beside them. SKIP_IDLE=1: latency only.
#   bash gpu-bundle/host_idle_latency.sh
source "$(dirname "$0")/gpu_bundle_env.sh"
[ -n "${SKIP_IDLE:-}" ] || timeout 120 ./bin/daemon_test --gtest_filter='DaemonIdle*' > "$out/host_idle.txt" 2>&1; echo "idle test rc=$?"
[ -n "${SKIP_IDLE:-}" ] || grep -E "idle daemon|OK \]|FAILED" "$out/host_idle.txt"
[ -x bin/collectived-old ] || exit 0
mkdir -p old/bin
ln -sf "$PWD/bin/collectived-old" old/bin/collectived
ln -sf "$PWD/bin/collectived-host-bench-old" old/bin/collectived-host-bench
for round in $(seq "${ROUNDS:-3}"); do
  for v in old new; do
    dir=$PWD libs=$LD_LIBRARY_PATH
    [ $v = old ] && dir=$PWD/old libs=$PWD/old-lib:$LD_LIBRARY_PATH
    LD_LIBRARY_PATH=$libs COLLECTIVED_BUILD_DIR=$dir timeout 120 bash run_host_bench.sh "${RANKS:-4}" --bytes 64 --iters 5000 --ops 400 \
      2>&1 | grep -E "executed  |MPI_Allreduce" | sed "s/^/$v round $round: /"
  done
done | tee "$out/host_latency.txt"
