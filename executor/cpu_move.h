// Moving a daemon thread off a CPU it shares with a waiting client.
//
// The scheduler at times places a leading executor (led_ops.cc,
// LeadOp) on the CPU of a client that waits for the op it runs, and leaves
// the pair there for 10-40 ms: each op then waits for the client's wait to
// hand the CPU over (bench/RESULTS.md, "Host backend against Open MPI,
// now"). The executor knows where the clients posted from
// (RankControl::poster_cpu) and can step to a CPU none of them is on: on
// a 16-core host, 8 processes, 16 KiB led ops, runs of 3000 ops with such an
// episode fell from 9 of 30 to 1 of 30.
#ifndef COLLECTIVED_EXECUTOR_CPU_MOVE_H_
#define COLLECTIVED_EXECUTOR_CPU_MOVE_H_

#include <cstddef>
#include <cstdint>

namespace collectived::host {

class CpuMover {
 public:
  explicit CpuMover(int64_t min_interval_ns) : min_interval_ns_(min_interval_ns) {}

  // If the calling thread runs on a CPU that `busy` names (words of 1 + a
  // CPU; 0 = unknown), moves it to the first CPU above it (round) that its
  // affinity allows and `busy` does not name, then restores the affinity
  // mask as it was: the thread stays where it was moved until the scheduler
  // moves it again. Nothing when no such CPU exists or it moved less than
  // `min_interval_ns` ago (where every CPU is shared, moving only churns).
  // True if it moved.
  bool MoveOffBusy(const uint64_t* busy, size_t n);

 private:
  const int64_t min_interval_ns_;
  int64_t last_move_ns_ = 0;
};

}  // namespace collectived::host

#endif  // COLLECTIVED_EXECUTOR_CPU_MOVE_H_
