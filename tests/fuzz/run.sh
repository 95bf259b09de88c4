#!/usr/bin/env bash
# Fuzzes each target of a COLLECTIVED_FUZZ build for a bounded time, from the
# checked-in seeds (corpus/TARGET) and past crashes (regressions/TARGET),
# in a scratch corpus (the checked-in one is not changed).
#   run.sh BUILD_DIR SECONDS [TARGET...]       targets: service segment fd_socket
#   run.sh --write-seeds BUILD_DIR             remakes corpus/ from the targets' seed code
# A crash leaves its input in BUILD_DIR/fuzz-artifacts and fails: add the
# file to regressions/TARGET (the fuzz_TARGET_inputs test then replays it).
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
if [ "${1:-}" = --write-seeds ]; then
  for t in service segment fd_socket; do
    rm -rf "$here/corpus/$t" && mkdir -p "$here/corpus/$t"
    COLLECTIVED_FUZZ_WRITE_SEEDS="$here/corpus/$t" "$2/bin/${t}_fuzz" || exit 1
  done
  exit 0
fi
build=$1 seconds=$2; shift 2
targets=("$@")
[ ${#targets[@]} -eq 0 ] && targets=(service segment fd_socket)
artifacts=$build/fuzz-artifacts
mkdir -p "$artifacts"
rc=0
for t in "${targets[@]}"; do
  bin=$build/bin/${t}_fuzz
  [ -x "$bin" ] || { echo "fuzz: $bin is not built (COLLECTIVED_FUZZ=ON)"; rc=1; continue; }
  work=$(mktemp -d)
  cp "$here/corpus/$t"/* "$work"/ 2>/dev/null
  [ -d "$here/regressions/$t" ] && cp "$here/regressions/$t"/* "$work"/ 2>/dev/null
  "$bin" -max_total_time="$seconds" -timeout=20 -rss_limit_mb=4096 -print_final_stats=1 \
    -artifact_prefix="$artifacts/$t-" "$work" >"$artifacts/$t.log" 2>&1
  status=$?
  stats=$(grep -E "^stat::number_of_executed_units|^stat::peak_rss_mb" "$artifacts/$t.log" | tr '\n' ' ')
  cov=$(grep -E "^#[0-9]+.*(DONE|pulse|NEW|REDUCE)" "$artifacts/$t.log" | tail -1 | grep -oE "cov: [0-9]+ ft: [0-9]+")
  echo "fuzz $t: ${seconds}s, rc $status, $stats $cov, corpus $(ls "$work" | wc -l) inputs"
  if [ $status -ne 0 ]; then
    grep -E "ERROR|SUMMARY|==[0-9]+==|_fuzz: " "$artifacts/$t.log" | head -20
    ls "$artifacts"/"$t"-* 2>/dev/null
    rc=1
  fi
  rm -rf "$work"
done
exit $rc
