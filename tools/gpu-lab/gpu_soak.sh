#!/usr/bin/env bash
# Issue 21's soak on the GPU machine: tests/soak/soak.py with the daemon on
# the cuda backend and the test client's GPU communicators (--gpu 1: heap and
# staged buffers, eager and graph-replayed), two groups of 4 ranks as
# processes under a private MPS, a rank SIGKILLed in about half the rounds.
#   MINUTES=9 bash gpu-bundle/gpu_soak.sh        (a device call lasts 10 minutes at most)
source "$(dirname "$0")/gpu_bundle_env.sh"
repo=$(cd .. && pwd)
work=$(mktemp -d)
export CUDA_MPS_PIPE_DIRECTORY=$work/mps-pipe CUDA_MPS_LOG_DIRECTORY=$work/mps-log
mkdir -p "$CUDA_MPS_PIPE_DIRECTORY" "$CUDA_MPS_LOG_DIRECTORY"
nvidia-cuda-mps-control -d || echo "MPS did not start"
python3 "$repo/tests/soak/soak.py" --daemon bin/collectived --client bin/collectived_test_client \
  --daemon-args "--backend cuda" --client-args "--gpu 1" --minutes "${MINUTES:-9}" --sample-s 60 \
  --out "$out/gpu-soak" 2>&1 | tee "$out/gpu_soak.txt" | tail -40
echo "soak rc=${PIPESTATUS[0]}"
echo quit | nvidia-cuda-mps-control
rm -rf "$work"
