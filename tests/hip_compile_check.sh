#!/usr/bin/env bash
# Compiles the GPU kernels (kernels/device/*.cu, the CUDA sources) with hipcc
# for AMD, from the same source. Exit 77 (CTest: skipped) without hipcc.
#   hip_compile_check.sh SOURCE_DIR [ARCH]
set -u
src=$1 arch=${2:-gfx90a}
command -v hipcc >/dev/null || { echo "hipcc not installed: HIP compile check skipped"; exit 77; }
out=$(mktemp -d /tmp/collectived-hip-XXXXXX)
trap 'rm -rf "$out"' EXIT
status=0
for f in "$src"/ring/*.cu "$src"/kernels/device/*.cu; do
  if hipcc -std=c++20 --offload-arch="$arch" -DCOLLECTIVED_USE_HIP -I "$src/include" -I "$src" -x hip \
       -c "$f" -o "$out/$(basename "$f").o" > "$out/log" 2>&1 && strings "$out/$(basename "$f").o" | grep -q "$arch"; then
    echo "ok   $(basename "$f") for $arch"
  else
    echo "FAIL $(basename "$f") for $arch"; grep -E "error" "$out/log" | head -20; status=1
  fi
done
exit $status
