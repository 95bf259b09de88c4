#include "ring/wait.h"

#include <linux/futex.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <climits>
#include <cstdlib>
#include <thread>
#include <string>

namespace collectived::ring {
namespace {

// The futex word is the low half of the 64-bit flag (little endian): any
// store to the flag changes it, since flags only grow by small steps.
uint32_t* LowHalf(const std::atomic<uint64_t>& word) {
  return reinterpret_cast<uint32_t*>(const_cast<std::atomic<uint64_t>*>(&word));
}

inline void CpuRelax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield");
#endif
}

// Spinning only pays when the waited-for peer runs on another core at the
// same time. With few cores, ranks share them and a spinning waiter steals
// the time the peer needs (measured on 2 cores, 8 ranks: 3x fewer ops/s with
// 2000 spins than with 50). COLLECTIVED_SPIN_ITERS overrides.
int SpinIterations() {
  static const int spins = [] {
    if (const char* env = std::getenv("COLLECTIVED_SPIN_ITERS")) return std::atoi(env);
    return std::thread::hardware_concurrency() >= 8 ? 4000 : 50;
  }();
  return spins;
}

}  // namespace

int64_t NowNs() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<int64_t>(ts.tv_sec) * 1000000000LL + ts.tv_nsec;
}

Status WaitAtLeast(const std::atomic<uint64_t>& word, uint64_t target, const WaitContext& ctx, const char* what,
                   unsigned shift) {
  const int spins = SpinIterations();
  for (int i = 0; i < spins; ++i) {
    if ((word.load(std::memory_order_acquire) >> shift) >= target) return Status::Ok();
    CpuRelax();
  }
  int64_t slice_ns = 20'000;  // grows to 2 ms: abort/stop are noticed within a slice
  for (;;) {
    const uint64_t seen = word.load(std::memory_order_acquire);
    if ((seen >> shift) >= target) return Status::Ok();
    if (ctx.segment != nullptr && ctx.segment->aborted()) return ctx.segment->AbortStatus();
    if (ctx.stop != nullptr && ctx.stop->load(std::memory_order_acquire)) {
      return Status::Aborted(std::string("stopped while waiting for ") + what);
    }
    const int64_t now = NowNs();
    if (ctx.deadline_ns != 0 && now >= ctx.deadline_ns) {
      return Status::DeadlineExceeded(std::string("deadline passed while waiting for ") + what);
    }
    int64_t sleep_ns = slice_ns;
    if (ctx.deadline_ns != 0 && ctx.deadline_ns - now < sleep_ns) sleep_ns = ctx.deadline_ns - now;
    timespec ts{static_cast<time_t>(sleep_ns / 1000000000LL), static_cast<long>(sleep_ns % 1000000000LL)};
    syscall(SYS_futex, LowHalf(word), FUTEX_WAIT, static_cast<uint32_t>(seen), &ts, nullptr, 0);
    if (slice_ns < 2'000'000) slice_ns *= 2;
  }
}

void WakeWaiters(const std::atomic<uint64_t>& word) {
  syscall(SYS_futex, LowHalf(word), FUTEX_WAKE, INT_MAX, nullptr, nullptr, 0);
}

}  // namespace collectived::ring
