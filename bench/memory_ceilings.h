// The GPU's own memory ceilings, measured in the same run as the collectives
// they bound: a device-to-device copy (read + write counted, the 4.28 TB/s
// of docs/design.md section 4) and a memset (writes only). All-gathers at many
// ranks are mostly writes (n*S written per S read), so the memset figure is
// the ceiling they approach, not the copy's.
#ifndef COLLECTIVED_BENCH_MEMORY_CEILINGS_H_
#define COLLECTIVED_BENCH_MEMORY_CEILINGS_H_

#include <cstdint>

#include "collectived/status.h"

namespace collectived::bench {

struct MemoryCeilings {
  double copy_gbs = 0;    // (read + write bytes) / s of cudaMemcpyAsync device to device
  double memset_gbs = 0;  // written bytes / s of cudaMemsetAsync
};

// Times `iters` copies and memsets of `bytes` on the current device.
Status MeasureMemoryCeilings(uint64_t bytes, int iters, int warmup, MemoryCeilings* out);

}  // namespace collectived::bench

#endif  // COLLECTIVED_BENCH_MEMORY_CEILINGS_H_
