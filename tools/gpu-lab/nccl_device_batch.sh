#!/usr/bin/env bash
# Issue 18 on the GPU machine, from the bundle (make_gpu_bundle.sh): the NCCL
# API library's exported set against the installed torch, its API test, the
# programs written against nccl.h (nccl_gpu_test: 2/4/8 ranks under a private
# MPS), PyTorch unmodified (run_torch_nccl.sh), and with BENCH="2 4 8" the
# all_reduce timings beside collective-bench's through the same daemon.
#   bash gpu-bundle/nccl_device_batch.sh      (env: FILTER, a gtest filter; BENCH)
source "$(dirname "$0")/gpu_bundle_env.sh"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
work=$(mktemp -d)
start_private_mps "$work"
# A step cut off by its timeout still stops its MPS server and removes its files.
trap 'echo quit | nvidia-cuda-mps-control; rm -rf "$work"' EXIT
trap 'exit 143' TERM INT
{
  echo "## $(date -u +%FT%TZ) on $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader)"
  python3 -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda, "nccl built", torch.cuda.nccl.version())'
  torch_lib=$(python3 -c 'import torch, os; print(os.path.join(os.path.dirname(torch.__file__), "lib", "libtorch_cuda.so"))')
  echo "## nccl* names libtorch_cuda.so imports"
  nm -D --undefined-only "$torch_lib" | awk '{print $2}' | grep '^nccl' | sed 's/@.*//' | sort -u | tee "$out/torch_nccl_imports.txt" | tr '\n' ' '
  echo
  echo "## exported set"
  bash symbols_test.sh nccl/libcollectived_nccl.so torch_nccl_symbols.txt
  if [ -z "${SKIP_TESTS:-}" ]; then
    echo "## nccl_api_test"
    bin/nccl_api_test 2>&1 | tail -3
    echo "## nccl_gpu_test"
    timeout 900 bin/nccl_gpu_test ${FILTER:+--gtest_filter=$FILTER} 2>&1 | grep --line-buffered -v "^\[ *RUN\|^$"  # line by line: a timeout must not lose what passed
    echo "## PyTorch"
    CPP_BENCH= BENCH= timeout 600 bash run_torch_nccl.sh
  fi
  if [ -n "${BENCH:-}" ]; then
    echo "## bench"
    SKIP_CHECKS=1 CPP_BENCH=$PWD/bin/collective-bench MAX_MESSAGE_BYTES=1073741824 timeout 900 bash run_torch_nccl.sh
  fi
} 2>&1 | tee "$out/nccl.txt"
