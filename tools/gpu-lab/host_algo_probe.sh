#!/usr/bin/env bash
# Issue 19 item 4 on the GPU machine's 16 cores: where the host backend's
# all-reduce should switch from one-shot to two-shot at each process count.
# One-shot has every rank read every peer's whole input ((n - 1) x S across
# cores); two-shot reads about 2 (n - 1) / n x S but adds a mid barrier. On
# 2026-12-06 (seventeenth session) two-shot at 16 KiB and 8 processes took
# 16-17 us client-executed where one-shot took 40-52 and MPI_Allreduce
# 23-26. Each round runs, per process count, the daemon's default threshold
# (one-shot up to 256 KiB) and THRESHOLD (two-shot above it), alternating.
#   PROCS="8 4 2" ROUNDS=2 THRESHOLD=1024 bash gpu-bundle/host_algo_probe.sh   (env: BYTES, ITERS)
source "$(dirname "$0")/gpu_bundle_env.sh"
{
  echo "## $(date -u +%FT%TZ) $(nproc) cores: $(lscpu | grep -m1 'Model name' | sed 's/.*: *//')"
  for round in $(seq "${ROUNDS:-2}"); do
    for n in ${PROCS:-8 4 2}; do
      for one_shot_max in 262144 "${THRESHOLD:-1024}"; do
        echo "## round $round, $n processes, --one-shot-max-bytes $one_shot_max"
        COLLECTIVED_DAEMON_ARGS="--one-shot-max-bytes $one_shot_max" timeout 120 bash run_host_bench.sh "$n" \
          --iters "${ITERS:-150}" --bytes "${BYTES:-1024,4096,16384,65536,262144}" --ops 0 --modes client,daemon 2>&1 |
          grep -E "bytes per rank|^collectived|^Open MPI" | sed 's/^# collectived host backend, //' 
      done
    done
  done
} 2>&1 | tee "$out/host_algo_probe.txt"
