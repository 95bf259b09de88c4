/* The op-ring protocol (docs/protocol.md) as a Promela model, for SPIN.
 * What it covers and what it abstracts: docs/proof.md ("A model-checked
 * protocol"). Checked by ring/model/check.sh (CTest: op_ring_model).
 *
 * Safety, asserted: an op that completes successfully read only its own
 * op's descriptors (no rank matches another op's) and its own op's data in
 * every peer's slot (no rank reads a slot a peer is rewriting, and no flag or
 * ready word of an earlier op or graph replay is taken for this one's); a
 * waiter that sees an op complete without an error finds every write of it
 * done; a staging cell never changes role. Progress: no invalid end state
 * (every wait ends: on its condition, or on the abort word a deadline sets).
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
#define IS_READY(s, i) (ready[s] == (i) + 1)
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
#ifndef ABORT_UNCHECKED
     /* No slot is written after an abort: a peer may still read it. */
     if
     :: aborted -> goto failop
     :: else
     fi;
#endif
     write_cell(IN_CELL(r, i), r, i);
     PUBLISH(START, r, i);
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
     completed[r] = i + 1;
#endif
     written[r * K + i] = 1;
#ifndef ABORT_UNCHECKED
     /* Reads over: once aborted the op does not succeed (a peer that failed
      * it may reuse its buffers); checked before this rank's end flag. */
     if
     :: aborted -> goto failop
     :: else
     fi;
#endif
     PUBLISH(END, r, i);
#ifndef SKIP_END_BARRIER
     barrier(END, i);
#endif
     /* Past every barrier of the op: it succeeds, so it must have read
      * only its own op's descriptors and data. */
     assert(!bad);
     completed[r] = i + 1;
     goto next;
failop:
     /* Failed (a wait ended on the abort word): complete it with the
      * abort's status and go on to the next op, as the executor does. */
     failed[r * K + i] = 1;
     completed[r] = i + 1;
next:
     i++
  :: i >= K -> break
  od
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
