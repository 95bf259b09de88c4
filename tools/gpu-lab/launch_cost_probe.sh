#!/usr/bin/env bash
# Runs launch_cost_probe.cu (built there with nvcc) as N processes at once
# under a private MPS, each with an idle and with a spinning kernel
# (SPIN_NS): what each call of an eager op's host path costs as the process
# count grows; per call, the slowest process's figure. Output: $OUT/launch_cost.txt.
#   PROCS="1 2 8" SPIN_NS=10000 bash gpu-bundle/launch_cost_probe.sh
source "$(dirname "$0")/gpu_bundle_env.sh"
work=$(mktemp -d)
cc=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader | head -1 | tr -d .)
nvcc -O2 -arch="sm_$cc" -o "$work/probe" "$(dirname "$0")/launch_cost_probe.cu" || exit 1
start_private_mps "$work" > /dev/null
{
  echo "## $(date -u +%FT%TZ) $(nvidia-smi --query-gpu=name --format=csv,noheader), private MPS"
  for np in ${PROCS:-1 2 8}; do
    for spin in 0 "${SPIN_NS:-10000}"; do
      echo "## $np processes at once, kernel spin $spin ns"
      for i in $(seq "$np"); do timeout 60 "$work/probe" "$spin" "${ITERS:-2000}" > "$work/p.$i.txt" 2>&1 & done
      wait
      cat "$work"/p.*.txt | awk '/us\/call$/ {v = $(NF - 1); k = $0; sub(/^pid [0-9]+ spin [0-9]+ ns: /, "", k);
        sub(/ +[0-9.]+ us\/call$/, "", k); if (!(k in m) || v + 0 > m[k] + 0) m[k] = v}
        !/us\/call$/ {print "  " $0} END {for (k in m) printf "  %-44s max %8.2f us/call\n", k, m[k]}' | sort
      rm -f "$work"/p.*.txt
    done
  done
} 2>&1 | tee "$out/launch_cost.txt"
echo quit | nvidia-cuda-mps-control
rm -rf "$work"
