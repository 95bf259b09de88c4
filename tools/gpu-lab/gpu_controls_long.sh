#!/usr/bin/env bash
# The issue-4 GPU run: the four negative-control configurations (safe and each
# unsafe flag, 4 ranks on one GPU, both modes) at once for SECONDS each (600
# by default), longer than one device call allows. `start` copies the bundle
# to /tmp/controls-bundle (a later call may replace the carried one) and
# launches the run in its own process session, which outlives the call;
# `collect` waits for it (at most WAIT_S) and copies the table to $OUT.
#   bash gpu-bundle/gpu_controls_long.sh start   (one call)
#   bash gpu-bundle/gpu_controls_long.sh collect (the next call, within the machine's warm time)
set -u
run=/tmp/controls-bundle log=/tmp/controls_long.txt
case ${1:-} in
  start)
    rm -rf "$run" && cp -a "$(dirname "$0")" "$run"
    echo quit | nvidia-cuda-mps-control 2>/dev/null  # no MPS left over from an earlier call
    # shellcheck disable=SC2016
    setsid nohup bash -c 'cd "$0" && source ./gpu_bundle_env.sh; date -u +"# started %Y-%m-%dT%H:%M:%SZ";
      bash negative-controls.sh --gpu --parallel --seconds "$1"; echo "controls rc=$?";
      date -u +"# ended %Y-%m-%dT%H:%M:%SZ"' "$run" "${SECONDS_EACH:-600}" > "$log" 2>&1 < /dev/null &
    echo "started: pid $!, each configuration ${SECONDS_EACH:-600} s"
    sleep "${SLEEP_S:-0}"
    cat "$log" ;;
  collect)
    for _ in $(seq "${WAIT_S:-300}"); do grep -q "^# ended" "$log" 2>/dev/null && break; sleep 1; done
    [ "$log" -ef "${OUT:-/tmp}/controls_long.txt" ] || cp "$log" "${OUT:-/tmp}/controls_long.txt"
    cat "$log" ;;
  *) echo "usage: $0 start|collect"; exit 2 ;;
esac
