#!/usr/bin/env bash
# Issue 19 item 4 on the GPU machine's 16 cores: is the bimodal
# daemon-executed 16 KiB (20 us in one run, 194-244 us in the next, same
# policy; bench/RESULTS.md) a matter of where the threads land? Each round
# runs the host bench once per placement, rounds outermost:
#   free    the daemon and the clients free to go anywhere;
#   split   the daemon on the first half of the cores, the clients on the
#           second (taskset; bench/run_host_bench.sh's COLLECTIVED_DAEMON_WRAP
#           and COLLECTIVED_CLIENT_WRAP);
#   pinned  each daemon executor thread (cd-executor) pinned to a core of its
#           own as it appears, from the last core down, the clients free;
#   narrow  the daemon and the clients on cores 0..NARROW-1 (default: as many
#           as processes): a client and the leading executor always share a
#           core, the state a free run's slow episodes are in.
# If "split" is never slow and "free" sometimes is, a client's spinning
# thread and the daemon executor it waits for share a core in the slow runs;
# "pinned" asks whether the daemon could place its executors itself (the
# eighteenth session: it could not, bench/RESULTS.md).
#   PROCS=4 ROUNDS=4 bash gpu-bundle/host_placement_probe.sh
#   PLACEMENTS="free pinned" PROCS=8 ROUNDS=2 bash gpu-bundle/host_placement_probe.sh
# LEADS: --host-lead-max-bytes values to alternate inside each placement
# (led ops, nineteenth session; empty: the daemon's default); BYTES, MODES.
#   LEADS="131072 0" PLACEMENTS=free PROCS="8 4 2" ROUNDS=2 bash gpu-bundle/host_placement_probe.sh
# SAMPLE=1: while each run goes, every busy thread's core (ps -eLo
# tid,psr,pcpu,comm, threads above 5 % of a core) every 50 ms into
# $out/placement_samples.txt, headed by the run: where the threads of a slow
# run sit, beside a fast one's; and the context switches so far (voluntary,
# involuntary) summed per thread name, "ctx NAME V N": futex sleeps per op.
# SCHED=1 (instead): every 50 ms, each thread's core, run time, time
# waiting on a run queue and timeslices (/proc stat and schedstat) into
# $out/sched_samples.txt: whether a slow run's busy threads queue behind
# each other. ITERS, WARMUP: iterations a run (200) and before it (20);
# SERIES=N: the bench's medians of each N iterations in order (--series).
# SIDES: bundles to alternate inside each placement, each a folder beside
# this script holding bin/collectived, bin/collectived-host-bench and lib/
# (the client library): builds A/B'd in the same rounds (default: this one).
#   SIDES="old new" PLACEMENTS="narrow free" PROCS=8 bash gpu-bundle/host_placement_probe.sh
source "$(dirname "$0")/gpu_bundle_env.sh"
cores=$(nproc) half=$(( $(nproc) / 2 ))
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
  echo "## $(date -u +%FT%TZ) $cores cores: $(lscpu | grep -m1 'Model name' | sed 's/.*: *//')"
  lscpu -e=CPU,CORE,SOCKET,NODE 2>/dev/null | head -$((cores + 1))
  for round in $(seq "${ROUNDS:-4}"); do
    for n in ${PROCS:-4}; do
      for placement in ${PLACEMENTS:-free split}; do
        unset COLLECTIVED_DAEMON_WRAP COLLECTIVED_CLIENT_WRAP
        case $placement in
          split) export COLLECTIVED_DAEMON_WRAP="taskset -c 0-$((half - 1))" COLLECTIVED_CLIENT_WRAP="taskset -c $half-$((cores - 1))" ;;
          pinned) export COLLECTIVED_DAEMON_WRAP="$out/pin_wrap.sh" ;;
          narrow) export COLLECTIVED_DAEMON_WRAP="taskset -c 0-$((${NARROW:-$n} - 1))" COLLECTIVED_CLIENT_WRAP="taskset -c 0-$((${NARROW:-$n} - 1))" ;;
        esac
        for side in ${SIDES:-.}; do
        for lead in ${LEADS:-default}; do
          unset COLLECTIVED_DAEMON_ARGS
          [ "$lead" = default ] || export COLLECTIVED_DAEMON_ARGS="--host-lead-max-bytes $lead"
          echo "## round $round, $n processes, $placement, lead $lead, side $side"
          sampler=
          if [ -n "${SAMPLE:-}" ]; then
            echo "## round $round, $n processes, $placement, lead $lead" >> "$out/placement_samples.txt"
            (while :; do
               echo "# $(date +%T.%N | cut -c1-12)"
               ps -eLo tid,psr,pcpu,comm --no-headers | awk '$3 > 5'
               # Context switches so far, summed per thread name over the
               # daemon and the clients: a futex sleep is a voluntary one.
               # (cat: a thread that ended meanwhile is skipped, not fatal.)
               # shellcheck disable=SC2046  # one path list per process
               cat $(for p in $(pgrep -f 'bin/collectived|collectived-host-bench'); do echo /proc/"$p"/task/*/status; done) \
                 2>/dev/null | awk '/^Name:/{c=$2} /^voluntary_ctxt/{v[c]+=$2} /^nonvoluntary_ctxt/{n[c]+=$2}
                                    END{for (c in v) printf "ctx %s %d %d\n", c, v[c], n[c]}'
               sleep 0.05
             done >> "$out/placement_samples.txt") &
            sampler=$!
          elif [ -n "${SCHED:-}" ]; then
            # SCHED=1: every 50 ms each thread of the daemon and the clients,
            # from /proc: "tid pid comm processor run_ns runqueue_wait_ns
            # timeslices" (stat field 39; schedstat). Time waiting on a run
            # queue is what a thread loses to another on its core.
            echo "## round $round, $n processes, $placement, lead $lead" >> "$out/sched_samples.txt"
            # One process reads /proc each time (no fork a thread).
            python3 -u - >> "$out/sched_samples.txt" <<'PY' &
import os, re, time
pat = re.compile(rb"bin/collectived|collectived-host-bench")
while True:
    print("#", time.time_ns())
    for p in os.listdir("/proc"):
        if not p.isdigit():
            continue
        try:
            with open(f"/proc/{p}/cmdline", "rb") as f:
                if not pat.search(f.read()):
                    continue
            for t in os.listdir(f"/proc/{p}/task"):
                with open(f"/proc/{p}/task/{t}/stat") as f:
                    st = f.read()
                with open(f"/proc/{p}/task/{t}/schedstat") as f:
                    ss = f.read().split()
                comm = st[st.index("(") + 1:st.rindex(")")].replace(" ", "_")
                cpu = st[st.rindex(")") + 2:].split()[36]
                print(t, p, comm, cpu, *ss)
        except (FileNotFoundError, ProcessLookupError, IndexError):
            continue
    time.sleep(0.05)
PY
            sampler=$!
          fi
          COLLECTIVED_BUILD_DIR=$PWD/$side LD_LIBRARY_PATH=$PWD/$side/lib:$LD_LIBRARY_PATH \
            timeout 120 bash run_host_bench.sh "$n" --iters "${ITERS:-200}" --warmup "${WARMUP:-20}" ${SERIES:+--series "$SERIES"} --bytes "${BYTES:-16384,1048576}" --ops 0 \
            --modes "${MODES:-client,daemon}" 2>&1 | grep -v "^#\|^$"
          [ -n "$sampler" ] && kill "$sampler" 2>/dev/null && wait "$sampler" 2>/dev/null
        done
        done
      done
    done
  done
} 2>&1 | tee "$out/host_placement_probe.txt"
