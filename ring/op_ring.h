// The op-ring protocol, backend neutral.
//
// Per (communicator, rank): a 64-bit op counter, a ring of descriptors, a
// `completed` counter and a status history, all in the communicator segment.
//  - post:     index = counter++ (atomic, by the poster); wait until the slot's
//              previous occupant (index - depth) completed; write the
//              descriptor; publish ready_seq = index + 1.
//  - execute:  whoever runs the rank's part (client or daemon) reads the slot.
//  - complete: status into the slot and history, then completed = index + 1.
// A handle is (communicator, rank, index); waiting on it reads `completed`.
#ifndef COLLECTIVED_RING_OP_RING_H_
#define COLLECTIVED_RING_OP_RING_H_

#include <cstdint>

#include "collectived/status.h"
#include "ring/segment_layout.h"
#include "ring/wait.h"

namespace collectived::ring {

// Takes the next op index of `rank` and publishes `desc` in its slot.
// If the ring stays full past the deadline the communicator is aborted: the
// index is taken and can never be published, so peers must not wait for it.
Status PostOp(const CommSegment& seg, uint32_t rank, const OpDescriptor& desc, const WaitContext& ctx,
              uint64_t* index);

// Records the final status of op `index` of `rank` and publishes completion.
// Ops of one rank complete in index order.
void CompleteOp(const CommSegment& seg, uint32_t rank, uint64_t index, const Status& status);

// True once op `index` of `rank` completed.
bool IsOpDone(const CommSegment& seg, uint32_t rank, uint64_t index);

// Status of a completed op. FAILED_PRECONDITION when the op is older than the
// status history (kStatusHistory ops) and its status is gone.
Status CompletedOpStatus(const CommSegment& seg, uint32_t rank, uint64_t index);

// Waits for op `index` of `rank` to complete and returns its status.
Status WaitOpDone(const CommSegment& seg, uint32_t rank, uint64_t index, const WaitContext& ctx);

// Daemon-executed GPU communicators post from the device (ring-post kernels),
// which cannot wake a sleeping executor. So the client announces each eager
// op when it enqueues it (host code), and the executor sleeps only while
// every announced op of the rank has arrived and no captured graph can post
// one unannounced. Announcing costs a syscall only when the executor sleeps.
void AnnounceDevicePost(const CommSegment& seg, uint32_t rank);
// True when `rank` announced op `index` (or a later one): it is on its way.
bool DevicePostAnnounced(const CommSegment& seg, uint32_t rank, uint64_t index);
// The executor, with nothing announced for op `index` of `rank`: sleeps
// until an announcement, a wake (abort, stop: CommSegment::WakeAll) or
// `timeout_ns`. Returns at once if one came meanwhile.
void SleepUntilAnnounced(const CommSegment& seg, uint32_t rank, uint64_t index, int64_t timeout_ns);

}  // namespace collectived::ring

#endif  // COLLECTIVED_RING_OP_RING_H_
