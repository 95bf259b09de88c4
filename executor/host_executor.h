// The host backend's collective "kernel": runs one rank's part of an op over
// the communicator segment, and a thread that does so for every op of a rank
// in index order. The same code runs in a client process (client-executed)
// and in the daemon (daemon-executed); only the BufferResolver differs.
//
// Per op, on every rank:
//   prologue  wait for every rank's descriptor; match and validate them all
//             (every rank reaches the same verdict); resolve own buffers; copy
//             own input into own input slot; publish start flag (with local
//             status); wait for every rank's start flag.
//   body      one-shot: reduce all input slots into own output.
//             two-shot: reduce own shard into own shard slot (and own
//                       output where that is safe: OpInputs in the .cc);
//                       mid barrier; gather the other shard slots into
//                       own output.
//             gather:   copy every input slot into own output.
//   end       publish end flag; wait for every rank's end flag (no rank leaves
//             while a peer may still read its slots, docs/design.md rule 2); complete.
// Flags are 64-bit generations (index + 1) << 8 | status, one per phase.
#ifndef COLLECTIVED_EXECUTOR_HOST_EXECUTOR_H_
#define COLLECTIVED_EXECUTOR_HOST_EXECUTOR_H_

#include <atomic>
#include <cstdint>
#include <thread>

#include "base/mutex.h"
#include "executor/cpu_move.h"
#include "collectived/status.h"
#include "ring/segment_layout.h"
#include "ring/wait.h"

namespace collectived::host {

// Maps (rank's buffer id, byte offset, byte length) to a local pointer.
class BufferResolver {
 public:
  virtual ~BufferResolver() = default;
  virtual Status Resolve(uint32_t rank, uint64_t buffer_id, uint64_t offset, uint64_t bytes, void** ptr) = 0;
  // True when Resolve works for every rank's buffers (the daemon maps them
  // all): executors then read peers' inputs in place instead of copying each
  // input into its slot first.
  virtual bool ResolvesPeers() const { return false; }
};

// A communicator whose ranks live on several nodes (docs/multinode.md): the
// segment holds this node's ranks only, and an op runs in three phases.
//   all-reduce: the node's ranks reduce-scatter their inputs into staging()
//               (local rank r reduces the r-th of L shards; a node of one
//               rank skips this: its input is the node's part); mid
//               barrier; local rank 0 runs Exchange (staging then holds the
//               result of every node, and so does rank 0's output); every
//               other rank copies it to its output.
//   all-gather: every rank copies its input into staging() at StagingSlot
//               of its global rank; mid barrier; Exchange (staging then
//               holds every rank's input); every rank copies each chunk to
//               its global place.
// Ranks other than 0 wait for exchange_done() >= index + 1; a failed
// Exchange aborts the communicator, which ends their wait.
class NodeExchange {
 public:
  virtual ~NodeExchange() = default;
  virtual uint32_t global_world() const = 0;
  virtual uint32_t global_rank(uint32_t local_rank) const = 0;
  // All-gather: where global rank g's chunk lies in staging(), in chunks
  // (node order: every node's ranks together, so a node's part is one range).
  virtual uint32_t StagingSlot(uint32_t global_rank) const = 0;
  // At least max_message_bytes x global_world() bytes.
  virtual uint8_t* staging() const = 0;
  // The largest all-reduce part Exchange takes (max_message_bytes): a
  // caller with larger parts (the GPU executor's chunks) splits them.
  virtual uint64_t max_part_bytes() const = 0;
  virtual std::atomic<uint64_t>& exchange_done() = 0;
  // The part of op `index` (descriptor `d`, matched on this node) that
  // crosses nodes. All-reduce: `own` is this node's part (staging(), or the
  // input of a node's only rank, only read); the result lands in staging()
  // and, when `out` is set, in `out` too, piece by piece as it becomes final
  // (rank 0's output: no copy after the exchange). kAvg is summed (the
  // caller divides). `only_out`: nobody reads staging() afterwards (a node
  // of one rank), so the exchange works in `out` itself, with no copy.
  // All-gather: on `out` (staging() when null), which holds this node's
  // chunks at their StagingSlot places and receives the others'.
  virtual Status Exchange(uint64_t index, const ring::OpDescriptor& d, const uint8_t* own, uint8_t* out,
                          bool only_out, const ring::WaitContext& ctx) = 0;
};

// Runs op `index` of `rank` and completes it in the ring. Returns its status.
// `exchange`: set for a communicator spanning nodes (daemon-executed only).
// `deadline_ns`: when its waits end (NowNs() value); 0: the op timeout from now.
// REQUIRES: op `index` of `rank` is posted; ops before it completed.
Status ExecuteOp(const ring::CommSegment& seg, uint32_t rank, uint64_t index, BufferResolver& resolver,
                 const std::atomic<bool>* stop, NodeExchange* exchange = nullptr, int64_t deadline_ns = 0);

// Led ops (daemon-executed, one node): ops whose outputs, every rank's
// together, come to at most `lead_max_bytes` run on rank 0's executor alone,
// which reads every rank's input in place and writes every rank's output,
// with no barrier. On a node whose cores are
// shared, n executors meeting in barriers pay for every pair that lands on
// one core (docs/results-history.md, the host runs of the sixteenth to
// twenty-fourth sessions); one
// thread does not. Rank 0's control().lead holds what its executor decided
// for the latest op: ((index + 1) << 2) | LeadState.
//   leader    waits for every descriptor; leads the op when all match, are
//             valid and small (the segment not aborted, no unsafe or debug
//             setting), else declines it; claims it with a compare-and-swap
//             of the word, and on a declined op wakes the followers and runs
//             ExecuteOp like them.
//   follower  sleeps on the word. Led: the leader completes its op. Declined
//             (or the leader moved past an op without it): ExecuteOp. Its own
//             op waiting a whole op timeout undecided (the leader's client
//             never posted), or an abort: it declines the op itself, by the
//             same compare-and-swap, so exactly one of the two decides.
//   The word stays "running" until the leader has completed every rank's
//   op ("finished"): a follower declines a later op only over a finished or
//   declined one, so a word past a follower's op means that op was declined.
enum LeadState : uint64_t { kLeadRunning = 1, kLeadDeclined = 2, kLeadFinished = 3 };

// A thread running every op of one rank, in index order, as they are posted.
class RankExecutor {
 public:
  // `exchange` (may be null) outlives the executor. `caller_runs`: the
  // rank's own client threads run its ops when they wait (RunPosted); the
  // executor's thread then only runs ops nobody waits for, found by polling
  // while ops keep coming (so a post never wakes it), and otherwise sleeps
  // until the next post wakes it.
  // `lead_max_bytes` > 0: led ops (above) up to that many output bytes of
  // every rank together; every executor of the communicator gets the same
  // value. Needs a resolver that ResolvesPeers, no exchange and no
  // caller_runs (else ignored).
  RankExecutor(ring::CommSegment seg, uint32_t rank, BufferResolver* resolver, NodeExchange* exchange = nullptr,
               bool caller_runs = false, uint64_t lead_max_bytes = 0);
  ~RankExecutor();  // stops
  RankExecutor(const RankExecutor&) = delete;
  RankExecutor& operator=(const RankExecutor&) = delete;

  void Start();
  // Stops after the op in progress (which fails, aborting the communicator, if
  // it was waiting on peers). Idempotent.
  void Stop();
  // Runs, on the calling thread, this rank's posted ops up to `index` that
  // no thread ran yet: a client thread waiting for its own op runs it rather
  // than waking the executor's thread and sleeping until it is done (two
  // thread hand-offs per op, which on a busy node cost more than the op).
  // One thread at a time runs a rank's ops, in order: false at once when
  // another one is running them now (the caller then just waits).
  bool RunPosted(uint64_t index) COLLECTIVED_EXCLUDES(duty_);

 private:
  void Loop();
  void CallerRunsLoop();
  void FollowLoop();  // ranks other than 0 of a led communicator
  // Runs every posted op from next_ up to `index`, in order.
  void RunReadyLocked(uint64_t index) COLLECTIVED_REQUIRES(duty_);
  // Rank 0 of a led communicator: leads op `index` or declines it (above).
  Status LeadOp(uint64_t index);
  // The follower's ExecuteOp of a declined op.
  void RunDeclined(uint64_t index, int64_t deadline_ns) COLLECTIVED_EXCLUDES(duty_);

  ring::CommSegment seg_;
  uint32_t rank_;
  BufferResolver* resolver_;
  NodeExchange* exchange_;
  bool caller_runs_;
  uint64_t lead_max_bytes_;  // 0: not led
  std::atomic<bool> stop_{false};
  std::atomic<bool> exited_{false};  // Loop returned
  Mutex duty_;  // held by whichever thread runs this rank's ops
  uint64_t next_ COLLECTIVED_GUARDED_BY(duty_) = 0;  // the next op to run
  // The leader steps off a CPU a waiting client posted from, at most once a
  // millisecond (LeadOp, under duty_).
  CpuMover mover_{1'000'000};
  std::thread thread_;
};

}  // namespace collectived::host

#endif  // COLLECTIVED_EXECUTOR_HOST_EXECUTOR_H_
