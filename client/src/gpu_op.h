// Private: the completion handle of a GPU op (what a Handle holds, and what
// GpuOpWait/Test/WaitOn read), the pool of host-mapped words the ops'
// verdicts land in, and the waits for ops that ran (a buffer's Free, Destroy).
#ifndef COLLECTIVED_CLIENT_SRC_GPU_OP_H_
#define COLLECTIVED_CLIENT_SRC_GPU_OP_H_

#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "base/gpu/gpu_runtime.h"
#include "collectived/status.h"
#include "ring/segment_layout.h"

namespace collectived {

// An op's host word before the GPU wrote it: all ones. The complete kernel
// writes a verdict (a ring::DeviceError) into the word's low 32 bits (its
// first four bytes: every platform here is little-endian), which then read
// as kSlotUnset until written; an eager single-launch op's kernel writes its
// generation into the whole word (DeviceOpArgs::gen_mirror).
constexpr uint64_t kWordUnset = ~uint64_t{0};
constexpr int32_t kSlotUnset = -1;  // a verdict not written yet (or not recorded)

// Host-mapped 64-bit words, one per op in flight: a launch of the op (its
// collective kernel, or the complete kernel) writes the op's verdict or
// generation into its handle's word, once. A word goes back to the pool only when its handle
// is gone *and* that write has landed (the word no longer reads kWordUnset),
// so no late write can land in another op's word. The pool keeps the ops'
// events too. Neither takes a driver call on an eager op's host path: an
// event query costs 1.3 us with one process on the GPU and 5 us with eight
// under MPS (tools/gpu-lab/launch_cost_probe.cu), which is what an eager op's
// host time was made of (docs/latency.md, eager ops). Every pool belongs to
// one device (events are per device).
class StatusSlots {
 public:
  ~StatusSlots();
  // A word (its host and device views, reading kWordUnset) and, where
  // `event` is given, an event of this device no live op holds.
  Status Take(uint64_t** host, uint64_t** device, gpuEvent_t* event = nullptr);
  // The handle of the word's op is gone. `written_later`: a launch that
  // writes the word was enqueued, or may have been (the word is reused once
  // it has been written; one that never is stays out of use, 8 bytes);
  // else nothing will write it and it is free now. `event` (may be
  // null) goes back to the pool at once: a record overwrites an event's
  // state, and waits enqueued before it keep the state they captured, so an
  // event no handle holds may be recorded again before it fired.
  void Give(uint64_t* slot, gpuEvent_t event, bool written_later);

 private:
  static constexpr uint32_t kSlab = 1024;
  struct Word {
    uint64_t* host;
    uint64_t* device;
  };
  // Words whose verdicts landed back to free_: from the oldest retired on,
  // up to the first unwritten one; `all`: every written one.
  void Reclaim(bool all);
  uint64_t* DeviceView(uint64_t* host) const;  // of a word handed out
  std::mutex mu_;
  std::vector<Word> slabs_;  // each slab's base, both views
  std::vector<Word> free_;
  std::vector<gpuEvent_t> events_;  // held by no op
  // Given back before their verdicts landed, in the order handles went:
  // mostly the ops' order, so a reclaim stops at the first unwritten word,
  // and only when no word is free looks at every one (a word that is never
  // written would hold back those behind it).
  std::deque<uint64_t*> retired_;
};

// An op's verdict word (a ring::DeviceError, or kSlotUnset) as a Status;
// an abort names its reason from the segment.
Status VerdictStatus(int32_t code, const ring::CommSegment& seg, uint64_t timeout_ns);

// The verdict of an eager single-launch op from its generation word and its
// rank's failure record (DeviceOpArgs::gen_mirror, failed_gen, rank_error),
// read after the op ran: kSlotUnset while the word is unwritten; the rank's
// code where an op of this generation or before it failed (every op after a
// failure fails too); else kDeviceOk.
int32_t GenVerdict(uint64_t gen_word, uint64_t failed_gen, int32_t rank_error);

struct GpuOpState {
  int device = 0;
  gpuEvent_t event = nullptr;
  bool captured = false;
  uint64_t* status_slot = nullptr;  // host view; null for captured ops
  bool slot_written_later = false;  // the launch that writes status_slot was enqueued
  // Set where status_slot gets the op's generation, not its verdict (eager
  // single-launch ops): the rank's failure record, host views (GenVerdict).
  const uint64_t* failed_gen = nullptr;
  const int32_t* rank_error = nullptr;
  std::shared_ptr<StatusSlots> slots;
  ring::CommSegment seg;
  std::shared_ptr<void> seg_keep;
  uint64_t timeout_ns = 0;

  ~GpuOpState();
  // The op's ring::DeviceError, or kSlotUnset while its word is unwritten.
  int32_t Code() const;
  Status Verdict() const;
};

// Polls until `event` fired: OK then; a runtime error, or DEADLINE_EXCEEDED
// with `what_if_not` after `timeout_ms`.
Status WaitFired(gpuEvent_t event, int64_t timeout_ms, const std::string& what_if_not);

// One rank's eager ops run in enqueue order, even across streams: each waits
// for the one before it, so the last one's event covers them all.
// Enqueue holds `mu` from the wait on `last` to setting it, so two threads
// enqueueing for one rank cannot both chain onto the same op.
struct OpOrder {
  std::mutex mu;
  std::shared_ptr<GpuOpState> last;  // the last eager op, on any stream
  bool closed = false;               // Quiesce ran: no more ops
};

// Waits until `op`'s event fired: the op ran, whatever its verdict. A
// runtime error is not "ran" (the caller must not free what the op uses).
Status WaitRan(const GpuOpState& op, int64_t timeout_ms, const char* what_if_not);

// Waits until every op `order` saw enqueued so far ran (a buffer's Free, like cudaFree).
Status WaitForEnqueued(const std::shared_ptr<OpOrder>& order, int device, int64_t timeout_ms, const char* what);

}  // namespace collectived

#endif  // COLLECTIVED_CLIENT_SRC_GPU_OP_H_
