#!/usr/bin/env bash
# Issue 19 item 4 on the GPU machine's 16 cores: is the bimodal
# daemon-executed 16 KiB (20 us in one run, 194-244 us in the next, same
# policy; bench/RESULTS.md) a matter of where the threads land? Each round
# runs the host bench with the daemon and the clients free to go anywhere,
# then with the daemon on the first half of the cores and the clients on the
# second (taskset; bench/run_host_bench.sh's COLLECTIVED_DAEMON_WRAP and
# COLLECTIVED_CLIENT_WRAP), rounds outermost. If "split" is never slow and
# "free" sometimes is, a client's spinning thread and the daemon executor it
# waits for share a core in the slow runs.
#   PROCS=4 ROUNDS=4 bash gpu-bundle/host_placement_probe.sh
source "$(dirname "$0")/gpu_bundle_env.sh"
cores=$(nproc) half=$(( $(nproc) / 2 ))
{
  echo "## $(date -u +%FT%TZ) $cores cores: $(lscpu | grep -m1 'Model name' | sed 's/.*: *//')"
  lscpu -e=CPU,CORE,SOCKET,NODE 2>/dev/null | head -$((cores + 1))
  for round in $(seq "${ROUNDS:-4}"); do
    for n in ${PROCS:-4}; do
      for placement in free split; do
        unset COLLECTIVED_DAEMON_WRAP COLLECTIVED_CLIENT_WRAP
        if [ "$placement" = split ]; then
          export COLLECTIVED_DAEMON_WRAP="taskset -c 0-$((half - 1))" COLLECTIVED_CLIENT_WRAP="taskset -c $half-$((cores - 1))"
        fi
        echo "## round $round, $n processes, $placement"
        timeout 120 bash run_host_bench.sh "$n" --iters "${ITERS:-200}" --bytes 16384,1048576 --ops 0 \
          --modes client,daemon 2>&1 | grep -v "^#\|^$"
      done
    done
  done
} 2>&1 | tee "$out/host_placement_probe.txt"
