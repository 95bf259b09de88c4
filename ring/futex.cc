#include "ring/futex.h"

#include <linux/futex.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <climits>

namespace collectived::ring {
namespace {

// The futex word is the low half of the 64-bit flag (little endian): any
// store to the flag changes it, since flags only grow by small steps.
uint32_t* LowHalf(const std::atomic<uint64_t>& word) {
  return reinterpret_cast<uint32_t*>(const_cast<std::atomic<uint64_t>*>(&word));
}

}  // namespace

void FutexWait(const std::atomic<uint64_t>& word, uint64_t seen, int64_t timeout_ns) {
  timespec ts{static_cast<time_t>(timeout_ns / 1000000000LL), static_cast<long>(timeout_ns % 1000000000LL)};
  syscall(SYS_futex, LowHalf(word), FUTEX_WAIT, static_cast<uint32_t>(seen), &ts, nullptr, 0);
}

void FutexWake(const std::atomic<uint64_t>& word) {
  syscall(SYS_futex, LowHalf(word), FUTEX_WAKE, INT_MAX, nullptr, nullptr, 0);
}

}  // namespace collectived::ring
