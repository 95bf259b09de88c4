#!/usr/bin/env bash
# Issue 21 item 1, the GPU half: the kernel tests under compute-sanitizer's
# memcheck, racecheck and synccheck, and the GPU daemon tests under memcheck
# with every process it starts checked (the daemon and the test clients).
# Each tool gets at most TOOL_S seconds (the tests' own deadlines end a rank
# that waits for a peer the tool has slowed: such a failure is the tool's
# pace, not a finding; the ERROR SUMMARY lines are the findings).
#   bash gpu-bundle/compute_sanitizer_batch.sh     (env: TOOL_S, DAEMON_FILTER)
source "$(dirname "$0")/gpu_bundle_env.sh"
s=${TOOL_S:-120}
{
  echo "## $(date -u +%FT%TZ) $(compute-sanitizer --version | tail -1)"
  for tool in memcheck racecheck synccheck; do
    echo "## device_kernels_test under $tool"
    # The whole report goes to a file (a `head` here once cut racecheck
    # short with SIGPIPE); the summary and the first findings are shown.
    timeout "$s" compute-sanitizer --tool "$tool" --error-exitcode 99 ./bin/device_kernels_test \
      > "$out/sanitizer_kernels_$tool.txt" 2>&1
    echo "rc=$?"
    grep -E "^\[ +(FAILED|PASSED) \]|ERROR SUMMARY|RACECHECK SUMMARY" "$out/sanitizer_kernels_$tool.txt"
    grep -E -A6 "^========= (Error|Invalid|Program hit|Race|Barrier|Hazard)" "$out/sanitizer_kernels_$tool.txt" | head -40
  done
  echo "## gpu_daemon_test under memcheck (every process)"
  timeout "$s" compute-sanitizer --tool memcheck --target-processes all --error-exitcode 99 \
    ./bin/gpu_daemon_test --gtest_filter="${DAEMON_FILTER:-*Exact*:*Killed*:*CrossStream*:*BadInput*:*Registered*-*GraphReplay*:*StagedAndZeroCopy*:*AcrossTwoDaemons*}" \
    > "$out/sanitizer_daemon_memcheck.txt" 2>&1
  echo "rc=$?"
  grep -E "^\[ +(FAILED|PASSED) \]|ERROR SUMMARY" "$out/sanitizer_daemon_memcheck.txt"
  grep -E -A6 "^========= (Error|Invalid|Program hit)" "$out/sanitizer_daemon_memcheck.txt" | head -40
} 2>&1 | tee "$out/compute_sanitizer.txt"
