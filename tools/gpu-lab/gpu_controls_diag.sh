#!/usr/bin/env bash
# One device call over a bundle: the GPU negative controls, all four at once,
# for CONTROL_S seconds, with each daemon's error log shown (where the long
# run lost a daemon's CUDA context), then the kernel log's Xid lines if the
# container may read them. Outputs under $OUT.
source "$(dirname "$0")/gpu_bundle_env.sh"
timeout $((${CONTROL_S:-200} + 60)) bash negative-controls.sh --gpu --parallel --seconds ${CONTROL_S:-200} 2>&1 \
  | tee "$out/controls_diag.txt"
echo "## kernel log, Xid lines"
(dmesg 2>&1 | grep -i -E "xid|nvrm" | tail -20) || true
nvidia-smi --query-gpu=name,driver_version,compute_mode --format=csv,noheader
