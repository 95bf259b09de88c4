#!/usr/bin/env bash
# Runs the example job: a private collectived, then 4 client processes that
# all-reduce and all-gather through it, once client-executed and once
# daemon-executed; when the daemon serves the cuda backend (a GPU is visible)
# and GPU_EXAMPLE_BIN exists, 4 GPU client processes too (one GPU communicator,
# client-executed on each client's stream). Prints their results and
# `collectivectl stats`, stops the daemon cleanly. Exit 0 iff every element of
# every result was exact.
#
#   run_example.sh COLLECTIVED_BIN EXAMPLE_BIN COLLECTIVECTL_BIN [COUNT] [GPU_EXAMPLE_BIN]
set -u
daemon_bin=$1 example_bin=$2 ctl_bin=$3 count=${4:-1048576} gpu_example_bin=${5:-}
work=$(mktemp -d /tmp/collectived-example-XXXXXX)
sock=$work/collectived.sock
cleanup() {
  if [ -n "${daemon_pid:-}" ] && kill -0 "$daemon_pid" 2>/dev/null; then
    kill -TERM "$daemon_pid"; wait "$daemon_pid" 2>/dev/null
  fi
  rm -rf "$work"
}
trap cleanup EXIT

"$daemon_bin" --socket "$sock" --log-level warn > "$work/daemon.log" 2>&1 &
daemon_pid=$!
for _ in $(seq 100); do [ -S "$sock" ] && [ -S "$sock.fds" ] && break; sleep 0.05; done
if ! "$ctl_bin" --socket "$sock" health > /dev/null; then
  echo "collectived did not come up:"; cat "$work/daemon.log"; exit 1
fi
"$ctl_bin" --socket "$sock" version

status=0
for mode in client daemon; do
  echo "--- 4 clients, $mode-executed, $count float32 / int32 elements per rank"
  pids=()
  for rank in 0 1 2 3; do
    "$example_bin" --socket "$sock" --key "example-$mode" --world 4 --rank "$rank" --mode "$mode" \
      --count "$count" > "$work/rank$rank.out" 2>&1 &
    pids+=($!)
  done
  for rank in 0 1 2 3; do
    wait "${pids[$rank]}" || status=1
    cat "$work/rank$rank.out"
  done
done
if "$ctl_bin" --socket "$sock" version | grep -q "backend cuda" && [ -x "$gpu_example_bin" ]; then
  echo "--- 4 GPU clients on device 0 (client-executed on their own streams; under MPS they run concurrently,"
  echo "    without it the GPU time-slices between the processes), $count elements per rank"
  pids=()
  for rank in 0 1 2 3; do
    "$gpu_example_bin" --socket "$sock" --key example-gpu --world 4 --rank "$rank" --count "$count" \
      > "$work/gpu$rank.out" 2>&1 &
    pids+=($!)
  done
  for rank in 0 1 2 3; do
    wait "${pids[$rank]}" || status=1
    cat "$work/gpu$rank.out"
  done
fi
echo "--- collectivectl stats"
"$ctl_bin" --socket "$sock" stats

kill -TERM "$daemon_pid"
if ! wait "$daemon_pid"; then echo "collectived did not stop cleanly:"; cat "$work/daemon.log"; status=1; fi
daemon_pid=
if [ $status -eq 0 ]; then echo "RESULT: every element exact in both modes"; else echo "RESULT: FAILED"; fi
exit $status
