#!/usr/bin/env bash
# One batch on the GPU machine over a bundle made by ../shared/tools/device-bundle
# (bin/ with collectived, the GPU tests and clients, collective-bench,
# collective-stress; this script and the others beside it copied in):
# the kernel tests, the GPU integration tests, the example job, the GPU
# negative controls, then the daemon bench (BENCH_MODE=quick by default; empty
# for the full sweep). The bench gets what is left of BATCH_S seconds (570 by
# default, inside one device call). Outputs under $OUT.
#   bash gpu-bundle/gpu_device_batch.sh
source "$(dirname "$0")/gpu_bundle_env.sh"
timeout 240 ./bin/device_kernels_test > "$out/device_kernels.txt" 2>&1; echo "kernel tests rc=$?"
grep -E "^\[ +(FAILED|PASSED) |Failure" "$out/device_kernels.txt" | head -20
timeout 180 ./bin/gpu_daemon_test > "$out/gpu_daemon.txt" 2>&1; echo "gpu tests rc=$?"
grep -E "^\[ +(FAILED|PASSED) |Failure|Expected|Which|wrong|status:" "$out/gpu_daemon.txt" | head -30
timeout 60 bash run_example.sh bin/collectived bin/allreduce_allgather bin/collectivectl 1048576 \
  bin/gpu_allreduce_allgather > "$out/example.txt" 2>&1; echo "example rc=$?"
grep -E "GPU|RESULT" "$out/example.txt" | head -14
timeout 100 bash negative-controls.sh --gpu --seconds 8 > "$out/gpu_controls.txt" 2>&1; echo "controls rc=$?"
head -30 "$out/gpu_controls.txt"
timeout $((${BATCH_S:-570} - SECONDS)) bash gpu_daemon_bench.sh bin ${BENCH_MODE-quick} > /dev/null 2>&1; echo "bench rc=$?"
