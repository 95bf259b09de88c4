#include "executor/cpu_move.h"

#include <sched.h>

#include <algorithm>

#include "ring/wait.h"

namespace collectived::host {

bool CpuMover::MoveOffBusy(const uint64_t* busy, size_t n) {
  const int cpu = sched_getcpu();
  if (cpu < 0) return false;
  auto named = [&](int c) { return std::find(busy, busy + n, ring::CpuWord(c)) != busy + n; };
  if (!named(cpu)) return false;
  const int64_t now = ring::NowNs();
  if (last_move_ns_ != 0 && now - last_move_ns_ < min_interval_ns_) return false;
  cpu_set_t allowed;
  if (sched_getaffinity(0, sizeof(allowed), &allowed) != 0) return false;
  int target = -1;
  for (int d = 1; d < CPU_SETSIZE && target < 0; ++d) {
    const int c = (cpu + d) % CPU_SETSIZE;
    if (CPU_ISSET(c, &allowed) && !named(c)) target = c;
  }
  if (target < 0) return false;
  last_move_ns_ = now;
  cpu_set_t one;
  CPU_ZERO(&one);
  CPU_SET(target, &one);
  // The kernel moves a running thread off a CPU its new mask excludes
  // before the call returns; the old mask back leaves it where it is.
  if (sched_setaffinity(0, sizeof(one), &one) != 0) return false;
  sched_setaffinity(0, sizeof(allowed), &allowed);
  return true;
}

}  // namespace collectived::host
