#!/usr/bin/env bash
# Negative controls: the stress harness must find nothing in the safe
# configuration and must catch every unsafe one. 4 client processes, both
# execution modes. On the host backend the harness also proves each race
# window opened (timestamps); with --gpu (4 ranks on one GPU, the cuda
# backend) it runs GPU communicators, and the unsafe runs are judged by their
# wrong elements. On the GPU only the end barrier's window is timed (the
# device trace; the windows column), so a safe GPU run must show none.
#   negative-controls.sh [--seconds S] [--gpu] [--parallel]   (per configuration, at most 60 on the host)
# --parallel runs the configurations at once (a daemon and 4 clients each):
# long GPU runs fit one device call, at the cost of time-slicing.
# Prints a table (flag, ops, wrong elements, windows opened, verdict) and
# exits 0 only if safe is clean and every unsafe run is caught.
set -u
seconds=10 gpu=0 parallel=0
while [ $# -gt 0 ]; do
  case $1 in
    --seconds) seconds=$2; shift 2 ;;
    --gpu) gpu=1; shift ;;
    --parallel) parallel=1; shift ;;
    *) echo "unknown option $1"; exit 2 ;;
  esac
done
root=$(cd "$(dirname "$0")/../.." && pwd)
bin=${COLLECTIVED_BUILD_DIR:-$root/build}/bin
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
work=$(mktemp -d /tmp/collectived-negative-XXXXXX)
# Whatever ends this script (a timeout included) ends the daemons and clients it started.
cleanup() {
  for f in "$work"/*/clients.pid "$work"/*/daemon.pid; do
    [ -f "$f" ] && kill -TERM "$(cat "$f")" 2>/dev/null
  done
  rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 143' TERM INT
# The race windows: one rank's reads start 2 ms late, every copy-out 2 ms late.
delays="--debug-delay-rank 1 --debug-delay-us 2000 --debug-delay-copyout-us 2000"
daemon_extra="" stress_extra=""
if [ $gpu -eq 1 ]; then
  # Messages up to 1 MiB, so staged all-reduces above the one-shot limit have a copy-out to delay.
  daemon_extra="--backend cuda --max-message-bytes 2097152"
  stress_extra="--gpu 1 --max-count 131072"
fi

# Starts configuration $1 (safe or an unsafe flag) in $work/$2: its own
# daemon and socket, then the 4 stress clients in the background.
start_config() {
  local flag=$1 dir=$work/$2 extra=""
  mkdir -p "$dir"
  [ "$flag" != safe ] && extra=$flag
  "$bin/collectived" --socket "$dir/c.sock" --log-level error --op-timeout-ms 5000 $delays $daemon_extra $extra \
    > "$dir/daemon.log" 2>&1 &
  echo $! > "$dir/daemon.pid"
  for _ in $(seq 100); do [ -S "$dir/c.sock.fds" ] && break; sleep 0.05; done
  timeout $((seconds + 60)) mpirun -np 4 --oversubscribe --bind-to none --mca pml ob1 --mca btl self,vader,tcp \
    --mca mpi_yield_when_idle 1 "$bin/collective-stress" --socket "$dir/c.sock" --seconds "$seconds" --mode both \
    $stress_extra > "$dir/out.txt" 2>&1 &
  echo $! > "$dir/clients.pid"
}

# Waits for configuration $1 started in $work/$2 and prints its table row.
finish_config() {
  local flag=$1 dir=$work/$2 rc
  wait "$(cat "$dir/clients.pid")"; rc=$?
  kill -TERM "$(cat "$dir/daemon.pid")" 2>/dev/null; wait "$(cat "$dir/daemon.pid")" 2>/dev/null
  passed=$(awk '/ passed, /{print $1}' "$dir/out.txt"); failed=$(awk '/ passed, /{print $3}' "$dir/out.txt")
  wrong=$(awk '/^wrong elements:/{print $3}' "$dir/out.txt"); windows=$(awk '/^windows opened:/{print $3}' "$dir/out.txt")
  if [ -z "$passed" ] || [ $rc -eq 124 ]; then
    verdict="HARNESS FAILURE (no summary, rc $rc)"; status=1
    ops=-
  else
    ops=$((passed + failed))
    if [ "$flag" = safe ]; then
      if [ "$failed" -eq 0 ] && [ "$windows" -eq 0 ] && [ $rc -eq 0 ]; then verdict="clean"
      elif [ "$windows" -ne 0 ]; then verdict="FAIL: a race window opened in the safe run"; status=1
      else verdict="FAIL: $failed ops failed in the safe run"; status=1; fi
    elif [ $gpu -eq 1 ]; then
      # Caught means wrong data: a failure without wrong elements (a lost
      # context, a deadline) proves nothing about the bug class.
      if [ "${wrong:-0}" -gt 0 ] && [ $rc -ne 0 ]; then verdict="caught ($wrong wrong elements)"
      elif [ "$failed" -gt 0 ]; then verdict="HARNESS FAILURE: $failed ops failed, no wrong elements"; status=1
      else verdict="MISSED: nothing failed"; status=1; fi
    else
      if [ "$windows" -eq 0 ]; then verdict="HARNESS FAILURE: the window never opened"; status=1
      elif [ "$failed" -gt 0 ] && [ $rc -ne 0 ]; then verdict="caught"
      else verdict="MISSED: window opened $windows times but nothing failed"; status=1; fi
    fi
  fi
  printf "%-32s %8s %14s %10s  %s\n" "$flag" "$ops" "${wrong:--}" "${windows:--}" "$verdict"
  if [[ "$verdict" != clean && "$verdict" != caught* ]]; then sed -n 1,20p "$dir/out.txt"; fi
  # The daemon logs errors only: anything there is worth reading.
  if [ -s "$dir/daemon.log" ]; then grep -v "UNSAFE" "$dir/daemon.log" | head -12 | sed "s/^/  daemon: /"; fi
  grep -h "^gpu " "$dir/out.txt" | sed "s/^/  /"
}

status=0
flags="safe --unsafe-skip-end-barrier --unsafe-event-before-epilogue"
[ $gpu -eq 1 ] && flags="$flags --unsafe-size-dependent-slots"
printf "%-32s %8s %14s %10s  %s\n" flag ops wrong_elements windows verdict
i=0
for flag in $flags; do
  i=$((i + 1))
  start_config "$flag" "c$i"
  [ $parallel -eq 0 ] && finish_config "$flag" "c$i"
done
if [ $parallel -eq 1 ]; then
  i=0
  for flag in $flags; do i=$((i + 1)); finish_config "$flag" "c$i"; done
fi
if [ $gpu -eq 0 ]; then
  echo "(--unsafe-size-dependent-slots is not offered on the host backend: its unconditional end barrier"
  echo " makes a slot's position irrelevant to correctness there; see docs/protocol.md)"
fi
exit $status
