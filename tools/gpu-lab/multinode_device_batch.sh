#!/usr/bin/env bash
# Issue 17 on the GPU machine, one device call over a bundle (make_gpu_bundle.sh,
# with ucx_perftest packed in): the UCX there, the GPU communicator across two
# daemons, the host multinode tests on 16 cores, and the multinode bench with
# 2 and 4 daemons. Outputs under $OUT.
#   bash gpu-bundle/multinode_device_batch.sh
source "$(dirname "$0")/gpu_bundle_env.sh"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 PATH=$PWD/bin:$PATH
nproc; (ucx_info -v 2>/dev/null || echo "no ucx_info") | head -2
ldd bin/collectived | grep -E "ucp|ucs|mpi" | head -4
timeout 240 ./bin/gpu_daemon_test > "$out/gpu_daemon.txt" 2>&1
echo "gpu daemon tests (all, with the one across two daemons) rc=$?"
grep -E "^\[ +(FAILED|PASSED|SKIPPED) |Failure|Expected|wrong|GPU across" "$out/gpu_daemon.txt" | head -30
echo "UCX memory types / cuda transports here:"; (ucx_info -d 2>/dev/null | grep -ciE "cuda") || true
timeout 120 ./bin/multinode_test > "$out/multinode.txt" 2>&1; echo "multinode rc=$?"
grep -E "^\[ +(FAILED|PASSED) |Failure|killed|stopped|restarted|4 nodes|differing" "$out/multinode.txt" | head -30
echo "raw UCX, 2 processes, both ways at once (best of 30; tcp segments as the daemons'):"
for args in "1 1 1048576 1 1 1" "1 1 524288 1 1 1 1048576" "1 1 1048576 0 0 0"; do
  timeout 60 mpirun -np 2 --bind-to none --mca btl self,tcp -x UCX_TLS=tcp,self -x UCX_NET_DEVICES=lo \
    -x UCX_TCP_TX_SEG_SIZE=256k -x UCX_TCP_RX_SEG_SIZE=256k ./bin/ucx_exchange_probe $args 2>&1 | grep multi
done
for n in 2 4; do
  timeout 110 bash run_multinode_bench.sh "$n" 16384,1048576,67108864 20 > "$out/bench$n.txt" 2>&1
  echo "bench $n rc=$?"; grep -vE "^# (latency|collectived)" "$out/bench$n.txt"
done
