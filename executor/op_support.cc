#include "executor/op_support.h"

#include "ring/op_codec.h"
#include "ring/op_ring.h"
#include "ring/wait.h"

namespace collectived::host {

using ring::CommSegment;
using ring::OpDescriptor;

Status ResolveOwnBuffers(const OpDescriptor& d, uint32_t rank, uint32_t world, BufferResolver& resolver,
                         OpBuffers* out) {
  const uint64_t in_bytes = d.count * DataTypeSize(d.dtype);
  const uint64_t out_bytes = d.kind == CollectiveKind::kAllGather ? in_bytes * world : in_bytes;
  void* send = nullptr;
  void* recv = nullptr;
  COLLECTIVED_RETURN_IF_ERROR(resolver.Resolve(rank, d.send_buffer_id, d.send_offset, in_bytes, &send));
  COLLECTIVED_RETURN_IF_ERROR(resolver.Resolve(rank, d.recv_buffer_id, d.recv_offset, out_bytes, &recv));
  out->send = static_cast<const uint8_t*>(send);
  out->recv = static_cast<uint8_t*>(recv);
  return Status::Ok();
}

void CountOp(const CommSegment& seg, uint32_t rank, uint64_t index, bool matched, const Status& status) {
  if (rank != 0) return;  // one count per collective op
  auto& h = seg.header();
  if (matched) h.ops_matched.fetch_add(1, std::memory_order_relaxed);
  (status.ok() ? h.ops_completed : h.ops_failed).fetch_add(1, std::memory_order_relaxed);
  // By kind and type (this rank's own descriptor: it posted this index), and
  // the latency from its post.
  const ring::RingSlot& slot = seg.slot(rank, index);
  const auto kind = static_cast<uint32_t>(slot.desc.kind);
  const auto dtype = static_cast<uint32_t>(slot.desc.dtype);
  const uint32_t k = kind < ring::kCountedKinds ? kind : 0;
  const uint32_t t = dtype < ring::kCountedTypes ? dtype : 0;
  ring::OpCounters& c = h.counters;
  if (status.ok()) {
    c.completed[k][t].fetch_add(1, std::memory_order_relaxed);
    c.bytes[k][t].fetch_add(slot.desc.count * DataTypeSize(slot.desc.dtype), std::memory_order_relaxed);
  } else {
    c.failed[k][t].fetch_add(1, std::memory_order_relaxed);
  }
  const int64_t took = ring::NowNs() - slot.posted_ns;
  c.latency[ring::LatencyBucket(took)].fetch_add(1, std::memory_order_relaxed);
  c.latency_sum_ns.fetch_add(took > 0 ? static_cast<uint64_t>(took) : 0, std::memory_order_relaxed);
}

void ResetOpRecords(const CommSegment& seg, uint32_t rank, uint64_t index) {
  seg.slot(rank, index).status_message[0] = '\0';
  ring::StatusRecord& trace = seg.status_record(rank, index);
  trace.reads_done_ns.store(0, std::memory_order_relaxed);
  trace.output_done_ns.store(0, std::memory_order_relaxed);
  trace.completed_ns.store(0, std::memory_order_relaxed);
}

}  // namespace collectived::host
