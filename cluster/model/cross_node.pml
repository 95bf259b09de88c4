/* The cross-node protocol (docs/multinode.md) as a Promela model, for SPIN.
 * What it covers and what it abstracts: docs/proof.md ("A model of the
 * cross-node protocol"). Checked by cluster/model/check.sh (CTest:
 * cross_node_model). Two parts, one per run:
 *
 * The exchange (default; cluster/node_exchange.cc, executor/host_executor.cc
 * RunSpanningBody): per node, the rank that runs the exchange, op by op, of a
 * communicator spanning every node (all-reduce, one round: each node sends
 * its part to every other and reduces what arrives). Data messages are UCX
 * tagged messages matched by (the receiver's id for the communicator, op
 * index, sender's step): each node's inbox is a bag (the worker's unexpected
 * queue), taken from in any order. A node may crash at any step (messages it
 * sent may still arrive); a node other than 0 may restart as epoch 2
 * (coordinator mode) once node 0 sees it lost, with a new worker (an empty
 * queue) and ids that may repeat its old incarnation's, and a second
 * communicator then forms over every node (where every node of its plan is
 * alive at the plan's epoch: ApplyFormLocked).
 *   Asserted: an op that succeeds holds exactly every node's part of that op
 *   of that communicator (never another op's, another communicator's, or an
 *   old epoch's), hence every successful node has the same result; when a
 *   node takes a restarted one back, nothing of its old epoch still runs
 *   there. Progress: no invalid end state (every wait ends: data, the abort
 *   word a loss sets, or the op deadline).
 *
 * Forming (-DFORMING; daemon/spanning.cc, cluster/comm_messages.h): the
 * members of one key (3 ranks) join their daemons; each daemon announces its
 * ranks, its receive id for the key's Comm and its epoch to every other
 * (again on each change); the daemon holding rank 0 decides once and sends
 * the plan (each node's ranks, receive id and epoch); a node applying it
 * checks its own entry against its Comm and epoch and every other node alive
 * at the plan's epoch; an announcement a plan (or a refusal) used is
 * remembered, and a copy of it arriving later dropped (used_announcements_);
 * a node that fails the key tells the nodes it names (FailKeyLocked: none it
 * sees lost), and one that fails its formed part on another node's word
 * passes that on, once, to the plan's other nodes (OnClusterMessage,
 * TellSpannedNodesLocked: relayed); control messages travel in order per
 * sender and are
 * taken only from a node's current, live epoch (cluster/ucx_transport.cc
 * OnControl, cluster/membership.cc Heartbeat). A rank may join twice (one
 * duplicate), one member may leave at any time, members still waiting when
 * nothing else can move hit their join timeout.
 *   Asserted: a node forms exactly the ranks the plan gives it; at the end
 *   every live part formed and not failed has every node of its plan formed
 *   with the same plan, alive, on the receive id and epoch the plan gives it;
 *   when a node takes a restarted one back, no part formed there spans the
 *   old incarnation and no announcement of it is kept; INVALID_ARGUMENT (a
 *   rank joined twice) only when one did; no control message of an epoch
 *   declared lost is ever accepted.
 *
 * Membership (both parts; cluster/membership.cc, cluster/ucx_transport.cc):
 * each node's view of every other (epoch, lost). A node marks another lost
 * when it crashed or restarted (the transport reports the old incarnation
 * gone), when that node stopped heartbeating it (it marked this one lost),
 * or, SUSPECTS times, a live node (a stopped or partitioned daemon: the
 * heartbeat timeout). Lost stays lost until node 0 announces a new epoch (a
 * rejoin: cluster/tcp_bootstrap.h RejoinService, ucx_transport.cc
 * ApplyRejoins); a node taking the news loses the old incarnation first if
 * it had not yet (Membership::Rejoin); a transport error loses only the
 * incarnation its endpoint reached (an old endpoint's late error, after the
 * news, loses nothing: left out; ENDPOINT_EPOCHLESS adds it). A restart needs node 0 to see the old
 * incarnation lost. By default a restart is also taken to be slower than the
 * transport's report of a dead peer (every survivor saw it lost first) and
 * than a control message between survivors (none in flight); REJOIN_RACE and
 * SLOW_PLAN drop these, and the code is checked safe without them.
 *
 * Negative controls (each must give SPIN a counterexample; check.sh runs them):
 *   UNKEYED            data matched by sender alone, not by op index
 *   NO_LOSS_ABORT      a lost node does not abort the communicators spanning
 *                      it, and waits have no op deadline
 *   TAG_REPEATS        a survivor's receive id for the communicator formed
 *                      after the restart is its id for the first one (the
 *                      counter wrapped)
 *   EPOCH_UNCHECKED    (FORMING) control messages taken from any epoch
 *   FORM_UNCHECKED     (FORMING) a node forms the plan without comparing its
 *                      waiting members with it
 *   REJOIN_SILENT      (with REJOIN_RACE) the Rejoin before d7d08c2: the new
 *                      epoch taken without on_lost for the old incarnation
 *   PLAN_UNCHECKED     (FORMING) the apply before d7d08c2: no check of the
 *                      plan's receive ids, epochs or nodes' liveness (what
 *                      FORMED_AFTER_LOSS used to show in the code)
 *   PLAN_EPOCHLESS     (FORMING, with SLOW_PLAN) plans without epochs: each
 *                      other node checked alive, not alive as the
 *                      incarnation that announced
 *   KEEP_ANNOUNCED     (FORMING, with REUSE) the code before ForgetKeyLocked:
 *                      the nodes that did not decide keep the announcements
 *   LATE_KEPT          (FORMING, with REUSE) the code before f359e2a: an
 *                      announcement reaching a node after the plan that used
 *                      it (two hops beat one) is kept for the key's next use
 *   NO_RELAY           (FORMING, with RANK0_ON_0) the code before 22ba88f: a
 *                      node failing a formed part on another node's word
 *                      passes nothing on, so a node the first one sees lost
 *                      (a restart it has not heard of) keeps its part
 *   ENDPOINT_EPOCHLESS (FORMING, with REJOIN_RACE) the code before d5537d4:
 *                      the old endpoint's late error loses the restarted
 *                      node's new incarnation (a false loss between two of
 *                      three nodes)
 * Configurations (FORMING):
 *   REUSE              a key formed, destroyed and joined again with rank 0
 *                      on another node (safe without crashes)
 *   RANK0_ON_0         rank r on node r: node 0 decides, another restarts.
 *                      A plan naming the restarted node that reaches a third
 *                      node before node 0's news of the restart fails there;
 *                      that node tells every node of the plan but the
 *                      restarted one (lost there: nothing is sent to it), and
 *                      node 0 passes the failure on to it (safe; NO_RELAY:
 *                      its part stayed formed)
 * A failure from FailKeyLocked (withdrew) drops the sender's announcement of
 * the key at the receiver (d5537d4); no configuration here tells it apart
 * (it matters to a later try of a key after a failed one, not modelled).
 */
#ifndef N
#define N 2            /* nodes (2 or 3) */
#endif
#ifndef CRASHES
#define CRASHES 1      /* 1: one node may crash, at any step; 0: none */
#endif
#ifndef SUSPECTS
#define SUSPECTS 0     /* live nodes marked lost (heartbeat timeout) */
#endif

/* Membership: per observer o and node x, index o * N + x. */
byte epoch[N];         /* x's incarnation: 1, or 2 once restarted */
bool crashed[N];
byte vep[N * N];       /* the epoch o takes x to have */
bool lost[N * N];      /* o marked x lost (Membership::MarkLost) */
byte gone[N * N];      /* ghost: the epoch of x that o declared lost */
bool upd[N];           /* node 0's news of a rejoin, on its way to o */
byte rx = 255;         /* the node that restarted */
byte suspects;
/* ENDPOINT_EPOCHLESS: o took x's new epoch before seeing the old incarnation
 * lost (a restart faster than its loss detection), so the old endpoint's
 * error may still be on its way. In the code it names the incarnation its
 * endpoint reached (MarkLost's epoch, UcxTransport::OnEndpointError since
 * d5537d4) and loses nothing once the node has a newer one: not modelled.
 * The code before marked the node lost, whichever incarnation it was. */
#ifdef ENDPOINT_EPOCHLESS
bool late[N];
#endif

/* o may mark x lost: x crashed or restarted (the transport reports the old
 * incarnation gone), x stopped heartbeating o (it marked o's current epoch
 * lost: SendHeartbeats skips lost nodes), or a heartbeat timeout. */
#define CAUSE(o, x) (crashed[x] || vep[(o) * N + (x)] != epoch[x] || \
                     (lost[(x) * N + (o)] && vep[(x) * N + (o)] == epoch[o]))
#define CAN_LOSE(o, x) ((x) < N && (x) != (o) && !crashed[o] && !lost[(o) * N + (x)] && \
                        (CAUSE(o, x) || suspects < SUSPECTS))
#define SEES_LOST(o, x) ((o) == (x) || lost[(o) * N + (x)])
/* A restart: node 0 must see the old incarnation lost (RejoinService). By
 * default a restart is also slower than the transport's report of a dead
 * peer (every survivor saw it lost) and than any control message between
 * survivors (none in flight). REJOIN_RACE and SLOW_PLAN drop these (every
 * behaviour of the default and more): the code is safe without them since
 * Membership::Rejoin loses the old incarnation first and ApplyFormLocked
 * checks the plan's epochs; check.sh runs them, the default keeps the larger
 * configurations smaller. */
#ifdef REJOIN_RACE
#define SURVIVORS_SAW(x) true
#else
#define SURVIVORS_SAW(x) (SEES_LOST(1, x) && (N < 3 || SEES_LOST(2, x)))
#endif
#if defined(FORMING) && !defined(SLOW_PLAN)
#define IN_FLIGHT(a, b) ((a) != (b) && (a) < N && (b) < N && len(ctl[(a) * N + (b)]) > 0)
#define NO_CONTROL_BETWEEN_SURVIVORS(x) ((x) == 0 || (x) == 1 || (!IN_FLIGHT(0, 1) && !IN_FLIGHT(1, 0))) && \
                                        ((x) == 0 || (x) == 2 || (!IN_FLIGHT(0, 2) && !IN_FLIGHT(2, 0))) && \
                                        ((x) == 1 || (x) == 2 || (!IN_FLIGHT(1, 2) && !IN_FLIGHT(2, 1)))
#else
#define NO_CONTROL_BETWEEN_SURVIVORS(x) true
#endif
#define RESTART_OK(x) (crashed[x] && lost[x] && SURVIVORS_SAW(x) && NO_CONTROL_BETWEEN_SURVIVORS(x))

#ifndef FORMING
/* ------------------------------------------------------------ the exchange */
#ifndef K
#define K 2            /* ops of the first communicator */
#endif
#define K2 1           /* ops of the communicator formed after the restart */
#define NOPS(c) ((c) == 1 -> K : K2)
/* The receive id node j chose for communicator c (Registry::RecvIdLocked),
 * which the data tags to j carry (SpanningExchange::To/From): unique among
 * j's communicators, so a survivor's second one has another id than its
 * first. A restarted node's ids start at random and may repeat its old
 * incarnation's: here they do (its new worker's queue is empty, and what was
 * sent to the old one never arrives). TAG_REPEATS: the survivors' too (a
 * counter wrapped after 2^24 communicators). */
#ifdef TAG_REPEATS
#define RID(j, c) 1
#else
#define RID(j, c) ((c) == 2 && (j) != rx -> 2 : 1)
#endif
#define CAP (2 * (N - 1) * (K + K2))
/* Per node: the tag's receive id, op index, sender (the tag's step); ghost:
 * which communicator's data it is (1: the first, 2: the one after the
 * restart). The tag's descriptor code is exact (DescriptorCode): every node
 * runs the same ops here. */
chan net[N] = [CAP] of { byte, byte, byte, byte };
/* Node j's part of op k of communicator c: one bit. */
#define BIT(c, k, j) (1 << (((c) - 1) * N * K + (k) * N + (j)))
#define EXPECT(c, k) (((1 << N) - 1) << (((c) - 1) * N * K + (k) * N))
bool ab[2 * N];        /* per node and communicator: the segment's abort word */
bool c1end[N];         /* the node is past the first communicator */
bool c2on[N];          /* the node runs the second one */
bool c2formed;         /* a second communicator formed (after the restart) */
/* Data of the first communicator for a node past it: with distinct receive
 * ids no receive ever matches it again (in the code it stays in the
 * unexpected queue until the daemon exits). Dropped, so that leftovers do not
 * tell states apart; kept when the ids repeat, where it is what goes wrong. */
#define INERT(j, tg) (c1end[j] && (tg) == RID(j, 1) && RID(j, 1) != RID(j, 2))
/* WaitAll's deadline (ctx.deadline_ns): DEADLINES times at any moment (a
 * node slower than the deadline, racing with its data), and at any time once
 * nothing else can move (it passes eventually). */
#ifndef DEADLINES
#define DEADLINES 255
#endif
byte deadlines;
#ifdef NO_LOSS_ABORT
#define DEADLINE false
#else
#define DEADLINE (deadlines < DEADLINES || timeout)
#endif
#define CUR(o, x) ((o) == (x) || (vep[(o) * N + (x)] == epoch[x] && !lost[(o) * N + (x)]))
#define VIEWS_CURRENT(o) (CUR(o, 0) && CUR(o, 1) && (N < 3 || CUR(o, 2)))

/* Registry::OnNodeLost: AbortSpanningLocked, every communicator here spanning x. */
inline on_lost(o, x) {
#ifdef NO_LOSS_ABORT
  skip
#else
  if
  :: epoch[o] == 1 && !c1end[o] -> ab[(o) * 2] = 1
  :: else
  fi;
  if
  :: c2on[o] -> ab[(o) * 2 + 1] = 1
  :: else
  fi
#endif
}

/* o takes x's new epoch (Membership::Rejoin): nothing of x's old epoch may
 * still run at o, or it waits for a node that will never answer (and sends
 * its parts to the new incarnation, whose receive id may be the old one's:
 * REJOIN_SILENT without this assertion gives wrong data). */
inline on_rejoin(o, x) {
  assert(!(epoch[o] == 1 && !c1end[o] && !ab[(o) * 2]))
}
#else
/* ----------------------------------------------------------------- forming */
#define W 3            /* ranks of the key */
#define ALL 7
/* Where each rank joins: rank 0 on node 1 (which decides, and may restart);
 * RANK0_ON_0: rank r on node r, node 0 decides (while another restarts). */
#ifdef RANK0_ON_0
#define HOME1(r) ((r) % N)
#else
#define HOME1(r) (((r) + 1) % N)
#endif
#define HOME2(r) ((r) % N)    /* REUSE: the second round, rank 0 on node 0 */
#ifdef REUSE
#define HOME(r) (round == 1 -> HOME1(r) : HOME2(r))
#else
#define HOME(r) HOME1(r)
#endif
/* The duplicate: a rank that also joins on node 0 (never a whole world there). */
#define DUPR (N == 2 -> 2 : 1)
#define DUPN 0
#ifndef DUP
#define DUP 1
#endif
#ifndef LEAVES
#define LEAVES 1
#endif
#define ANN 1          /* JoinAnnounce: a = the ranks joined there | receive id << 4 (0: none) */
#define FORM 2         /* FormDecision: a = tag, b = the plan */
#define FAIL 3         /* CommFailure: a = tag (0: still forming), b = RELAYED or 0 */
#define RELAYED 1      /* passed on by a node that heard it from another (else
                        * from FailKeyLocked: withdrew) */
#define CAPC 10
/* Per sender and receiver, in order: kind, a, b, the sender's epoch (header;
 * an announcement's epoch field is the same, Membership::SelfEpoch). */
chan ctl[N * N] = [CAPC] of { byte, byte, int, byte };
/* What a node announced, as announced_ keeps it and the plan carries it
 * (JoinAnnounce; SpanningPlan ranks, epochs, recv_ids): its ranks in bits
 * 0..2, its epoch - 1 in bit 3, its receive id in bits 4..6. A plan: node
 * m's entry in bits 7m..7m+6. */
#define ENTRY(ranks, ep, id) ((ranks) | (((ep) - 1) << 3) | ((id) << 4))
#define RANKS(v) ((v) & 7)
#define EP(v) ((((v) >> 3) & 1) + 1)
#define ID(v) (((v) >> 4) & 7)
#define AT(p, m) (((p) >> (7 * (m))) & 127)
#define PLAN_OF(p, m) RANKS(AT(p, m))
#define NODES(p) ((PLAN_OF(p, 0) != 0 -> 1 : 0) | (PLAN_OF(p, 1) != 0 -> 2 : 0) | (PLAN_OF(p, 2) != 0 -> 4 : 0))

byte cm[N];            /* the members waiting at the node (a forming Comm) */
byte jn[N];            /* ranks that joined there (this incarnation and round) */
bool annd[N];          /* comm.announced */
byte ann[N * N];       /* announced_[key] at n: src's ENTRY (0: no entry) */
/* The receive id of the node's Comm of the key (Registry::RecvIdLocked): a
 * counter, one more for each Comm (a Comm lives from its first join to its
 * last member's leaving, or to its destruction once formed), so unique among
 * the node's communicators; restarted at 0 with the node (a restarted
 * daemon's counter starts at random: its ids may repeat the old
 * incarnation's, told apart by the epoch). */
byte rid[N];
/* used_announcements_ at n: the announcements of src a plan or a refusal
 * here used, one bit per (epoch, receive id); a copy arriving later (the
 * plan's two hops beat its one) is dropped. Kept here for good (the code
 * expires them with the announcements). LATE_KEPT: the code before, which
 * took it into announced_ for the key's next use. */
int used[N * N];
#define UBIT(v) (1 << ((EP(v) - 1) * 8 + ID(v)))
#ifdef LATE_KEPT
#define USE(n, src, v) skip
#define USED(n, src, v) false
#else
#define USE(n, src, v) used[(n) * N + (src)] = used[(n) * N + (src)] | UBIT(v)
#define USED(n, src, v) ((used[(n) * N + (src)] & UBIT(v)) != 0)
#endif
bool fd[N];            /* the node's part formed ... */
byte ftag[N];          /* ... with this tag ... */
int fpl[N];            /* ... and this plan ... */
bool fab[N];           /* ... and failed since (aborted) */
byte ntag;             /* tags handed out (NextCommTagLocked: fresh) */
bool dupj;             /* ghost: the duplicate joined */
byte leaves;
byte round = 1;
#ifdef EPOCH_UNCHECKED
#define ACCEPT(n, src, e) true
#else
#define ACCEPT(n, src, e) ((e) == vep[(n) * N + (src)] && !lost[(n) * N + (src)])
#endif

/* UcxTransport::SendControl + PumpControl: nothing to a node seen lost;
 * what goes to a dead incarnation never arrives. */
inline csend(from, to, kind, a, b) {
  if
  :: lost[(from) * N + (to)] -> skip
  :: !lost[(from) * N + (to)] && (crashed[to] || vep[(from) * N + (to)] != epoch[to]) -> skip
  :: !lost[(from) * N + (to)] && !crashed[to] && vep[(from) * N + (to)] == epoch[to] ->
     assert(len(ctl[(from) * N + (to)]) < CAPC);
     ctl[(from) * N + (to)] ! kind, a, b, epoch[from]
  fi
}

/* Registry::AnnounceLocked: this node's waiting ranks, to every other node. */
inline announce(n) {
  annd[n] = 1;
  m = 0;
  do
  :: m < N && m != n -> csend(n, m, ANN, (cm[n] == 0 -> 0 : cm[n] | (rid[n] << 4)), 0); m++
  :: m < N && m == n -> m++
  :: m >= N -> break
  od
}

/* Registry::FailKeyLocked: tells `nodes`, forgets the announcements, and
 * withdraws every member still waiting here. */
inline fail_key(n, nodes, tg) {
  m = 0;
  do
  :: m < N && m != n && ((nodes) & (1 << m)) -> csend(n, m, FAIL, tg, 0); m++
  :: m < N && (m == n || !((nodes) & (1 << m))) -> m++
  :: m >= N -> break
  od;
  m = 0;
  do
  :: m < N -> ann[(n) * N + m] = 0; m++
  :: m >= N -> break
  od;
  annd[n] = 0;
  cm[n] = 0
}

/* ApplyFormLocked's check of the plan's entry of node m at node n: its own
 * entry has its Comm's receive id and its epoch; another node's, an
 * incarnation alive here (Membership::AliveAt). PLAN_UNCHECKED: the code
 * before, which checked neither; PLAN_EPOCHLESS: plans without epochs, each
 * other node checked alive (Membership::Alive). */
#ifdef PLAN_UNCHECKED
#define ENTRY_OK(n, p, m) true
#elif defined(PLAN_EPOCHLESS)
#define ENTRY_OK(n, p, m) ((m) >= N || PLAN_OF(p, m) == 0 || \
                           ((m) == (n) -> ID(AT(p, m)) == rid[n] : !lost[(n) * N + (m)]))
#else
#define ENTRY_OK(n, p, m) ((m) >= N || PLAN_OF(p, m) == 0 || \
                           ((m) == (n) -> (ID(AT(p, m)) == rid[n] && EP(AT(p, m)) == epoch[n]) : \
                                         (!lost[(n) * N + (m)] && vep[(n) * N + (m)] == EP(AT(p, m)))))
#endif
#define PLAN_OK(n, p) (ENTRY_OK(n, p, 0) && ENTRY_OK(n, p, 1) && ENTRY_OK(n, p, 2))

/* Registry::ApplyFormLocked. */
inline apply_form(n, tg, p) {
  /* the plan's announcements, used (whatever follows) */
  m = 0;
  do
  :: m < N && m != n && PLAN_OF(p, m) != 0 -> USE(n, m, AT(p, m)); m++
  :: m < N && (m == n || PLAN_OF(p, m) == 0) -> m++
  :: m >= N -> break
  od;
  mine = PLAN_OF(p, n);
  /* CheckPlan; no members waiting; a member left meanwhile; a plan decided
   * from another Comm's or incarnation's announcement, or naming a node lost
   * or restarted since: FailKeyLocked, to every node of the plan */
#ifdef FORM_UNCHECKED
  if
  :: mine == 0 || cm[n] == 0 || fd[n] || !PLAN_OK(n, p) -> fail_key(n, NODES(p), tg)
#else
  if
  :: mine == 0 || cm[n] == 0 || fd[n] || cm[n] != mine || !PLAN_OK(n, p) -> fail_key(n, NODES(p), tg)
#endif
  :: else ->
     /* (4) the node's part is exactly the ranks the plan gives it */
     assert(cm[n] == mine);
     fd[n] = 1; ftag[n] = tg; fpl[n] = p; fab[n] = 0;
     cm[n] = 0; annd[n] = 0;
#ifndef KEEP_ANNOUNCED
     /* ForgetKeyLocked: every node of the plan forgets the key's announcements
      * (the nodes outside it get withdrawals; here every node holds a rank) */
     m = 0;
     do
     :: m < N -> ann[(n) * N + m] = 0; m++
     :: m >= N -> break
     od
#endif
  fi
}

/* Registry::TryDecideLocked: only the node holding rank 0, once. */
inline try_decide(n) {
  if
  :: !fd[n] && (cm[n] & 1) && (ann[(n) * N] != 0 || ann[(n) * N + 1] != 0 || (N > 2 && ann[(n) * N + 2] != 0)) ->
     u = cm[n]; conflict = 0; inv = 1 << n; p = ENTRY(cm[n], epoch[n], rid[n]) << (7 * n);
     m = 0;
     do
     :: m < N && m != n && ann[(n) * N + m] != 0 ->
        inv = inv | (1 << m);
        conflict = conflict || (u & RANKS(ann[(n) * N + m])) != 0;
        u = u | RANKS(ann[(n) * N + m]);
        p = p | (ann[(n) * N + m] << (7 * m));
        m++
     :: m < N && (m == n || ann[(n) * N + m] == 0) -> m++
     :: m >= N -> break
     od;
     if
     :: conflict ->
        /* (4) INVALID_ARGUMENT "rank r joined on node a and on node b" */
        assert(dupj);
        m = 0;
        do
        :: m < N && m != n && ann[(n) * N + m] != 0 -> USE(n, m, ann[(n) * N + m]); m++
        :: m < N && (m == n || ann[(n) * N + m] == 0) -> m++
        :: m >= N -> break
        od;
        fail_key(n, inv, 0)
     :: !conflict && u == ALL ->
        ntag++; tg = ntag;
        m = 0;
        do
        :: m < N -> ann[(n) * N + m] = 0; m++    /* announced_.erase */
        :: m >= N -> break
        od;
        m = 0;
        do
        :: m < N && m != n && PLAN_OF(p, m) != 0 -> csend(n, m, FORM, tg, p); m++
        :: m < N && (m == n || PLAN_OF(p, m) == 0) -> m++
        :: m >= N -> break
        od;
        apply_form(n, tg, p)
     :: else   /* not every rank joined yet */
     fi
  :: else
  fi
}

/* Registry::OnNodeLost: fails what spans x here, and every key x announced. */
inline on_lost(o, x) {
  if
  :: fd[o] && PLAN_OF(fpl[o], x) != 0 -> fab[o] = 1
  :: else
  fi;
  if
  :: ann[(o) * N + (x)] != 0 -> fail_key(o, 0, 0)
  :: else
  fi
}

inline on_rejoin(o, x) {
  assert(ann[(o) * N + (x)] == 0 && !(fd[o] && !fab[o] && PLAN_OF(fpl[o], x) != 0))
}
#endif

/* -------------------------------------------------------------- membership */
inline mark_lost(o, x) {
  if
  :: !CAUSE(o, x) -> suspects++
  :: else
  fi;
  lost[(o) * N + (x)] = 1;
#ifdef FORMING
  gone[(o) * N + (x)] = vep[(o) * N + (x)];
#endif
  on_lost(o, x)
}

/* o applies node 0's news that rx restarted (ApplyRejoins,
 * Membership::Rejoin): the old incarnation, if o has not seen it lost yet (a
 * restart faster than o's loss detection), is lost first (MarkLost, on_lost),
 * then the new epoch taken. REJOIN_SILENT: the code before, which took the
 * new epoch without on_lost. */
inline rejoin(o) {
  upd[o] = 0;
#ifdef ENDPOINT_EPOCHLESS
  late[o] = !lost[(o) * N + rx];
#endif
#ifndef REJOIN_SILENT
  if
  :: !lost[(o) * N + rx] -> mark_lost(o, rx)
  :: else
  fi;
#endif
  on_rejoin(o, rx);
  vep[(o) * N + rx] = epoch[rx];
  lost[(o) * N + rx] = 0
}

proctype Detector(byte o) {
  byte x, m;
end:
  do
  :: atomic {
       if   /* which node (one expansion of the handler, a smaller pan.c) */
       :: CAN_LOSE(o, 0) -> x = 0
       :: CAN_LOSE(o, 1) -> x = 1
       :: CAN_LOSE(o, 2) -> x = 2
       fi;
       mark_lost(o, x);
       x = 0; m = 0
     }
  :: atomic { upd[o] && !crashed[o] -> rejoin(o) }
#ifdef ENDPOINT_EPOCHLESS
     /* the old endpoint's late error, taken as the node's (the new one) */
  :: atomic {
       late[o] && !crashed[o] -> late[o] = 0;
       if
       :: !lost[(o) * N + rx] -> mark_lost(o, rx)
       :: else
       fi;
       x = 0; m = 0
     }
#endif
  od
}

/* A crash: the daemon's state goes with it (cleared here, so that what a
 * dead node last held does not tell states apart); what it sent may still
 * arrive. */
proctype Crasher() {
  byte x, m;
  if
  :: CRASHES > 0 ->
     atomic {
       select(x : 0 .. N - 1);
       crashed[x] = 1;
       m = 0;
       do
       :: m < N -> vep[x * N + m] = 0; lost[x * N + m] = 0; m++
       :: m >= N -> break
       od;
#ifdef FORMING
       cm[x] = 0; jn[x] = 0; annd[x] = 0; rid[x] = 0; fd[x] = 0; ftag[x] = 0; fpl[x] = 0; fab[x] = 0;
       m = 0;
       do
       :: m < N ->
          ann[x * N + m] = 0; used[x * N + m] = 0;
          do
          :: len(ctl[m * N + x]) > 0 -> ctl[m * N + x] ? _, _, _, _
          :: else -> break
          od;
          m++
       :: m >= N -> break
       od
#else
       ab[x * 2] = 0; ab[x * 2 + 1] = 0; c2on[x] = 0; c1end[x] = 0;
       do
       :: len(net[x]) > 0 -> net[x] ? _, _, _, _
       :: else -> break
       od
#endif
     }
  :: true
  fi
}

/* A restart (x != 0): a new worker (an empty queue; nothing sent to the old
 * one arrives), receive ids counted afresh, a fresh table from node 0, which
 * takes x back and tells every node it sees alive. */
inline restart(x) {
  epoch[x] = 2; crashed[x] = 0; rx = x;
  m = 0;
  do
  :: m < N ->
     vep[(x) * N + m] = epoch[m]; lost[(x) * N + m] = 0; gone[(x) * N + m] = 0;
#ifdef FORMING
     do
     :: len(ctl[m * N + (x)]) > 0 -> ctl[m * N + (x)] ? _, _, _, _
     :: else -> break
     od;
     ann[(x) * N + m] = 0; used[(x) * N + m] = 0;
#endif
     m++
  :: m >= N -> break
  od;
#ifdef FORMING
  cm[x] = 0; jn[x] = 0; annd[x] = 0; rid[x] = 0; fd[x] = 0; ftag[x] = 0; fpl[x] = 0; fab[x] = 0;
#else
  do
  :: len(net[x]) > 0 -> net[x] ? _, _, _, _
  :: else -> break
  od;
  ab[(x) * 2] = 0; ab[(x) * 2 + 1] = 0; c1end[x] = 1; c2formed = 1;
#endif
  on_rejoin(0, x);
  vep[x] = 2; lost[x] = 0;   /* node 0's view of x */
  m = 1;
  do
  :: m < N && m != (x) && !lost[m] -> upd[m] = 1; m++
  :: m < N && (m == (x) || lost[m]) -> m++
  :: m >= N -> break
  od
}

#ifndef FORMING
/* ------------------------------------------------------------ the exchange */
/* Node j's part of op k is in n's inbox (matched by the full tag); UNKEYED:
 * any op's part from j (matched by sender, in whatever order it arrived). */
#ifdef UNKEYED
#define HAS(jj) ((jj) == n || (jj) >= N || net[n] ?? [eval(RID(n, c)), mop, jj, mc])
#else
#define HAS(jj) ((jj) == n || (jj) >= N || net[n] ?? [eval(RID(n, c)), eval(k), jj, mc])
#endif
#define ALL_HERE (HAS(0) && HAS(1) && HAS(2))

/* Takes node jj's part and reduces it into res. */
inline take(jj) {
  if
  :: jj != n && jj < N ->
#ifdef UNKEYED
     if
     :: net[n] ?? [eval(RID(n, c)), 0, jj, mc] -> net[n] ?? eval(RID(n, c)), 0, jj, mc; mop = 0
     :: K > 1 && net[n] ?? [eval(RID(n, c)), 1, jj, mc] -> net[n] ?? eval(RID(n, c)), 1, jj, mc; mop = 1
     fi;
#else
     net[n] ?? eval(RID(n, c)), eval(k), jj, mc; mop = k;
#endif
     res = res | BIT(mc, mop, jj)
  :: else
  fi
}

proctype Node(byte n) {
  byte c = 1, k, j, m, mop, mc;
  short res;
  do
  :: true ->
     {
       do
       :: c <= 2 ->
          if
          :: c == 2 && epoch[n] == 1 ->
             /* A survivor's part of the next communicator forms once it
              * took the restarted node back: ApplyFormLocked fails a plan
              * naming a node not alive here at the plan's epoch (that
              * failed attempt, which moves no data, is left out). */
end_idle:    c2formed && VIEWS_CURRENT(n)
          :: else
          fi;
          c2on[n] = (c == 2);
          k = 0;
          do
          :: k < NOPS(c) ->
             /* ExecuteOp: nothing is run once the segment is aborted.
              * AllReduceDirect: this node's part to every other (posts do
              * not block: one step). */
             atomic {
               if
               :: ab[n * 2 + c - 1] -> goto failed
               :: else
               fi;
               j = 0;
               do
               :: j < N && j != n ->
                  if
                  :: lost[n * N + j] -> goto failed   /* PostSend: "not reachable (lost)" */
                  :: !lost[n * N + j] && !crashed[j] && vep[n * N + j] == epoch[j] && !INERT(j, RID(j, c)) ->
                     assert(len(net[j]) < CAP);
                     net[j] !! RID(j, c), k, n, c
                  :: !lost[n * N + j] && !crashed[j] && vep[n * N + j] == epoch[j] && INERT(j, RID(j, c))
                  :: !lost[n * N + j] && (crashed[j] || vep[n * N + j] != epoch[j])   /* never arrives */
                  fi;
                  j++
               :: j < N && j == n -> j++
               :: j >= N -> break
               od
             };
             /* WaitAll: every other node's part (one step: which arrived
              * first changes nothing), the abort word, or the deadline. */
             if
             :: atomic {
                  ALL_HERE -> res = BIT(c, k, n); take(0); take(1); take(2);
                  /* ExecuteOp: once aborted, the op does not succeed. */
                  if
                  :: ab[n * 2 + c - 1] -> goto failed
                  :: else
                  fi;
                  /* (1), (2): exactly every node's part of op k of communicator c */
                  assert(res == EXPECT(c, k));
                  res = 0
                }
             :: ab[n * 2 + c - 1] -> goto failed
             :: DEADLINE -> deadlines = deadlines + (deadlines < DEADLINES); goto failed
             fi;
             k++
          :: k >= NOPS(c) -> break
          od;
          goto next;
failed:   ab[n * 2 + c - 1] = 1;   /* fail_hard / leader_failed: the segment aborts */
next:     atomic {
            c1end[n] = c1end[n] || c == 1;
            do
            :: INERT(n, RID(n, 1)) && net[n] ?? [eval(RID(n, 1)), mop, j, mc] -> net[n] ?? eval(RID(n, 1)), mop, j, mc
            :: else -> break
            od;
            c++
          }
       :: c > 2 -> break
       od
     } unless { crashed[n] };
     k = 0; j = 0; m = 0; mop = 0; mc = 0; res = 0;
     if
     :: !crashed[n] -> break
     :: crashed[n] && n != 0 ->
end_dead: atomic { RESTART_OK(n) -> restart(n) };
        c = 2
     :: crashed[n] -> break    /* stays down */
     fi
  od
}

init {
  byte i;
  atomic {
    i = 0;
    do
    :: i < N * N -> vep[i] = 1; i++
    :: i >= N * N -> break
    od;
    i = 0;
    do
    :: i < N -> epoch[i] = 1; run Node(i); run Detector(i); i++
    :: i >= N -> break
    od;
    run Crasher()
  }
}
#else
/* ----------------------------------------------------------------- forming */
#define CAN_JOIN(n, r) (!fd[n] && !(jn[n] & (1 << (r))) && \
                        (HOME(r) == (n) || (DUP && round == 1 && (r) == DUPR && (n) == DUPN)))

/* Registry::JoinLocked (a key spanning nodes): announce, then try to decide. */
inline join(n, r) {
  if
  :: cm[n] == 0 ->   /* a new Comm: RecvIdLocked, at its announcement */
     assert(rid[n] < 7); rid[n]++
  :: else
  fi;
  jn[n] = jn[n] | (1 << (r));
  dupj = dupj || ((r) == DUPR && (n) == DUPN && round == 1);
  cm[n] = cm[n] | (1 << (r));
  assert(cm[n] != ALL);
  announce(n);
  try_decide(n)
}

/* LeaveLocked while forming: the others learn the rank is gone. */
inline withdraw(n, r) {
  cm[n] = cm[n] & (ALL - (1 << (r)));
  if
  :: annd[n] -> announce(n)
  :: else
  fi;
  if
  :: cm[n] == 0 -> annd[n] = 0   /* the last member: the comm is dropped */
  :: else
  fi
}

/* Registry::OnClusterMessage, a CommFailure from src for tag tg. One not
 * relayed comes from FailKeyLocked (withdrew: src's announcement of the key
 * here is stale, dropped). A part formed here under tg and spanning src
 * fails; if it had not failed yet and the failure was not relayed, it is
 * passed on, once, to every other node of the plan but src (which may not
 * reach them all: it sends nothing to a node it sees lost, RANK0_ON_0). If
 * none formed, a failure not relayed withdraws the members still forming
 * here; a relayed one ends only what formed (those may be a later try).
 * NO_RELAY: the code before 22ba88f, which passed nothing on. */
inline on_failure(n, src, tg, relayed) {
  if
  :: relayed == 0 -> ann[(n) * N + (src)] = 0
  :: else
  fi;
  if
  :: tg != 0 && fd[n] && ftag[n] == tg && PLAN_OF(fpl[n], src) != 0 ->
#ifndef NO_RELAY
     if
     :: !fab[n] && relayed == 0 ->
        m = 0;
        do
        :: m < N && m != n && m != src && PLAN_OF(fpl[n], m) != 0 -> csend(n, m, FAIL, tg, RELAYED); m++
        :: m < N && (m == n || m == src || PLAN_OF(fpl[n], m) == 0) -> m++
        :: m >= N -> break
        od
     :: else
     fi;
#endif
     fab[n] = 1
  :: else ->
     if
     :: relayed == 0 -> fail_key(n, 0, 0)
     :: else
     fi
  fi
}

/* Registry::OnClusterMessage, after UcxTransport::OnControl's check. */
inline handle(n, src) {
  ctl[(src) * N + (n)] ? kind, a, p, e;
  if
  :: ACCEPT(n, src, e) ->
     /* (5) nothing of an epoch declared lost is taken */
     assert(e > gone[(n) * N + (src)]);
     if
     :: kind == ANN && a == 0 -> ann[(n) * N + (src)] = 0
     :: kind == ANN && a != 0 && USED(n, src, a | ((e - 1) << 3)) -> skip   /* a late copy: dropped */
     :: kind == ANN && a != 0 && !USED(n, src, a | ((e - 1) << 3)) -> ann[(n) * N + (src)] = a | ((e - 1) << 3); try_decide(n)
     :: kind == FORM && PLAN_OF(p, src) == 0 -> skip   /* only a node holding ranks decides */
     :: kind == FORM && PLAN_OF(p, src) != 0 -> q = p; apply_form(n, a, q)
     :: kind == FAIL -> on_failure(n, src, a, p)
     fi
  :: else -> skip   /* refused_: another epoch, or a node lost */
  fi
}

#define JOIN 1
#define LEAVE 2
#define EXPIRE 3
#define MESSAGE 4

proctype FNode(byte n) {
  byte m, u, inv, tg, mine, kind, a, e, ev, r;
  int p, q;
  bool conflict;
  do
  :: true ->
     {
end_serve:
       do
       :: atomic {
            /* The next event (then one expansion of each handler: a smaller pan.c). */
            if
            :: CAN_JOIN(n, 0) -> ev = JOIN; r = 0
            :: CAN_JOIN(n, 1) -> ev = JOIN; r = 1
            :: CAN_JOIN(n, 2) -> ev = JOIN; r = 2
            /* a member leaves (LEAVES in a run) */
            :: leaves < LEAVES && (cm[n] & 1) -> ev = LEAVE; r = 0
            :: leaves < LEAVES && (cm[n] & 2) -> ev = LEAVE; r = 1
            :: leaves < LEAVES && (cm[n] & 4) -> ev = LEAVE; r = 2
            /* the join timeout: long, so only once nothing else moves */
            :: timeout && (cm[n] & 1) -> ev = EXPIRE; r = 0
            :: timeout && (cm[n] & 2) -> ev = EXPIRE; r = 1
            :: timeout && (cm[n] & 4) -> ev = EXPIRE; r = 2
            :: len(ctl[n]) > 0 -> ev = MESSAGE; r = 0
            :: len(ctl[N + n]) > 0 -> ev = MESSAGE; r = 1
            :: N > 2 && len(ctl[2 * N + n]) > 0 -> ev = MESSAGE; r = 2
            fi;
            if
            :: ev == JOIN -> join(n, r)
            :: ev == LEAVE -> leaves++; withdraw(n, r)   /* LeaveLocked while forming */
            :: ev == EXPIRE -> withdraw(n, r)
            :: ev == MESSAGE -> handle(n, r)
            fi;
            ev = 0; r = 0; m = 0; u = 0; inv = 0; tg = 0; mine = 0; kind = 0; a = 0; e = 0;
            p = 0; q = 0; conflict = 0
          }
       od
     } unless { crashed[n] };
     if
     :: crashed[n] && n != 0 ->
end_dead: atomic { RESTART_OK(n) -> restart(n) }
     :: crashed[n] -> break
     fi
  od
}

/* A live part formed and not failed: every node of its plan has formed it
 * (same tag), alive and not failed, as the incarnation and with the receive
 * id the plan gives it (the data sent to it carries the id it receives on). */
#define PEER_OK(n, m) (PLAN_OF(fpl[n], m) == 0 || (!crashed[m] && fd[m] && !fab[m] && ftag[m] == ftag[n] && \
                       ID(AT(fpl[n], m)) == rid[m] && EP(AT(fpl[n], m)) == epoch[m]))
#define LIVE_OK(n) (crashed[n] || !fd[n] || fab[n] || \
                    (PEER_OK(n, 0) && PEER_OK(n, 1) && (N < 3 || PEER_OK(n, 2))))
#define QUIET(n) (crashed[n] || cm[n] == 0)

/* At the end (nothing moves, nobody waits): (4) every live part formed and
 * not failed has its whole plan formed, alive, with the same tag. */
proctype Monitor() {
  timeout && QUIET(0) && QUIET(1) && (N < 3 || QUIET(2)) ->
  assert(LIVE_OK(0) && LIVE_OK(1) && (N < 3 || LIVE_OK(2)))
}

#ifdef REUSE
/* The communicator formed everywhere is destroyed; the key is joined again,
 * rank 0 now on node 0. The registries keep announced_ as the code does. */
proctype Reuse() {
  byte m;
end:
  atomic {
    fd[0] && !fab[0] && fd[1] && !fab[1] && (N < 3 || (fd[2] && !fab[2])) ->
    round = 2;
    m = 0;
    do
    :: m < N -> fd[m] = 0; ftag[m] = 0; fpl[m] = 0; fab[m] = 0; jn[m] = 0; m++
    :: m >= N -> break
    od
  }
}
#endif

init {
  byte i;
  atomic {
    i = 0;
    do
    :: i < N * N -> vep[i] = 1; i++
    :: i >= N * N -> break
    od;
    i = 0;
    do
    :: i < N -> epoch[i] = 1; run FNode(i); run Detector(i); i++
    :: i >= N -> break
    od;
    run Crasher();
    run Monitor();
#ifdef REUSE
    run Reuse()
#endif
  }
}
#endif
