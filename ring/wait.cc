#include "ring/wait.h"

#include "ring/futex.h"

#include <sched.h>
#include <time.h>

#include <algorithm>
#include <cstdlib>
#include <thread>
#include <string>

namespace collectived::ring {
namespace {

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

// The spins also end after this long, however many are left: a PAUSE takes
// 25 ns on the dev machine's EPYC (and may take longer on other parts), so
// 4000 spins held a core 100 us or more, and a waiter sharing its core with the thread it
// waits for (a client and the daemon executor that runs its op) held that
// thread off as long: the 16-core machine's slow daemon-executed runs (150-240
// us at 16 KiB against 19) and this machine's with 4000 spins (210 us, 2
// cores; docs/results-history.md, "The spin's time bound"). After it, the
// yields hand the core over at once. A 1 us bound was measured too and not
// taken (docs/results-history.md, the twenty-sixth session's 16-core entry).
// COLLECTIVED_SPIN_US overrides.
int64_t SpinNs() {
  static const int64_t ns = [] {
    if (const char* env = std::getenv("COLLECTIVED_SPIN_US")) return int64_t{std::atoi(env)} * 1000;
    return int64_t{10'000};
  }();
  return ns;
}

// After the spins, a waiter inside an op yields its core this long before
// it sleeps: a futex sleep and wake cost more than a small op (measured on 2
// cores, bench/RESULTS.md "Host backend: waits"). COLLECTIVED_YIELD_US overrides.
int64_t YieldNs() {
  static const int64_t ns = [] {
    if (const char* env = std::getenv("COLLECTIVED_YIELD_US")) return int64_t{std::atoi(env)} * 1000;
    return int64_t{20'000};
  }();
  return ns;
}

}  // namespace

uint64_t CurrentCpuWord() { return CpuWord(sched_getcpu()); }

void PublishCpu(std::atomic<uint64_t>& word) {
  const uint64_t mine = CurrentCpuWord();
  if (word.load(std::memory_order_relaxed) != mine) word.store(mine, std::memory_order_relaxed);
}

namespace {

// Whether a thread that will write the awaited word last ran on this CPU.
// Only a hint: either may move at any time, and the wait is correct either way.
bool WriterOnThisCpu(const WaitContext& ctx) {
  if (ctx.writer_cpus[0] == nullptr && ctx.writer_cpus[1] == nullptr) return false;
  const uint64_t mine = CurrentCpuWord();
  if (mine == 0) return false;
  for (const std::atomic<uint64_t>* w : ctx.writer_cpus) {
    if (w != nullptr && w->load(std::memory_order_relaxed) == mine) return true;
  }
  return false;
}

}  // namespace

int64_t NowNs() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<int64_t>(ts.tv_sec) * 1000000000LL + ts.tv_nsec;
}

Status WaitAtLeast(const std::atomic<uint64_t>& word, uint64_t target, const WaitContext& ctx, const char* what,
                   unsigned shift) {
  // The spins hold the core: none where the writer shares it.
  const int spins = ctx.idle || WriterOnThisCpu(ctx) ? 0 : SpinIterations();
  // The clock is read from the 64th poll on, every 64: a word already set
  // costs no clock read. The bound is checked from there, so at least 64
  // polls run whatever it is.
  int64_t spin_until = 0;
  for (int i = 0; i < spins; ++i) {
    if ((word.load(std::memory_order_acquire) >> shift) >= target) return Status::Ok();
    CpuRelax();
    if ((i & 63) == 63) {
      const int64_t now = NowNs();
      if (spin_until == 0) {
        spin_until = now + SpinNs();
      } else if (now >= spin_until) {
        break;
      }
    }
  }
  // Then yield the core for a while: a peer that shares it runs at once,
  // one on its own core is seen within a yield (no futex round trip).
  const int64_t yield_ns = ctx.idle ? 0 : YieldNs();
  if (yield_ns > 0) {
    const int64_t until = NowNs() + yield_ns;
    for (uint32_t i = 0;; ++i) {
      if ((word.load(std::memory_order_acquire) >> shift) >= target) return Status::Ok();
      if ((i & 63) == 63) {
        if (ctx.segment != nullptr && ctx.segment->aborted()) break;
        if (ctx.stop != nullptr && ctx.stop->load(std::memory_order_acquire)) break;
        if (NowNs() >= until) break;
      }
      sched_yield();
    }
  }
  // Every writer of a word a waiter sleeps on wakes it (PublishWord), and so
  // do an abort and a stop (CommSegment::WakeAll), so an idle waiter sleeps
  // until woken: the slice, growing to kMaxSliceNs, is only a safety net for
  // a word written without a wake.
  int64_t slice_ns = 20'000;
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
    FutexWait(word, seen, sleep_ns);
    slice_ns = std::min(slice_ns * 2, ctx.segment != nullptr ? kMaxOpSliceNs : kMaxSliceNs);
  }
}

void WakeWaiters(const std::atomic<uint64_t>& word) { FutexWake(word); }

}  // namespace collectived::ring
