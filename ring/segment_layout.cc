#include "ring/segment_layout.h"

#include <cstdio>
#include <cstring>
#include <string>

#include "ring/futex.h"
#include "ring/wait.h"

namespace collectived::ring {
namespace {

uint64_t AlignUp(uint64_t v, uint64_t a) { return (v + a - 1) / a * a; }

}  // namespace

const char* AlgorithmName(Algorithm a) {
  switch (a) {
    case Algorithm::kOneShot: return "one_shot";
    case Algorithm::kTwoShot: return "two_shot";
    case Algorithm::kGather: return "gather";
    default: return "unspecified";
  }
}

Status SegmentLayout::Compute(const SegmentParams& p, SegmentLayout* out) {
  if (p.world_size == 0 || p.world_size > kMaxRanks) {
    return Status::InvalidArgument("world_size " + std::to_string(p.world_size) + " outside [1, " +
                                   std::to_string(kMaxRanks) + "]");
  }
  if (p.ring_depth == 0 || (p.ring_depth & (p.ring_depth - 1)) != 0 || p.ring_depth > kStatusHistory) {
    return Status::InvalidArgument("ring_depth must be a power of two <= " + std::to_string(kStatusHistory));
  }
  if (p.max_message_bytes == 0 || p.max_message_bytes % 8 != 0) {
    return Status::InvalidArgument("max_message_bytes must be a positive multiple of 8");
  }
  SegmentLayout l{};
  uint64_t off = AlignUp(sizeof(CommHeader), 4096);
  l.rank_control_offset = off;
  off += AlignUp(sizeof(RankControl) * p.world_size, 4096);
  l.ring_offset = off;
  off += AlignUp(sizeof(RingSlot) * p.ring_depth * p.world_size, 4096);
  l.status_offset = off;
  off += AlignUp(sizeof(StatusRecord) * kStatusHistory * p.world_size, 4096);
  // Data slots: one input slot of the maximum message per rank, and one
  // reduced-shard slot per rank big enough for ceil(max/n) plus one element.
  l.in_slot_bytes = AlignUp(p.max_message_bytes, 4096);
  l.in_slot_offset = off;
  off += l.in_slot_bytes * p.world_size;
  l.shard_slot_bytes = AlignUp((p.max_message_bytes + p.world_size - 1) / p.world_size + 8, 4096);
  l.shard_slot_offset = off;
  off += l.shard_slot_bytes * p.world_size;
  l.total_bytes = off;
  *out = l;
  return Status::Ok();
}

Status CommSegment::Initialize(void* base, uint64_t bytes, const SegmentParams& params, CommSegment* out) {
  SegmentLayout layout;
  COLLECTIVED_RETURN_IF_ERROR(SegmentLayout::Compute(params, &layout));
  if (bytes < layout.total_bytes) return Status::InvalidArgument("segment smaller than its layout");
  auto* h = new (base) CommHeader();
  h->layout_version = kLayoutVersion;
  h->world_size = params.world_size;
  h->ring_depth = params.ring_depth;
  h->mode = static_cast<uint32_t>(params.mode);
  h->max_message_bytes = params.max_message_bytes;
  h->one_shot_max_bytes = params.one_shot_max_bytes;
  h->op_timeout_ns = params.op_timeout_ns;
  h->segment_bytes = layout.total_bytes;
  h->comm_id = params.comm_id;
  h->unsafe_flags = params.unsafe_flags;
  h->debug_delay_rank = params.debug_delay_rank;
  h->debug_delay_us = params.debug_delay_us;
  h->debug_delay_copyout_us = params.debug_delay_copyout_us;
  h->gpu_flags = params.gpu_flags;
  std::atomic_thread_fence(std::memory_order_release);
  h->magic = kSegmentMagic;
  out->base_ = static_cast<uint8_t*>(base);
  out->layout_ = layout;
  out->params_ = params;
  return Status::Ok();
}

Status CommSegment::Attach(void* base, uint64_t bytes, CommSegment* out) {
  if (bytes < sizeof(CommHeader)) return Status::InvalidArgument("segment too small for a header");
  auto* h = static_cast<CommHeader*>(base);
  if (h->magic != kSegmentMagic) return Status::FailedPrecondition("segment has no collectived header");
  if (h->layout_version != kLayoutVersion) {
    return Status::FailedPrecondition("segment layout version " + std::to_string(h->layout_version) +
                                      ", this library speaks " + std::to_string(kLayoutVersion));
  }
  // Read once: every member can write the header, so what this process uses
  // afterwards is this copy (docs/security.md).
  SegmentParams p;
  p.world_size = h->world_size;
  p.ring_depth = h->ring_depth;
  p.max_message_bytes = h->max_message_bytes;
  p.one_shot_max_bytes = h->one_shot_max_bytes;
  p.op_timeout_ns = h->op_timeout_ns;
  p.mode = static_cast<ExecutionMode>(h->mode);
  p.comm_id = h->comm_id;
  p.unsafe_flags = h->unsafe_flags;
  p.debug_delay_rank = h->debug_delay_rank;
  p.debug_delay_us = h->debug_delay_us;
  p.debug_delay_copyout_us = h->debug_delay_copyout_us;
  p.gpu_flags = h->gpu_flags;
  SegmentLayout layout;
  COLLECTIVED_RETURN_IF_ERROR(SegmentLayout::Compute(p, &layout));
  if (layout.total_bytes != h->segment_bytes || bytes < layout.total_bytes) {
    return Status::FailedPrecondition("segment size disagrees with its header");
  }
  out->base_ = static_cast<uint8_t*>(base);
  out->layout_ = layout;
  out->params_ = p;
  return Status::Ok();
}

RankControl& CommSegment::control(uint32_t rank) const {
  return reinterpret_cast<RankControl*>(base_ + layout_.rank_control_offset)[rank];
}

RingSlot& CommSegment::slot(uint32_t rank, uint64_t index) const {
  auto* slots = reinterpret_cast<RingSlot*>(base_ + layout_.ring_offset);
  const uint64_t depth = params_.ring_depth;  // the private copy: a scribbled header cannot move this
  return slots[rank * depth + (index & (depth - 1))];
}

StatusRecord& CommSegment::status_record(uint32_t rank, uint64_t index) const {
  auto* recs = reinterpret_cast<StatusRecord*>(base_ + layout_.status_offset);
  return recs[rank * kStatusHistory + (index % kStatusHistory)];
}

uint8_t* CommSegment::in_slot(uint32_t rank) const {
  return base_ + layout_.in_slot_offset + layout_.in_slot_bytes * rank;
}

uint8_t* CommSegment::shard_slot(uint32_t rank) const {
  return base_ + layout_.shard_slot_offset + layout_.shard_slot_bytes * rank;
}

void CommSegment::Abort(StatusCode code, const char* reason, AbortCause cause) const {
  CommHeader& h = header();
  uint64_t expected = 0;
  if (!h.abort_claim.compare_exchange_strong(expected, static_cast<uint64_t>(cause), std::memory_order_acq_rel)) {
    // A fault after a clean leave (a peer dies, a node is lost, Abort) is
    // what the members must learn of: it takes the cause and the reason over.
    if (cause != AbortCause::kFault || expected != static_cast<uint64_t>(AbortCause::kCleanLeave) ||
        !h.abort_claim.compare_exchange_strong(expected, static_cast<uint64_t>(cause), std::memory_order_acq_rel)) {
      return;
    }
    // The clean leave's writer publishes its code right after its claim;
    // wait for it (boundedly: it may have died in between) so its reason
    // does not land over this one.
    const int64_t until = NowNs() + 1'000'000;
    while (h.abort_code.load(std::memory_order_acquire) == 0 && NowNs() < until) {
    }
  }
  std::snprintf(h.abort_reason, sizeof(h.abort_reason), "%s", reason);
  h.abort_code.store(static_cast<uint64_t>(code == StatusCode::kOk ? StatusCode::kAborted : code),
                     std::memory_order_release);
  WakeAll();
}

void CommSegment::WakeAll() const {
  // The words waiters sleep on (ring/wait.h callers): each rank's completion
  // counter, phase flags and ring slots.
  for (uint32_t r = 0; r < params_.world_size; ++r) {
    RankControl& c = control(r);
    FutexWake(c.completed.value);
    FutexWake(c.next_index.value);
    FutexWake(c.announced.value);
    FutexWake(c.lead.value);
    for (auto& flag : c.phase_flag) FutexWake(flag.value);
    for (uint64_t i = 0; i < params_.ring_depth; ++i) FutexWake(slot(r, i).ready_seq);
  }
}

uint64_t CommSegment::control_bytes() const { return layout_.status_offset; }

Status CommSegment::AbortStatus() const {
  const uint64_t code = header().abort_code.load(std::memory_order_acquire);
  if (code == 0) return Status::Ok();
  // Any member can write the code and the reason: map the code to a status
  // code that exists and read the reason within its field.
  return Status(SharedStatusCode(code), "communicator aborted: " + SharedText(header().abort_reason, sizeof(header().abort_reason)));
}

StatusCode SharedStatusCode(uint64_t code) {
  return code >= 1 && code <= static_cast<uint64_t>(StatusCode::kUnauthenticated) ? static_cast<StatusCode>(code)
                                                                                    : StatusCode::kUnknown;
}

std::string SharedText(const char* text, size_t capacity) {
  std::string out(text, strnlen(text, capacity));
  for (char& c : out) {
    if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) c = '?';  // no forged log lines
  }
  return out;
}

}  // namespace collectived::ring

namespace collectived::ring {

uint32_t LatencyBucket(int64_t ns) {
  const uint64_t us = ns > 0 ? static_cast<uint64_t>(ns) / 1000 : 0;
  uint32_t k = 0;
  while (k + 1 < kLatencyBuckets && (uint64_t{1} << k) <= us) ++k;
  return k;
}

}  // namespace collectived::ring
