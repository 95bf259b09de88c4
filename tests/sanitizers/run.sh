#!/usr/bin/env bash
# The host code under sanitizers, each in a build directory of its own, with
# the host tests it can run; fails on any sanitizer report from any process
# (tests, daemons, clients: every report goes to a log file, which tests do
# not read, so this script does).
#   run.sh asan SOURCE_DIR BUILD_DIR [FUZZ_SECONDS]   clang, ASan+UBSan (+LSan),
#          then the fuzz targets (tests/fuzz/run.sh) for FUZZ_SECONDS each (default 45)
#   run.sh tsan SOURCE_DIR BUILD_DIR                  gcc, TSan
# What each runs, and why the rest is left out, is in docs/proof.md.
# Exits 77 (skipped) when the compiler or runtime it needs is missing.
set -uo pipefail
kind=$1 src=$2 build=$3 fuzz_seconds=${4:-45}
reports=$build/sanitizer-reports
here=$(cd "$(dirname "$0")" && pwd)

case $kind in
  asan)
    command -v clang++ >/dev/null || { echo "no clang++: skipped"; exit 77; }
    compiler=(-DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++)
    flags=(-DCOLLECTIVED_SANITIZE=address,undefined -DCOLLECTIVED_FUZZ=ON)
    # Clang's line tables are enough for symbolized reports.
    cxxflags="-O1 -gline-tables-only -fno-sanitize-recover=undefined"
    labels="unit|integration"
    # FdExhaustion: the sanitizers' own checks open pipes, which fail while
    # the test holds every descriptor (a false "invalid vptr"). stress: MPI
    # programs; Open MPI's leaks at exit and LSan's scan of its mappings take
    # a minute per process.
    exclude="FdExhaustion|hip_backend_build|thread_safety_check|deb_packages|install_and_find_package|layering_check"
    export ASAN_OPTIONS="log_path=$reports/asan:detect_leaks=1:abort_on_error=0"
    export UBSAN_OPTIONS="log_path=$reports/ubsan:print_stacktrace=1"
    export LSAN_OPTIONS="suppressions=$here/lsan.supp"
    ;;
  tsan)
    compiler=()
    flags=(-DCOLLECTIVED_SANITIZE=thread)
    cxxflags="-O1 -g1"
    labels="unit|integration|stress|multinode"
    # DaemonIdleTest: fifty communicators take turns on one client buffer,
    # ordered through the client process, which TSan cannot see (it sees one
    # process). Negative controls: their unsafe runs race on purpose.
    exclude="DaemonIdleTest|negative_controls|hip_backend_build|thread_safety_check|deb_packages|install_and_find_package|layering_check"
    export TSAN_OPTIONS="log_path=$reports/tsan:ignore_noninstrumented_modules=1:suppressions=$here/tsan.supp"
    ;;
  *) echo "usage: run.sh asan|tsan SOURCE_DIR BUILD_DIR [FUZZ_SECONDS]" >&2; exit 2 ;;
esac
# UCX's memory hooks (libucm) run inside thread exit, where the sanitizer
# runtimes have already torn the thread down: off, as the daemon does not
# need them on the host backend.
export UCX_MEM_EVENTS=no
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1

generator=()
command -v ninja >/dev/null && generator=(-G Ninja)
if [ ! -f "$build/CMakeCache.txt" ]; then
  cmake -S "$src" -B "$build" "${generator[@]}" "${compiler[@]}" "${flags[@]}" -DCOLLECTIVED_GPU_BACKEND=none \
    -DCMAKE_BUILD_TYPE=None "-DCMAKE_CXX_FLAGS=$cxxflags" >"$build.configure.log" 2>&1 ||
    { tail -30 "$build.configure.log"; exit 1; }
fi
cmake --build "$build" --parallel "$(nproc)" >"$build.build.log" 2>&1 || { tail -40 "$build.build.log"; exit 1; }
rm -rf "$reports" && mkdir -p "$reports"

rc=0
(cd "$build" && ctest -L "$labels" -E "$exclude" --timeout 600 --output-on-failure -j "$(nproc)") \
  >"$build.ctest.log" 2>&1 || rc=1
grep -E "tests passed|Failed|Timeout|\*\*\*" "$build.ctest.log" | tail -25
# What a failing test said (gtest's failures, the soak's FAIL lines): CI
# keeps only this script's output.
[ "$rc" -eq 0 ] || grep -E "^FAIL:|Failure$|^\[  FAILED  \]|Expected|Which is|Value of" "$build.ctest.log" | head -40
if [ "$kind" = asan ]; then
  bash "$src/tests/fuzz/run.sh" "$build" "$fuzz_seconds" || rc=1
fi
found=$(find "$reports" -type f | wc -l)
if [ "$found" -ne 0 ]; then
  echo "sanitizer reports ($found files):"
  for f in "$reports"/*; do
    echo "== $f"; grep -m5 -E "SUMMARY|ERROR|runtime error" "$f"
  done
  head -80 "$(find "$reports" -type f | head -1)"
  rc=1
else
  echo "$kind: no sanitizer reports"
fi
exit $rc
