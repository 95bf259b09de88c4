#!/usr/bin/env bash
# One device call over a bundle (see gpu_device_batch.sh): the GPU tests of
# the hardware-queue lease and the staging control, 8 ranks in one process
# under MPS with CUDA_DEVICE_MAX_CONNECTIONS=8 (and the refusal without it),
# then the GPU negative controls, all four configurations at once, for what
# is left of BATCH_S seconds (575 by default). Outputs under $OUT.
source "$(dirname "$0")/gpu_bundle_env.sh"
timeout 60 ./bin/gpu_daemon_test --gtest_filter='*Queues*:*Staging*:*SizeDependent*' > "$out/gpu_tests.txt" 2>&1
echo "gpu tests rc=$?"
grep -E "^\[ +(OK|FAILED|PASSED) |Failure|Expected|Which" "$out/gpu_tests.txt" | head -20
{
  work=$(mktemp -d)
  export CUDA_MPS_PIPE_DIRECTORY=$work/pipe CUDA_MPS_LOG_DIRECTORY=$work/log
  mkdir -p "$CUDA_MPS_PIPE_DIRECTORY" "$CUDA_MPS_LOG_DIRECTORY"
  nvidia-cuda-mps-control -d
  ./bin/collectived --socket "$work/c.sock" --backend cuda --log-level error > "$work/d.log" 2>&1 &
  daemon=$!
  for _ in $(seq 200); do [ -S "$work/c.sock" ] && break; sleep 0.05; done
  echo "## under MPS, 8 ranks as sessions of one process, CUDA_DEVICE_MAX_CONNECTIONS unset (refused up front)"
  timeout 30 ./bin/collective-bench -D "$work/c.sock" -k q-unset -g 8 -b 16K -e 16K -c 1 -n 5 -w 1 2>&1 | tail -2
  for m in client daemon; do
    echo "## under MPS, 8 ranks as sessions, CUDA_DEVICE_MAX_CONNECTIONS=8, $m-executed"
    CUDA_DEVICE_MAX_CONNECTIONS=8 timeout 60 ./bin/collective-bench -D "$work/c.sock" -k q8-$m -m $m -g 8 \
      -b 16K -e 1M -f 4 -c 1 -n 50 -w 20 2>&1 | grep -v "^# least\|^#  *size"
    CUDA_DEVICE_MAX_CONNECTIONS=8 timeout 60 ./bin/collective-bench -D "$work/c.sock" -k q8g-$m -m $m -g 8 \
      -b 16K -e 1M -f 4 -c 1 -n 50 -w 20 -G 10 2>&1 | grep -v "^# least\|^#  *size"
  done
  kill -TERM $daemon; wait $daemon
  echo quit | nvidia-cuda-mps-control
  rm -rf "$work"
} 2>&1 | tee "$out/mps_sessions.txt"
left=$(( ${BATCH_S:-575} - SECONDS ))
echo "## GPU negative controls, 4 configurations at once, $((left - 60)) s each"
timeout $left bash negative-controls.sh --gpu --parallel --seconds $((left - 60)) 2>&1 | tee "$out/controls_long.txt"
