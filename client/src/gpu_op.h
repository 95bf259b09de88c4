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

constexpr int32_t kSlotUnset = -1;  // a status slot the complete kernel has not written yet

// Host-mapped int32 words, one per op in flight: the complete kernel writes
// the op's verdict into its handle's word. A word goes back to the pool only
// when its handle is gone *and* its op finished, so no late write can land in
// another op's word. The pool keeps the ops' events too: an eager op's
// event creation, destruction and the word's device-pointer lookup were
// driver calls on every op's host path (docs/latency.md, eager ops).
// Every pool belongs to one device (events are per device).
class StatusSlots {
 public:
  ~StatusSlots();
  // A word (its host and device views) and, where `event` is given, an
  // event of this device that no op uses (recorded by nothing yet or by a
  // finished op).
  Status Take(int32_t** host, int32_t** device, gpuEvent_t* event = nullptr);
  // `event` (may be null) marks when the device is done with the slot; the
  // pool takes it, to hand out again once it has fired.
  void Give(int32_t* slot, gpuEvent_t event);

 private:
  static constexpr uint32_t kSlab = 1024;
  struct Word {
    int32_t* host;
    int32_t* device;
  };
  void Reclaim();
  int32_t* DeviceView(int32_t* host) const;  // of a word handed out
  std::mutex mu_;
  std::vector<Word> slabs_;  // each slab's base, both views
  std::vector<Word> free_;
  std::vector<gpuEvent_t> events_;  // fired (or never recorded), free to hand out
  // Given back before their ops finished, oldest first: a rank's ops finish
  // in order, so the reclaim stops at the first still running.
  std::deque<std::pair<int32_t*, gpuEvent_t>> retired_;
};

// An op's verdict word (a ring::DeviceError, or kSlotUnset) as a Status;
// an abort names its reason from the segment.
Status VerdictStatus(int32_t code, const ring::CommSegment& seg, uint64_t timeout_ns);

struct GpuOpState {
  int device = 0;
  gpuEvent_t event = nullptr;
  bool captured = false;
  int32_t* status_slot = nullptr;  // host view; null for captured ops
  std::shared_ptr<StatusSlots> slots;
  ring::CommSegment seg;
  std::shared_ptr<void> seg_keep;
  uint64_t timeout_ns = 0;

  ~GpuOpState();
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
