#!/usr/bin/env bash
# Issue 21's soak on the GPU machine: tests/soak/soak.py with the daemon on
# the cuda backend and the test client's GPU communicators (--gpu 1: heap and
# staged buffers, eager and graph-replayed), two groups of 4 ranks as
# processes under a private MPS, a rank SIGKILLed in about half the rounds.
#   MINUTES=9 bash gpu-bundle/gpu_soak.sh          (inside one device call: 10 minutes at most; $OUT/gpu-soak.tgz)
# The 10-minute soak outlives one call: `start` copies the bundle and the soak
# to /tmp and launches it in its own process session; `collect` (the next
# call, within the machine's warm time) waits for it (at most WAIT_S) and
# copies its outputs to $OUT.
#   MINUTES=10 SLEEP_S=560 bash gpu-bundle/gpu_soak.sh start; bash gpu-bundle/gpu_soak.sh collect
# (collect leaves $OUT/gpu-soak.tgz: the summary, plot, MPS logs, every round's logs, hangs.txt).
# Run it alone: other GPU work beside it (as compute-sanitizer was on 2026-12-06) blurs a failure.
# ROUND_TIMEOUT_S (120): a round whose ranks have not all ended by then is hung
# (a short run that must see a hang within one device call lowers it).
# SOAK_GROUPS=1: one communicator on the GPU at a time. Each communicator sizes its
# blocks to the whole GPU (one per SM over its ranks there), so two groups ask
# for two blocks per SM, the occupancy at which the kernel tests once hit
# their deadlines (docs/gpu-kernels.md): a 1-group soak tells that apart.
set -u
run=/tmp/soak-bundle log=/tmp/gpu_soak.txt
soak() {  # soak BUNDLE OUT_DIR
  source "$1/gpu_bundle_env.sh"
  local work
  work=$(mktemp -d)
  start_private_mps "$work"
  date -u +"# started %Y-%m-%dT%H:%M:%SZ"
  # A hung round records where its processes sleep, the GPU's processes and
  # the tail of MPS's logs (the 2026-12-06 soak hung every round after its
  # 14th, in both groups at once); every log is kept (--keep).
  python3 soak.py --daemon bin/collectived --client bin/collectived_test_client \
    --daemon-args "--backend cuda" --client-args "--gpu 1" --minutes "${MINUTES:-9}" --sample-s 60 \
    --groups "${SOAK_GROUPS:-2}" --mid-op-max-s 2 --round-timeout-s "${ROUND_TIMEOUT_S:-120}" \
    --hang-cmd "nvidia-smi; tail -n 30 $CUDA_MPS_LOG_DIRECTORY/control.log $CUDA_MPS_LOG_DIRECTORY/server.log" \
    --keep --out "$2/gpu-soak" 2>&1
  echo "soak rc=$?"
  echo quit | nvidia-cuda-mps-control
  sleep 1
  cp "$CUDA_MPS_LOG_DIRECTORY"/*.log "$2/gpu-soak/" 2>/dev/null
  rm -rf "$work"
  date -u +"# ended %Y-%m-%dT%H:%M:%SZ"
}
case ${1:-} in
  start)
    rm -rf "$run" && cp -a "$(dirname "$0")" "$run" && cp "$(dirname "$0")/../tests/soak/soak.py" "$run"/
    rm -rf /tmp/soak-out && mkdir -p /tmp/soak-out
    export -f soak
    setsid nohup bash -c 'soak "$0" /tmp/soak-out' "$run" > "$log" 2>&1 < /dev/null &
    echo "started: pid $!, ${MINUTES:-9} minutes"
    sleep "${SLEEP_S:-0}"
    tail -20 "$log" ;;
  collect)
    for _ in $(seq "${WAIT_S:-300}"); do grep -q "^# ended" "$log" 2>/dev/null && break; sleep 1; done
    cp "$log" /tmp/soak-out/gpu_soak.txt
    tar czf "${OUT:-/tmp}/gpu-soak.tgz" -C /tmp/soak-out .  # every round's logs: more files than $OUT returns
    tail -40 "$log" ;;
  *)  # inline: every round's log stays in /tmp (more files than $OUT returns), one tarball in $OUT
    cp "$(dirname "$0")/../tests/soak/soak.py" "$(dirname "$0")"/
    rm -rf /tmp/soak-out && mkdir -p /tmp/soak-out
    soak "$(dirname "$0")" /tmp/soak-out 2>&1 | tee /tmp/soak-out/gpu_soak.txt | tail -40
    tar czf "${OUT:-/tmp}/gpu-soak.tgz" -C /tmp/soak-out . ;;
esac
