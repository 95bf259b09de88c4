#!/usr/bin/env bash
# Model-checks the op-ring protocol (op_ring.pml) with SPIN: the protocol as
# the daemon runs it must be safe and free of deadlock for every
# configuration below (exhaustive search), and every unsafe variant must give
# a counterexample. Prints one line per run (states, seconds, verdict).
#   check.sh [--all]     --all adds 3 ranks x 2 ops (about 52 M states, 3 GB, a minute or more)
# Exits 77 (skipped) without spin or a C compiler.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
command -v spin >/dev/null || { echo "no spin: skipped"; exit 77; }
command -v cc >/dev/null || { echo "no C compiler: skipped"; exit 77; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cp "$here/op_ring.pml" "$work/"
cd "$work" || exit 1

# run NAME EXPECT(safe|unsafe) SPIN-DEFINES...
fail=0
run() {
  local name=$1 expect=$2; shift 2
  spin -a "$@" op_ring.pml >spin.log 2>&1 || { echo "$name: spin failed"; cat spin.log; fail=1; return; }
  cc -O2 -w -DSAFETY -DCOLLAPSE -DMEMLIM=6000 -o pan pan.c || { echo "$name: cc failed"; fail=1; return; }
  local start=$SECONDS
  ./pan -m200000 >pan.log 2>&1
  local errors states what
  errors=$(grep -oE "errors: [0-9]+" pan.log | grep -oE "[0-9]+")
  states=$(grep -oE "^ *[0-9e.+]+ states, stored" pan.log | grep -oE "[0-9e.+]+" | head -1)
  what=$(grep -m1 -E "^pan:1:" pan.log | sed 's/^pan:1: //')
  if grep -q "out of memory\|max search depth too small" pan.log; then
    echo "$name: search incomplete"; grep -E "out of memory|max search depth" pan.log; fail=1; return
  fi
  if [ "$expect" = safe ]; then
    if [ "${errors:-1}" = 0 ]; then
      printf '%-34s safe: %s states, %ss\n' "$name" "$states" "$((SECONDS - start))"
    else
      printf '%-34s UNSAFE (expected safe): %s\n' "$name" "$what"; spin -t -p "$@" op_ring.pml | tail -30; fail=1
    fi
  else
    if [ "${errors:-0}" -ge 1 ]; then
      printf '%-34s counterexample: %s\n' "$name" "$what"
    else
      printf '%-34s NO COUNTEREXAMPLE (the model cannot see this bug): %s states\n' "$name" "$states"; fail=1
    fi
  fi
}

run "2 ranks, 2 ops, depth 1" safe -DN=2 -DK=2 -DD=1
run "2 ranks, 3 ops, depth 2" safe -DN=2 -DK=3 -DD=2
run "3 ranks, 1 op, depth 1" safe -DN=3 -DK=1 -DD=1
if [ "${1:-}" = --all ]; then
  run "3 ranks, 2 ops, depth 1" safe -DN=3 -DK=2 -DD=1
fi
# Depth 2 lets a rank post its next op while a peer still runs this one;
# BOOL_READY needs a slot reused (more ops than depth).
for v in SKIP_END_BARRIER EVENT_BEFORE_EPILOGUE SIZE_DEPENDENT_SLOTS BOOL_FLAGS NO_DEADLINE ABORT_UNCHECKED; do
  run "$v" unsafe -DN=2 -DK=2 -DD=2 "-D$v"
done
run BOOL_READY unsafe -DN=2 -DK=2 -DD=1 -DBOOL_READY
exit $fail
