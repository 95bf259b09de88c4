// What running one op on the host takes that ExecuteOp (host_executor.cc)
// and led ops (led_ops.cc) share: resolving a rank's buffers, and the
// records an op leaves in the segment. Private to executor/.
#ifndef COLLECTIVED_EXECUTOR_OP_SUPPORT_H_
#define COLLECTIVED_EXECUTOR_OP_SUPPORT_H_

#include <cstdint>

#include "collectived/status.h"
#include "executor/host_executor.h"
#include "ring/segment_layout.h"

namespace collectived::host {

// One rank's send and receive ranges of an op, mapped here.
struct OpBuffers {
  const uint8_t* send = nullptr;
  uint8_t* recv = nullptr;
};

// Resolves rank `rank`'s ranges of `d` (its output spans `world` inputs for
// an all-gather).
Status ResolveOwnBuffers(const ring::OpDescriptor& d, uint32_t rank, uint32_t world, BufferResolver& resolver,
                         OpBuffers* out);

// Counts op `index` in the segment's counters (rank 0 only: once an op).
void CountOp(const ring::CommSegment& seg, uint32_t rank, uint64_t index, bool matched, const Status& status);

// Clears what an op of `rank` reports (its text and trace stamps) before it runs.
void ResetOpRecords(const ring::CommSegment& seg, uint32_t rank, uint64_t index);

}  // namespace collectived::host

#endif  // COLLECTIVED_EXECUTOR_OP_SUPPORT_H_
