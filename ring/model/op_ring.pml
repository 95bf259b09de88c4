/* The op-ring protocol (docs/protocol.md) as a Promela model, for SPIN.
 * What it covers and what it abstracts: docs/proof.md ("A model-checked
 * protocol"). Checked by ring/model/check.sh (CTest: op_ring_model).
 *
 * Safety, asserted: an op that completes successfully read only its own
 * op's descriptors (no rank matches another op's) and its own op's data in
 * every peer's slot (no rank reads a slot a peer is rewriting, and no flag or
 * ready word of an earlier op or graph replay is taken for this one's); a
 * waiter that sees an op complete without an error finds every write of it
 * done; a staging cell never changes role; every completion of a rank is of
 * its next op (none twice, none skipped, in order); no executor writes a
 * rank's output once its client may see the op completed. Progress: no
 * invalid end state (every wait ends: on its condition, or on the abort word
 * a deadline sets).
 *
 * Per rank: a poster (takes op indices, waits for the slot's previous
 * occupant, writes the descriptor, publishes ready = index + 1), an executor
 * (prologue: every rank's descriptor, copy-in, start barrier; body: one-shot
 * reads every input slot, two-shot reads the inputs, writes its reduced shard,
 * passes the mid barrier and reads every shard; writes its output; end
 * barrier; completes) and a waiter (waits for completion and checks the op's
 * writes). A deadline process may abort the communicator at any moment: every
 * wait ends on its condition or on the abort word.
 *
 * Unsafe variants (each must give SPIN a counterexample; check.sh runs them):
 *   SKIP_END_BARRIER      the executor leaves without the end barrier (AITER)
 *   EVENT_BEFORE_EPILOGUE completion published before the output is written (DeepEP)
 *   SIZE_DEPENDENT_SLOTS  slots placed by message size: a cell changes role (mori)
 *   BOOL_FLAGS            barrier flags are 0/1 words, not 64-bit generations
 *   BOOL_READY            a ring slot's ready word is 0/1, not index + 1
 *   NO_DEADLINE           waits without a deadline, and a member that stops posting
 *   ABORT_UNCHECKED       an executor goes on after a failed op without looking at
 *                         the abort word (found by the soak: a peer's slot rewritten
 *                         under a slow reader, whose op then succeeded)
 *
 * START_CHECK_AFTER_FLAG (a safe variant, an order the GPU kernels measured
 * and did not take, docs/latency.md's sixth cut): no look at the abort word
 * before the copy-in; the first comes just after the start flag.
 *
 * ABORT_CHECK_AFTER_FLAG (a safe variant, the order of the GPU kernels whose
 * end flag vouches only for their reads: one-shot and all-gather): the
 * executor looks at the abort word just after publishing its end flag
 * instead of just before (ring/op_ring_device.cuh, EndBarrier). The model's
 * two-shot is the host executor's (own shard, mid barrier): it has no rank
 * writing what it reduced into peers' outputs, as the GPU's two-shot push
 * does, which is why that kernel keeps the check before its flag.
 *
 * FUSED=mask: op i runs fused where bit i is set (small daemon-executed host
 * ops, docs/protocol.md "Fused"): every executor reads every descriptor;
 * rank k != 0 publishes its start flag and, unless it then finds the abort
 * word raised and wins its own completion's claim, goes on to its next op;
 * rank 0 waits for every start flag, claims every rank's completion (a CAS
 * of the rank's end flag to the op's generation), reads every input where
 * it is, writes every output, looks at the abort word and completes every
 * rank it claimed; a start barrier that ends on the abort word completes the
 * op of every rank whose flag rank 0 then sees and whose claim it wins.
 * Asserted besides: every op is completed once every executor is done; a
 * rank that skips a fused op read only that op's descriptors; a read of a
 * rank's input or descriptor once its client may see the op completed makes
 * a success an error. As in the code of b9ee2e1 this is unsafe
 * (docs/proof.md: an abort leaves a skipped op never completed, or lets a
 * rank's later op complete first while rank 0 still writes the earlier
 * one's output);
 * FUSED_WAIT_OWN is a candidate fix, not the code: rank k != 0 goes on only
 * once its op is completed (by rank 0, or on the abort word by itself if it
 * wins the claim). Unsafe variants of the fused path (each on the fix):
 *   NO_FUSED_START_WAIT   rank 0 runs the op without waiting for the start flags
 *   NO_FUSED_CLAIM        completions are not claimed: each side just completes
 *   FUSED_COMPLETE_EARLY  rank 0 completes every rank before writing the outputs
 */
#ifndef N
#define N 2            /* ranks */
#endif
#ifndef K
#define K 3            /* ops per rank */
#endif
#ifndef D
#define D 2            /* ring depth */
#endif
#ifndef FUSED
#define FUSED 0        /* bit i: op i runs fused */
#endif
#define IS_FUSED(i) ((FUSED >> (i)) & 1)
#define WRITING 255    /* a slot or cell being rewritten */
#define NONE 254
#define CELLS (3 * N)  /* the staging region: input and shard slots */

byte ready[N * D];     /* per ring slot: index + 1 once its descriptor is valid */
byte desc[N * D];      /* the op a descriptor describes */
byte completed[N];     /* ops of the rank finished: index + 1 of the last */
#define START 0        /* barrier phases */
#define MID 1
#define END 2
byte flag[3 * N];      /* per phase and rank: index + 1 (generations) */
byte cell[CELLS];      /* staging cells: which op's data each holds */
byte role[CELLS];      /* what a cell holds: rank r's input (r) or shard (N + r) */
bit written[N * K];    /* every write of op i to rank r's output is done */
bit failed[N * K];     /* op i of rank r completed with an error */
bool aborted;
bool stopped_posting;  /* NO_DEADLINE: a member died before posting */
#if FUSED
byte finished;         /* executors past their last op */
#endif

/* Ops alternate in size; odd ops are large and run two-shot. */
#define SIZE(i) (1 + (i) % 2)
#define TWO_SHOT(i) ((i) % 2 == 1)

#ifdef SIZE_DEPENDENT_SLOTS
/* Packed by the op's size: a large op's slots overlap a small op's. */
#define IN_CELL(r, i) ((r) * SIZE(i))
#define SHARD_CELL(r, i) (N + (r) * SIZE(i))
#else
/* Fixed slots: positions depend on the rank only (docs/design.md rule 3). */
#define IN_CELL(r, i) (r)
#define SHARD_CELL(r, i) (N + (r))
#endif

#ifdef BOOL_FLAGS
#define PUBLISH(ph, r, i) flag[(ph) * N + (r)] = 1
#define PASSED(ph, k, i) (flag[(ph) * N + (k)] == 1)
#else
#define PUBLISH(ph, r, i) flag[(ph) * N + (r)] = (i) + 1
#define PASSED(ph, k, i) (flag[(ph) * N + (k)] >= (i) + 1)
#endif

#ifdef BOOL_READY
#define READY_VALUE(i) 1
#define IS_READY(s, i) (ready[s] == 1)
#else
#define READY_VALUE(i) ((i) + 1)
#define IS_READY(s, i) (ready[s] >= (i) + 1)  /* WaitAtLeast, as the executor waits */
#endif

/* Waits for every rank's flag of phase `ph` of op i, or the abort word. */
inline barrier(ph, i) {
  k = 0;
  do
  :: k < N ->
     if
     :: PASSED(ph, k, i) -> k++
     :: aborted -> goto failop
     fi
  :: k >= N -> break
  od
}

/* Completes op i of rank k (CompleteOp): of all of k's ops the next one,
 * none twice, none skipped. */
inline complete(k, i) {
  d_step {
    assert(completed[k] == i);
    completed[k] = i + 1
  }
}

/* ClaimFusedCompletion: a CAS of rank k's end flag to op i's generation. */
inline claim(k, i) {
#ifdef NO_FUSED_CLAIM
  won = 1
#else
  atomic {
    if
    :: flag[END * N + (k)] < (i) + 1 -> flag[END * N + (k)] = (i) + 1; won = 1
    :: else -> won = 0
    fi
  }
#endif
}

/* A write of a staging cell in two steps (a rewrite is not atomic), and
 * the role it plays, which must never change (a cell that changes roles is
 * what exposed stale cache lines in mori's bug). */
inline write_cell(c, r_role, i) {
  assert(role[c] == NONE || role[c] == r_role);
  role[c] = r_role;
  cell[c] = WRITING;
  cell[c] = i
}

proctype Poster(byte r) {
  byte i = 0;
  do
  :: i < K ->
#ifdef NO_DEADLINE
     if
     :: r == N - 1 && i == 1 -> stopped_posting = true; break  /* the member died */
     :: true
     fi;
#endif
     /* The slot's previous occupant (op i - D) must have completed. */
     if
     :: i < D || completed[r] >= i - D + 1
     :: aborted -> break
     fi;
     desc[r * D + i % D] = i;
     ready[r * D + i % D] = READY_VALUE(i);
     i++
  :: i >= K -> break
  od
}

proctype Executor(byte r) {
  byte i = 0, k;
  bit bad;  /* this op read a descriptor or data that is not its own */
#if FUSED
  bit won, lost;  /* fused: a claim won; the op fails */
  byte claimed;   /* fused, rank 0: a bit per rank whose completion it claimed */
#endif
  do
  :: i < K ->
     bad = 0;
     /* Prologue: every rank's descriptor of op i; the matcher reads them. */
     k = 0;
     do
     :: k < N ->
        if
        :: IS_READY(k * D + i % D, i) -> bad = bad || desc[k * D + i % D] != i; k++
        :: aborted -> goto failop
        fi
     :: k >= N -> break
     od;
#if !defined(ABORT_UNCHECKED) && !defined(START_CHECK_AFTER_FLAG)
     /* No slot is written after an abort: a peer may still read it. */
     if
     :: aborted -> goto failop
#if FUSED
     :: !aborted && IS_FUSED(i) -> goto fused
     :: !aborted && !IS_FUSED(i)
#else
     :: else
#endif
     fi;
#endif
     write_cell(IN_CELL(r, i), r, i);
     PUBLISH(START, r, i);
#ifdef START_CHECK_AFTER_FLAG
     /* The copy-in whatever the abort word says (as the GPU client's runs
      * before its kernel), and the op's first look at it just after its
      * start flag, overlapping the wait for the peers' flags. */
     if
     :: aborted -> goto failop
     :: else
     fi;
#endif
     barrier(START, i);
     /* Body: every read of a peer's slot must find this op's data (one step
      * for all peers: a read still lands between a writer's two steps). */
     atomic {
       k = 0;
       do
       :: k < N -> bad = bad || cell[IN_CELL(k, i)] != i; k++
       :: k >= N -> break
       od
     };
     if
     :: TWO_SHOT(i) ->
        write_cell(SHARD_CELL(r, i), N + r, i);
        PUBLISH(MID, r, i);
        barrier(MID, i);
        atomic {
          k = 0;
          do
          :: k < N -> bad = bad || cell[SHARD_CELL(k, i)] != i; k++
          :: k >= N -> break
          od
        }
     :: else
     fi;
#ifdef EVENT_BEFORE_EPILOGUE
     complete(r, i);
#endif
     written[r * K + i] = 1;
#if !defined(ABORT_UNCHECKED) && !defined(ABORT_CHECK_AFTER_FLAG)
     /* Reads over: once aborted the op does not succeed (a peer that failed
      * it may reuse its buffers); checked before this rank's end flag (the
      * host executor). */
     if
     :: aborted -> goto failop
     :: else
     fi;
#endif
     PUBLISH(END, r, i);
#ifdef ABORT_CHECK_AFTER_FLAG
     /* The one-shot and all-gather kernels' order: the same check just
      * after the end flag (which says only that this rank's reads are
      * over), overlapping the wait for the peers' flags. */
     if
     :: aborted -> goto failop
     :: else
     fi;
#endif
#ifndef SKIP_END_BARRIER
     barrier(END, i);
#endif
     /* Past every barrier of the op: it succeeds, so it must have read
      * only its own op's descriptors and data. */
     assert(!bad);
#ifndef EVENT_BEFORE_EPILOGUE
     complete(r, i);
#endif
     goto next;
failop:
     /* Failed (a wait ended on the abort word): complete it with the
      * abort's status and go on to the next op, as the executor does. */
#ifdef EVENT_BEFORE_EPILOGUE
     /* Completed early: a failure later returns without completing again. */
     if
     :: completed[r] == i + 1 -> goto next
     :: else
     fi;
#endif
     failed[r * K + i] = 1;
     complete(r, i);
#if FUSED
     goto next;
fused:
     if
     :: r != 0 ->
        /* Publish the start flag (then a seq_cst fence: one step apart is
         * what sequential consistency gives), then look at the abort word. */
        PUBLISH(START, r, i);
        if
        :: aborted ->
           claim(r, i);
           if
           :: won -> failed[r * K + i] = 1; complete(r, i)
#ifdef FUSED_WAIT_OWN
           :: else -> completed[r] >= i + 1
#else
           :: else
#endif
           fi
        :: else ->
           /* Goes on to its next op: it must have read this op's
            * descriptors, which rank 0 may now hand back to the clients. */
           assert(!bad)
#ifdef FUSED_WAIT_OWN
           /* The candidate fix: not on before the op is completed, by rank 0
            * or, once aborted, by this rank if it wins the claim. */
           ;
           if
           :: completed[r] >= i + 1
           :: aborted ->
              claim(r, i);
              if
              :: won -> failed[r * K + i] = 1; complete(r, i)
              :: else -> completed[r] >= i + 1
              fi
           fi
#endif
        fi;
        goto next
     :: else
     fi;
     /* Rank 0: its start flag, then every rank's. */
     PUBLISH(START, r, i);
#ifndef NO_FUSED_START_WAIT
     k = 1;
     do
     :: k < N ->
        if
        :: PASSED(START, k, i) -> k++
        :: aborted -> goto fusedfail
        fi
     :: k >= N -> break
     od;
#endif
     /* Claim every rank's completion; a lost claim: a rank completed its
      * own op on the abort word, and no data moves. */
     lost = 0;
     claimed = 0;
     k = 0;
     do
     :: k < N ->
        claim(k, i);
        if
        :: won -> claimed = claimed | (1 << k)
        :: else -> lost = 1
        fi;
        k++
     :: k >= N -> break
     od;
     if
     :: !lost ->
        /* Every descriptor and input, where it is: a rank whose op its
         * client may see completed may be reusing them. */
        atomic {
          k = 0;
          do
          :: k < N -> bad = bad || desc[k * D + i % D] != i || completed[k] > i; k++
          :: k >= N -> break
          od
        };
#ifdef FUSED_COMPLETE_EARLY
        k = 0;
        do
        :: k < N -> complete(k, i); k++
        :: k >= N -> break
        od;
#endif
        /* Every output, one rank after another: never one whose client
         * may see the op completed. */
        k = 0;
        do
        :: k < N ->
           d_step {
             assert(completed[k] <= i);
             written[k * K + i] = 1
           };
           k++
        :: k >= N -> break
        od;
#ifdef FUSED_COMPLETE_EARLY
        goto next;
#endif
        if
        :: aborted -> lost = 1
        :: else -> assert(!bad)
        fi
     :: else
     fi;
     /* Complete every rank claimed, with the verdict. */
     k = 0;
     do
     :: k < N ->
        if
        :: claimed & (1 << k) -> failed[k * K + i] = lost; complete(k, i)
        :: else
        fi;
        k++
     :: k >= N -> break
     od;
     goto next;
fusedfail:
     /* The barrier ended on the abort word (fail_hard: rank 0's own op
      * fails), then (a seq_cst fence) every rank whose start flag it sees
      * is claimed and completed, failed. */
     failed[r * K + i] = 1;
     complete(r, i);
     k = 1;
     do
     :: k < N ->
        if
        :: PASSED(START, k, i) ->
           claim(k, i);
           if
           :: won -> failed[k * K + i] = 1; complete(k, i)
           :: else
           fi
        :: else
        fi;
        k++
     :: k >= N -> break
     od
#endif
next:
     i++
  :: i >= K -> break
  od;
#if FUSED
  /* Every executor done: every op of every rank is completed (a fused op
   * is completed by another rank's executor, or by none). */
  atomic {
    finished++;
    if
    :: finished == N ->
       k = 0;
       do
       :: k < N -> assert(completed[k] == K); k++
       :: k >= N -> break
       od
    :: else
    fi
  }
#endif
}

/* A handle's wait: completion (or the abort word); a success implies every
 * write of the op is done. */
proctype Waiter(byte r) {
  byte i = 0;
  do
  :: i < K ->
     if
     :: completed[r] >= i + 1 ->
        assert(failed[r * K + i] || written[r * K + i]);
        i++
     :: aborted -> break
     fi
  :: i >= K -> break
  od
}

#ifndef NO_DEADLINE
/* The deadline rule: any wait may expire, which aborts the communicator. */
proctype Deadline() {
  if
  :: aborted = true
  :: skip
  fi
}
#endif

init {
  byte c;
  atomic {
    c = 0;
    do
    :: c < CELLS -> role[c] = NONE; cell[c] = NONE; c++
    :: c >= CELLS -> break
    od;
    c = 0;
    do
    :: c < N -> run Poster(c); run Executor(c); run Waiter(c); c++
    :: c >= N -> break
    od;
#ifndef NO_DEADLINE
    run Deadline()
#endif
  }
}
