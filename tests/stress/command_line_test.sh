#!/usr/bin/env bash
# collective-stress's command line: --help answers 0 with the usage, an
# unknown flag, a flag without a value, a bad number or mode answer 2 with the
# reason, and none of them tries to reach a daemon.
#   command_line_test.sh PATH/TO/collective-stress
set -u
bin=$1
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
fail=0
expect() {  # expect CODE TEXT ARGS...
  local code=$1 text=$2; shift 2
  out=$("$bin" "$@" 2>&1); rc=$?
  if [ "$rc" -ne "$code" ] || ! grep -q -- "$text" <<< "$out" || grep -q "connect:" <<< "$out"; then
    echo "FAIL: collective-stress $* -> rc $rc (want $code, output with '$text'):"; echo "$out" | head -5; fail=1
  else
    echo "ok   collective-stress $* -> $rc"
  fi
}
expect 0 "usage: mpirun" --help
expect 2 "unknown option --secs" --secs 10
expect 2 "--seconds needs a value" --seconds
expect 2 "not a number" --seconds ten
expect 2 "--mode is client, daemon or both" --mode both-ways
expect 2 "are positive" --window 0
exit $fail
