#!/usr/bin/env bash
# Issue 19 item 4: daemon-executed host ops with the daemon and clients free
# to share cores (3.3-3.9x MPI at 8 processes, 16 KiB; bench/RESULTS.md).
# Hypothesis: the scheduler stacks a client and the executor it hands off to
# on one core (a futex wake places the wakee near the waker). Per round:
# free (as before), then "pinned": each daemon executor thread (cd-executor)
# pinned to a core of its own as it appears, from the last core down, the
# clients still free. If pinned is fast, the daemon should place its
# executors itself. Outputs under $OUT.
#   PROCS=8 ROUNDS=2 bash gpu-bundle/host_pin_probe.sh
source "$(dirname "$0")/gpu_bundle_env.sh"
cat > "$out/pin_wrap.sh" <<'WRAP'
#!/usr/bin/env bash
# Runs the command (exec keeps this pid) while a watcher pins its executors.
pid=$$ cores=$(nproc)
(
  next=$((cores - 1)); declare -A done
  while kill -0 "$pid" 2>/dev/null; do
    for t in /proc/"$pid"/task/*; do
      tid=${t##*/}
      [ -n "${done[$tid]:-}" ] && continue
      [ "$(cat "$t/comm" 2>/dev/null)" = cd-executor ] || continue
      taskset -pc "$next" "$tid" > /dev/null 2>&1 && done[$tid]=1
      next=$(( next == 0 ? cores - 1 : next - 1 ))
    done
    sleep 0.01
  done
) &
exec "$@"
WRAP
chmod +x "$out/pin_wrap.sh"
{
  for round in $(seq "${ROUNDS:-2}"); do
    for n in ${PROCS:-8}; do
      for placement in free pinned; do
        unset COLLECTIVED_DAEMON_WRAP
        [ "$placement" = pinned ] && export COLLECTIVED_DAEMON_WRAP="$out/pin_wrap.sh"
        echo "## round $round, $n processes, $placement"
        timeout 120 bash run_host_bench.sh "$n" --iters "${ITERS:-200}" --bytes 16384,1048576 --ops 0 \
          --modes client,daemon 2>&1 | grep -v "^#\|^$"
      done
    done
  done
} 2>&1 | tee "$out/host_pin_probe.txt"
