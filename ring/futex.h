// Sleeping on a 64-bit word in shared memory until a writer wakes it: a
// shared (not private) futex on the word's low half, since the word lives in
// memory mapped by several processes. Below wait.h and the segment, which
// both wake waiters.
#ifndef COLLECTIVED_RING_FUTEX_H_
#define COLLECTIVED_RING_FUTEX_H_

#include <atomic>
#include <cstdint>

namespace collectived::ring {

// Sleeps while the word still holds `seen`, at most `timeout_ns`; returns
// early when woken, when the word changed, or on a signal.
void FutexWait(const std::atomic<uint64_t>& word, uint64_t seen, int64_t timeout_ns);
// Wakes every thread of every process sleeping on `word`.
void FutexWake(const std::atomic<uint64_t>& word);

}  // namespace collectived::ring

#endif  // COLLECTIVED_RING_FUTEX_H_
