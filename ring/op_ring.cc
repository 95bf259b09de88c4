#include "ring/op_ring.h"

#include <cstdio>
#include <cstring>
#include <string>

#include "ring/futex.h"

namespace collectived::ring {

Status PostOp(const CommSegment& seg, uint32_t rank, const OpDescriptor& desc, const WaitContext& ctx,
              uint64_t* index) {
  if (rank >= seg.world_size()) return Status::InvalidArgument("rank out of range");
  COLLECTIVED_RETURN_IF_ERROR(seg.AbortStatus());
  RankControl& ctl = seg.control(rank);
  const uint64_t i = ctl.next_index.value.fetch_add(1, std::memory_order_acq_rel);
  const uint64_t depth = seg.ring_depth();
  if (i >= depth) {
    Status s = WaitAtLeast(ctl.completed.value, i - depth + 1, ctx, "a free ring slot");
    if (!s.ok()) {
      const std::string reason = "rank " + std::to_string(rank) + " could not post op " + std::to_string(i) +
                                 ": " + s.ToString();
      seg.Abort(s.code(), reason.c_str());
      return Status(s.code(), reason);
    }
    // The slot's op may have been completed by an executor that failed it
    // on an abort raised after the check above, while a peer's executor
    // still reads that op's descriptor (it checked the abort word before the
    // abort): no slot is written after an abort (executor/host_executor.cc).
    // The executor aborts before it completes, so this check sees it.
    COLLECTIVED_RETURN_IF_ERROR(seg.AbortStatus());
  }
  RingSlot& slot = seg.slot(rank, i);
  // The slot's status text still belongs to op i - depth until the executor
  // of op i writes its own: a late reader of that old op's text checks
  // ready_seq after copying it (see CompletedOpStatus).
  slot.desc = desc;
  slot.posted_ns = NowNs();
  PublishCpu(ctl.poster_cpu.value);  // where this rank's next post likely comes from
  PublishWord(slot.ready_seq, i + 1);
  *index = i;
  return Status::Ok();
}

void CompleteOp(const CommSegment& seg, uint32_t rank, uint64_t index, const Status& status) {
  RingSlot& slot = seg.slot(rank, index);
  slot.status_code = static_cast<int32_t>(status.code());
  std::snprintf(slot.status_message, sizeof(slot.status_message), "%s", status.message().c_str());
  StatusRecord& rec = seg.status_record(rank, index);
  rec.completed_ns.store(NowNs(), std::memory_order_relaxed);
  rec.code.store(static_cast<int32_t>(status.code()), std::memory_order_relaxed);
  rec.seq.store(index + 1, std::memory_order_release);
  PublishWord(seg.control(rank).completed.value, index + 1);
}

bool IsOpDone(const CommSegment& seg, uint32_t rank, uint64_t index) {
  return seg.control(rank).completed.value.load(std::memory_order_acquire) >= index + 1;
}

Status CompletedOpStatus(const CommSegment& seg, uint32_t rank, uint64_t index) {
  const StatusRecord& rec = seg.status_record(rank, index);
  if (rec.seq.load(std::memory_order_acquire) != index + 1) {
    return Status::FailedPrecondition("status of op " + std::to_string(index) + " is no longer kept (only the last " +
                                      std::to_string(kStatusHistory) + " ops are)");
  }
  const int32_t raw = rec.code.load(std::memory_order_acquire);
  const StatusCode code = raw == 0 ? StatusCode::kOk : SharedStatusCode(static_cast<uint32_t>(raw));
  if (rec.seq.load(std::memory_order_acquire) != index + 1) {  // the record moved on while we read the code
    return Status::FailedPrecondition("status of op " + std::to_string(index) + " is no longer kept");
  }
  if (code == StatusCode::kOk) return Status::Ok();
  // The text lives in the ring slot, which op index + depth takes over: copy
  // it, then keep the copy only if the slot still belonged to this op.
  const RingSlot& slot = seg.slot(rank, index);
  std::string message = "op " + std::to_string(index) + " failed";
  if (slot.ready_seq.load(std::memory_order_acquire) == index + 1) {
    char copy[kMessageBytes];
    std::memcpy(copy, slot.status_message, kMessageBytes);
    std::atomic_thread_fence(std::memory_order_acquire);
    if (slot.ready_seq.load(std::memory_order_relaxed) == index + 1) message = SharedText(copy, kMessageBytes);
  }
  return Status(code, message);
}

Status WaitOpDone(const CommSegment& seg, uint32_t rank, uint64_t index, const WaitContext& ctx) {
  // No abort check here: the executor always completes an aborted op with the
  // abort status, so a waiter just needs `completed`. The deadline bounds it
  // in case no executor is left (the process that ran it died).
  WaitContext no_abort = ctx;
  no_abort.segment = nullptr;
  // The completer: the rank's executor, or rank 0's where it led the op.
  no_abort.writer_cpus[0] = &seg.control(rank).executor_cpu.value;
  no_abort.writer_cpus[1] = &seg.control(0).executor_cpu.value;
  Status s = WaitAtLeast(seg.control(rank).completed.value, index + 1, no_abort, "op completion");
  if (!s.ok()) {
    if (seg.aborted()) return seg.AbortStatus();
    return s;
  }
  return CompletedOpStatus(seg, rank, index);
}

void AnnounceDevicePost(const CommSegment& seg, uint32_t rank) {
  RankControl& c = seg.control(rank);
  // seq_cst on both sides (here and in SleepUntilAnnounced): either the
  // executor sees the new count before it sleeps, or this sees it asleep.
  c.announced.value.fetch_add(1, std::memory_order_seq_cst);
  if (c.executor_asleep.value.load(std::memory_order_seq_cst) != 0) FutexWake(c.announced.value);
}

bool DevicePostAnnounced(const CommSegment& seg, uint32_t rank, uint64_t index) {
  return seg.control(rank).announced.value.load(std::memory_order_acquire) > index;
}

void SleepUntilAnnounced(const CommSegment& seg, uint32_t rank, uint64_t index, int64_t timeout_ns) {
  RankControl& c = seg.control(rank);
  c.executor_asleep.value.store(1, std::memory_order_seq_cst);
  const uint64_t seen = c.announced.value.load(std::memory_order_seq_cst);
  if (seen <= index && !seg.aborted()) FutexWait(c.announced.value, seen, timeout_ns);
  c.executor_asleep.value.store(0, std::memory_order_seq_cst);
}

}  // namespace collectived::ring
