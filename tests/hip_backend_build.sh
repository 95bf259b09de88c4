#!/usr/bin/env bash
# The whole GPU backend for AMD, from the same sources: configures BUILD_DIR
# with COLLECTIVED_GPU_BACKEND=hip (hipcc as the C++ compiler, tests off),
# builds the GPU product targets, and checks what came out: every kernel
# object holds code for each AMD architecture (an AMDGPU code object with
# kernels in it), and no source of that build included a CUDA header.
# Exit 77 (CTest: skipped) without hipcc.
#   hip_backend_build.sh SOURCE_DIR BUILD_DIR
set -euo pipefail
src=$(cd "$1" && pwd) build=$2
command -v hipcc >/dev/null || { echo "hipcc not installed: HIP backend build skipped"; exit 77; }
archs=(gfx90a gfx940)

# The GPU product targets the hip build covers: every GPU source of the
# product (the CUDA-only tests, example and bench are left out, see README).
targets=(collectived_ring_gpu collectived_device_kernels collectived_cumem collectived_client collectived_daemon collectived)

# Release: what is checked is that it compiles (RelWithDebInfo, with device
# debug info, takes longer). The compiler is chosen on the first configure only.
generator=()
[ ! -f "$build/CMakeCache.txt" ] && command -v ninja >/dev/null && generator=(-G Ninja)
arch_list=$(IFS=';'; echo "${archs[*]}")
cmake -S "$src" -B "$build" "${generator[@]}" -DCMAKE_BUILD_TYPE=Release -DCMAKE_CXX_COMPILER=hipcc \
  -DCOLLECTIVED_GPU_BACKEND=hip -DCOLLECTIVED_HIP_ARCHITECTURES="$arch_list" -DCOLLECTIVED_BUILD_TESTS=OFF
cmake --build "$build" --parallel 2 --target "${targets[@]}"

# LLVM 15's tools (hipcc's clang; Debian's hipcc depends on clang-tools-15 and llvm-15).
tool() {
  local t
  for t in "$(command -v "$1" || true)" /usr/lib/llvm-15/bin/"$1" /opt/rocm/llvm/bin/"$1"; do
    if [ -n "$t" ] && [ -x "$t" ]; then echo "$t"; return; fi
  done
  echo "FAIL: $1 not found (it comes with hipcc's LLVM)" >&2
  exit 1
}
bundler=$(tool clang-offload-bundler) objcopy=$(tool llvm-objcopy) readelf=$(tool llvm-readelf)

status=0
tmp=$(mktemp -d /tmp/collectived-hip-XXXXXX)
trap 'rm -rf "$tmp"' EXIT
mapfile -t objects < <(find "$build" -name '*.cu.o' | sort)
if [ "${#objects[@]}" -lt 3 ]; then
  echo "FAIL: expected the kernel objects (ring, kernels/device) in $build, found ${#objects[@]}"
  status=1
fi
for o in "${objects[@]}"; do
  name=$(basename "$o")
  # A HIP object carries its device code as an offload bundle in .hip_fatbin.
  if ! "$objcopy" --dump-section=.hip_fatbin="$tmp/fatbin" "$o" "$tmp/host.o" 2>/dev/null; then
    echo "FAIL $name: no .hip_fatbin section (not compiled as HIP?)"; status=1; continue
  fi
  for a in "${archs[@]}"; do
    target=hipv4-amdgcn-amd-amdhsa--$a
    co=$tmp/$a.co
    rm -f "$co"
    entries=$("$bundler" --list --type=o --input="$tmp/fatbin")
    if ! grep -qx "$target" <<<"$entries" ||
       ! "$bundler" --unbundle --type=o --input="$tmp/fatbin" --targets="$target" --output="$co" 2>/dev/null; then
      echo "FAIL $name: no $a code object in its bundle"; status=1; continue
    fi
    # An AMDGPU ELF whose target note names the architecture, with kernel descriptors in it.
    header=$("$readelf" -h "$co") notes=$(strings "$co")
    kernels=$("$readelf" -s --wide "$co" | grep -c '\.kd$' || true)
    if grep -q 'EM_AMDGPU' <<<"$header" && grep -q "amdgcn-amd-amdhsa--$a" <<<"$notes" && [ "$kernels" -gt 0 ]; then
      echo "ok   $name: $a code object, $kernels kernels"
    else
      echo "FAIL $name: the $a bundle entry is no AMDGPU code object with kernels"; status=1
    fi
  done
done

# No translation unit of the hip build may include a CUDA header (the CUDA
# toolkit's headers are on the default include path here, so one would compile).
if [ -f "$build/build.ninja" ]; then
  cuda_headers=$(ninja -C "$build" -t deps | awk '
    /^[^ ]/ { object = $1 }
    /^ / && $1 ~ /\/cuda[A-Za-z0-9_]*\.h(pp)?$/ && $1 !~ /\/llvm-[0-9]+\// { print "  " object " " $1 }')
  if [ -n "$cuda_headers" ]; then
    echo "FAIL: the hip build included CUDA headers:"; echo "$cuda_headers"; status=1
  else
    echo "ok   no CUDA header in the hip build"
  fi
fi
exit $status
