#!/usr/bin/env bash
# Model-checks the cross-node protocol (cross_node.pml) with SPIN: the
# exchange between nodes and the forming of communicators across nodes, as the
# daemons run them, must be safe and free of deadlock for every configuration
# below (exhaustive search); every unsafe variant (the code before a fix the
# model called for among them, docs/proof.md) must give a counterexample.
# Prints one line per run (states, seconds, verdict).
#   check.sh [--all]     --all adds 3 nodes x 2 ops with a false suspicion and
#                        3 nodes x 1 op with a false suspicion and a restart
#                        faster than loss detection (about 53 M states, 2.5 minutes)
# Exits 77 (skipped) without spin or a C compiler.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
# The harness is the op ring's model's (one model-checking convention).
model_path="$here/cross_node.pml" memlim=3000 cc_extra=-DVECTORSZ=2048 width=46
# shellcheck source=../../ring/model/spin_run.sh
source "$here/../../ring/model/spin_run.sh"
run() { spin_run "$@"; }

# The exchange: a crash anywhere, a restart as epoch 2 and a new communicator.
# REJOIN_RACE: a restart faster than a survivor's loss detection (every
# behaviour of the run without it, and more).
run "exchange: 2 nodes, 3 ops, 1 suspicion" small -DN=2 -DK=3 -DSUSPECTS=1
run "exchange: 3 nodes, 2 ops, rejoin race" safe -DN=3 -DK=2 -DREJOIN_RACE
run "exchange: 3 nodes, 1 op, 1 suspicion" safe -DN=3 -DK=1 -DSUSPECTS=1
if [ "${1:-}" = --all ]; then
  run "exchange: 3 nodes, 2 ops, 1 suspicion" safe -DN=3 -DK=2 -DSUSPECTS=1
  run "exchange: 3 nodes, 1 op, 1 suspicion, rejoin race" safe -DN=3 -DK=1 -DSUSPECTS=1 -DREJOIN_RACE
fi
# Forming: 3 ranks, a duplicate join, a member leaving, a crash and a restart;
# on 3 nodes also faster than loss detection and than control messages in
# flight (REJOIN_RACE, SLOW_PLAN).
run "forming: 2 nodes, 1 suspicion" small -DFORMING -DN=2 -DSUSPECTS=1
run "forming: 3 nodes, rejoin race, slow plan" safe -DFORMING -DN=3 -DREJOIN_RACE -DSLOW_PLAN

for v in UNKEYED NO_LOSS_ABORT TAG_REPEATS; do
  run "$v" unsafe -DN=2 -DK=2 "-D$v"
done
for v in EPOCH_UNCHECKED FORM_UNCHECKED; do
  run "$v" unsafe -DFORMING -DN=2 "-D$v"
done
# The code before d7d08c2 (docs/proof.md: what were REJOIN_RACE,
# FORMED_AFTER_LOSS and SLOW_PLAN), and plans without epochs.
run "REJOIN_SILENT (rejoin race)" unsafe -DN=3 -DK=2 -DREJOIN_RACE -DREJOIN_SILENT
run "PLAN_UNCHECKED" unsafe -DFORMING -DN=3 -DPLAN_UNCHECKED
run "PLAN_EPOCHLESS (slow plan)" unsafe -DFORMING -DN=3 -DSLOW_PLAN -DPLAN_EPOCHLESS

# REUSE: a key formed, destroyed and joined again with rank 0 on another node.
# Safe since the daemons forget a key's announcements when it forms or fails
# (ForgetKeyLocked; KEEP_ANNOUNCED: before) and drop an announcement arriving
# after the plan that used it (f359e2a; LATE_KEPT: before, a late
# announcement kept for the key's next use failed it INVALID_ARGUMENT).
run "reuse: 3 nodes, duplicate, leave, no crash" small -DFORMING -DN=3 -DREUSE -DCRASHES=0
run "REUSE, KEEP_ANNOUNCED (before)" unsafe -DFORMING -DN=3 -DREUSE -DKEEP_ANNOUNCED -DCRASHES=0 -DDUP=0 -DLEAVES=0
run "REUSE, LATE_KEPT (before)" unsafe -DFORMING -DN=3 -DREUSE -DLATE_KEPT -DCRASHES=0 -DDUP=0 -DLEAVES=0

# RANK0_ON_0: rank 0 on node 0, node 1 restarts and joins again; node 0's
# plan may reach node 2 before node 0's news of the restart: node 2 fails the
# key, telling node 0 but not node 1 (lost there). Safe since 22ba88f: node 0
# passes the failure on to node 1 (relayed); NO_RELAY, the code before, left
# node 1's part formed until its first op's deadline.
run "rank0 on 0: 3 nodes, rejoin race, slow plan" safe -DFORMING -DN=3 -DRANK0_ON_0 -DREJOIN_RACE -DSLOW_PLAN
run "RANK0_ON_0, NO_RELAY (before)" unsafe -DFORMING -DN=3 -DRANK0_ON_0 -DNO_RELAY
# The code before d5537d4: an old endpoint's late error lost the restarted
# node's new incarnation (a false loss between two of three nodes).
run "ENDPOINT_EPOCHLESS (rejoin race, before)" unsafe -DFORMING -DN=3 -DREJOIN_RACE -DENDPOINT_EPOCHLESS
exit $fail
