// Bounded waits on 64-bit words in shared memory (docs/design.md, rule 5).
//
// A waiter spins briefly, yields its core for a while (a peer sharing the
// core runs; one on another core is seen within a yield), then sleeps on a
// futex (ring/futex.h) until woken
// or its deadline. Writers call WakeWaiters after every store a waiter may be
// sleeping on; raising the abort word or a stop request wakes every word of
// the segment (CommSegment::WakeAll), so idle waiters cost nothing.
#ifndef COLLECTIVED_RING_WAIT_H_
#define COLLECTIVED_RING_WAIT_H_

#include <atomic>
#include <cstdint>

#include "collectived/status.h"
#include "ring/segment_layout.h"

namespace collectived::ring {

// CLOCK_MONOTONIC in nanoseconds.
int64_t NowNs();

// The longest a waiter sleeps without re-checking its word, the abort word
// and its stop request, should nobody wake it (a member that scribbles on
// the segment without waking). Slices double from 20 us, so such a write is
// seen within about the time already waited, and at most this late. Each
// idle waiter wakes this often: 400 idle executors at a 1 s cap cost 1.3 %
// of a core on the 2-core CI machine, at 10 s 0.35 % (bench/RESULTS.md).
constexpr int64_t kMaxSliceNs = 10'000'000'000;
// Waits inside an op (a segment in their context) re-check at least this
// often: an abort raised between a waiter's check and its sleep wakes
// nobody (the abort word is not the word it sleeps on). Idle waits for the
// next op use kMaxSliceNs; whoever stops them wakes until they are gone.
constexpr int64_t kMaxOpSliceNs = 1'000'000'000;

struct WaitContext {
  const CommSegment* segment = nullptr;    // its abort word ends the wait, if set
  const std::atomic<bool>* stop = nullptr; // in-process stop request, if set
  int64_t deadline_ns = 0;                 // NowNs() value; 0 = none (avoid)
  bool idle = false;  // waiting for work, not for a peer inside an op: sleep at once
  // Where known, words holding 1 + the CPU of the thread that will write the
  // awaited word (PublishCpu): a waiter on that CPU yields from the start
  // instead of spinning, since its spin would keep that thread off the core
  // (8 processes on 8 cores: a third of the slow 100-op blocks of 16 KiB led
  // ops left, bench/RESULTS.md "Host backend against Open MPI, now").
  const std::atomic<uint64_t>* writer_cpus[2] = {nullptr, nullptr};
};

// The word that names `cpu` (1 + cpu; 0 is "unknown").
inline uint64_t CpuWord(int cpu) { return cpu < 0 ? 0 : static_cast<uint64_t>(cpu) + 1; }

// CpuWord of the CPU the calling thread runs on now.
uint64_t CurrentCpuWord();

// Stores CurrentCpuWord() into `word` (relaxed) where it changed: a word read by
// waiters of other processes is written only when the thread moved.
void PublishCpu(std::atomic<uint64_t>& word);

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
