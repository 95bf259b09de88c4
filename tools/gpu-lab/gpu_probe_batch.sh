#!/usr/bin/env bash
# One device call of checks and probes over a bundle (see gpu_device_batch.sh):
# the GPU tests touched by the staging and copy-out-delay changes, a short
# parallel run of the GPU negative controls, the MPS hardware-queue probe and
# the daemon-executed path probes (fused against copy-engine). Outputs under $OUT.
source "$(dirname "$0")/gpu_bundle_env.sh"
timeout 120 ./bin/gpu_daemon_test --gtest_filter='*Staging*:*SizeDependent*:*CrossStream*:*EventBefore*' \
  > "$out/gpu_tests.txt" 2>&1; echo "gpu tests rc=$?"
grep -E "^\[ +(OK|FAILED|PASSED) |Failure|Expected|Which" "$out/gpu_tests.txt" | head -20
timeout 150 bash negative-controls.sh --gpu --parallel --seconds ${CONTROL_S:-30} > "$out/controls.txt" 2>&1
echo "controls rc=$?"; cat "$out/controls.txt" | head -30
timeout 200 bash mps_connections_probe.sh bin 2>&1 | tee "$out/mps_probe.txt"
for kind in all_gather all_reduce; do
  timeout 240 bash daemon_paths_probe.sh bin $kind > /dev/null 2>&1
done
