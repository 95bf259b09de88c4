// Bounded waits on 64-bit words in shared memory (docs/design.md, rule 5).
//
// A waiter spins briefly, then sleeps on a futex (shared, not private: the
// word lives in memory mapped by several processes) in short slices so it
// notices the abort word, a stop request and its deadline. Writers call
// WakeWaiters after every store a waiter may be sleeping on.
#ifndef COLLECTIVED_RING_WAIT_H_
#define COLLECTIVED_RING_WAIT_H_

#include <atomic>
#include <cstdint>

#include "collectived/status.h"
#include "ring/segment_layout.h"

namespace collectived::ring {

// CLOCK_MONOTONIC in nanoseconds.
int64_t NowNs();

struct WaitContext {
  const CommSegment* segment = nullptr;    // its abort word ends the wait, if set
  const std::atomic<bool>* stop = nullptr; // in-process stop request, if set
  int64_t deadline_ns = 0;                 // NowNs() value; 0 = none (avoid)
};

// Waits until `word` >= `target` (after `shift` bits of right shift).
// Returns OK, ABORTED (abort word / stop) or DEADLINE_EXCEEDED naming `what`.
Status WaitAtLeast(const std::atomic<uint64_t>& word, uint64_t target, const WaitContext& ctx, const char* what,
                   unsigned shift = 0);

// Wakes every process sleeping on `word`.
void WakeWaiters(const std::atomic<uint64_t>& word);

// Stores `value` with release semantics and wakes sleepers.
inline void PublishWord(std::atomic<uint64_t>& word, uint64_t value) {
  word.store(value, std::memory_order_release);
  WakeWaiters(word);
}

}  // namespace collectived::ring

#endif  // COLLECTIVED_RING_WAIT_H_
