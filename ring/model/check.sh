#!/usr/bin/env bash
# Model-checks the op-ring protocol (op_ring.pml) with SPIN: the protocol as
# the daemon runs it must be safe and free of deadlock for every
# configuration below (exhaustive search), and every unsafe variant must give
# a counterexample. Prints one line per run (states, seconds, verdict).
#   check.sh [--all]     --all adds 3 ranks x 2 ops (about 52 M states, 3 GB, a minute or more)
# Exits 77 (skipped) without spin or a C compiler.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
model_path="$here/op_ring.pml" memlim=6000 cc_extra= width=34
# shellcheck source=spin_run.sh
source "$here/spin_run.sh"
run() { spin_run "$@"; }

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
