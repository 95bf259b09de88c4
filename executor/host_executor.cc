#include "executor/host_executor.h"

#include <pthread.h>
#include <time.h>

#include <chrono>

#include <algorithm>
#include <array>
#include <cstring>
#include <string>
#include <vector>

#include "kernels/host/reduce.h"
#include "ring/futex.h"
#include "ring/matcher.h"
#include "ring/op_codec.h"
#include "ring/op_ring.h"
#include "ring/wait.h"

namespace collectived::host {
namespace {

using ring::CommSegment;
using ring::OpDescriptor;

// Publishes this rank's flag for `phase` and waits for every rank's.
Status Barrier(const CommSegment& seg, uint32_t rank, uint64_t index, ring::Phase phase, StatusCode local,
               const ring::WaitContext& ctx) {
  ring::PublishWord(seg.control(rank).phase_flag[phase].value, ring::EncodePhaseFlag(index, local));
  static const char* kNames[] = {"start barrier", "mid barrier", "end barrier"};
  for (uint32_t k = 0; k < seg.world_size(); ++k) {
    if (k == rank) continue;
    Status s = ring::WaitAtLeast(seg.control(k).phase_flag[phase].value, index + 1, ctx, kNames[phase], ring::kPhaseFlagShift);
    if (!s.ok()) {
      return Status(s.code(), "rank " + std::to_string(rank) + ", op " + std::to_string(index) + ": rank " +
                                  std::to_string(k) + " did not reach the " + kNames[phase] + " (" + s.message() +
                                  ")");
    }
  }
  return Status::Ok();
}

// First failing rank's local status at the start barrier, else OK.
Status PeerVerdict(const CommSegment& seg, uint64_t index) {
  for (uint32_t k = 0; k < seg.world_size(); ++k) {
    const uint64_t flag = seg.control(k).phase_flag[ring::kPhaseStart].value.load(std::memory_order_acquire);
    const StatusCode code = ring::PhaseFlagStatus(flag);
    if (code != StatusCode::kOk) {
      return Status(code, "rank " + std::to_string(k) + ": " +
                            ring::SharedText(seg.slot(k, index).status_message, ring::kMessageBytes));
    }
  }
  return Status::Ok();
}

void SleepUs(uint32_t us) {
  if (us == 0) return;
  timespec ts{static_cast<time_t>(us / 1000000), static_cast<long>(us % 1000000) * 1000};
  nanosleep(&ts, nullptr);
}

struct OpBuffers {
  const uint8_t* send = nullptr;
  uint8_t* recv = nullptr;
};

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

// Two-shot's shard of rank k: elements [begin, end) of the op, reduced by k.
struct ShardRange {
  uint64_t begin, end;
};
ShardRange Shard(uint64_t count, uint32_t n, uint32_t k) {
  const uint64_t chunk = (count + n - 1) / n;
  const uint64_t begin = std::min<uint64_t>(count, chunk * k);
  return {begin, std::min<uint64_t>(count, begin + chunk)};
}

// Where every rank's input is read from, and how.
struct OpInputs {
  std::vector<const void*> ptrs;  // per rank: its input slot, or its send buffer (zero copy)
  ring::Algorithm algorithm;      // the plan, or two-shot where zero copy must not overwrite a read input
  bool skip_own_chunk = false;    // in-place all-gather: this rank's chunk already holds its input
};

// Zero copy needs every rank's buffers mapped here and no rank whose send and
// recv ranges partially overlap. Every rank decides from the same
// descriptors, so every rank decides the same.
bool CanReadInPlace(const OpDescriptor* const* descs, uint32_t n, BufferResolver& resolver, bool* any_in_place) {
  *any_in_place = false;
  // Below this a copy into the slot costs less than resolving every peer's
  // buffer (a registry lookup each): 1-element ops lost a third of their rate.
  constexpr uint64_t kZeroCopyMinBytes = 64 * 1024;
  if (!resolver.ResolvesPeers() || descs[0]->count * DataTypeSize(descs[0]->dtype) < kZeroCopyMinBytes) return false;
  for (uint32_t k = 0; k < n; ++k) {
    for (uint32_t j = 0; j < n; ++j) {  // a session holding two ranks could share buffers between them
      if (j != k && (descs[k]->recv_buffer_id == descs[j]->send_buffer_id ||
                     descs[k]->recv_buffer_id == descs[j]->recv_buffer_id)) {
        return false;
      }
    }
  }
  for (uint32_t k = 0; k < n; ++k) {
    const OpDescriptor& d = *descs[k];
    if (d.send_buffer_id != d.recv_buffer_id) continue;
    const uint64_t in = d.count * DataTypeSize(d.dtype);
    const uint64_t out = d.kind == CollectiveKind::kAllGather ? in * n : in;
    const uint64_t own_chunk = d.kind == CollectiveKind::kAllGather ? d.recv_offset + k * in : d.recv_offset;
    if (d.send_offset == own_chunk) {
      *any_in_place = true;
    } else if (d.send_offset < d.recv_offset + out && d.recv_offset < d.send_offset + in) {
      return false;  // partial overlap: copy inputs into the slots first
    }
  }
  return true;
}

// The data phases between the start and end barriers.
Status RunBody(const CommSegment& seg, uint32_t rank, uint64_t index, const OpDescriptor& d, const OpBuffers& buf,
               const OpInputs& in, const ring::WaitContext& ctx) {
  const uint32_t n = seg.world_size();
  const size_t esize = DataTypeSize(d.dtype);
  const ring::SegmentParams& h = seg.params();
  ring::StatusRecord& trace = seg.status_record(rank, index);
  // Debug hooks that hold race windows open (stress harness only).
  if (h.debug_delay_rank == static_cast<int32_t>(rank)) SleepUs(h.debug_delay_us);
  auto stamp_done = [&] {
    const int64_t now = ring::NowNs();
    trace.reads_done_ns.store(now, std::memory_order_relaxed);
    trace.output_done_ns.store(now, std::memory_order_release);
  };
  const std::vector<const void*>& inputs = in.ptrs;
  switch (in.algorithm) {
    case ring::Algorithm::kOneShot:
      SleepUs(h.debug_delay_copyout_us);  // reads and output writes are one pass here
      ReduceElements(d.dtype, d.reduce_op, buf.recv, inputs.data(), n, 0, d.count);
      stamp_done();
      return Status::Ok();
    case ring::Algorithm::kTwoShot: {
      const ShardRange own = Shard(d.count, n, rank);
      // Reduce own shard into own shard slot (element `begin` at slot offset 0).
      std::vector<const void*> shifted(n);
      for (uint32_t k = 0; k < n; ++k) shifted[k] = static_cast<const uint8_t*>(inputs[k]) + own.begin * esize;
      ReduceElements(d.dtype, d.reduce_op, seg.shard_slot(rank), shifted.data(), n, 0, own.end - own.begin);
      COLLECTIVED_RETURN_IF_ERROR(Barrier(seg, rank, index, ring::kPhaseMid, StatusCode::kOk, ctx));
      SleepUs(h.debug_delay_copyout_us);  // the copy-out: every shard into the output
      for (uint32_t k = 0; k < n; ++k) {
        const ShardRange shard = Shard(d.count, n, k);
        if (shard.end > shard.begin) {
          std::memcpy(buf.recv + shard.begin * esize, seg.shard_slot(k), (shard.end - shard.begin) * esize);
        }
      }
      stamp_done();
      return Status::Ok();
    }
    case ring::Algorithm::kGather: {
      const uint64_t bytes = d.count * esize;
      SleepUs(h.debug_delay_copyout_us);
      for (uint32_t k = 0; k < n; ++k) {
        if (k == rank && in.skip_own_chunk) continue;
        std::memcpy(buf.recv + k * bytes, inputs[k], bytes);
      }
      stamp_done();
      return Status::Ok();
    }
    default:
      return Status::Internal("unknown algorithm");
  }
}

// RunBody for a communicator spanning nodes (NodeExchange's contract).
Status RunSpanningBody(const CommSegment& seg, uint32_t rank, uint64_t index, const OpDescriptor& d,
                       const OpBuffers& buf, const OpInputs& in, const ring::WaitContext& ctx, NodeExchange& ex) {
  const uint32_t n = seg.world_size();
  const size_t esize = DataTypeSize(d.dtype);
  const uint64_t bytes = d.count * esize;
  uint8_t* staging = ex.staging();
  ring::StatusRecord& trace = seg.status_record(rank, index);
  const bool reduce = d.kind == CollectiveKind::kAllReduce;
  const ReduceOp local_op = d.reduce_op == ReduceOp::kAvg ? ReduceOp::kSum : d.reduce_op;
  // A node of one rank: its input is the node's part, read where it is.
  const uint8_t* own = reduce && n == 1 ? static_cast<const uint8_t*>(in.ptrs[0]) : staging;
  if (reduce && n > 1) {
    // Reduce-scatter inside the node: this rank's shard of every local input.
    const ShardRange shard = Shard(d.count, n, rank);
    if (shard.end > shard.begin) ReduceElements(d.dtype, local_op, staging, in.ptrs.data(), n, shard.begin, shard.end);
  } else {
    std::memcpy(staging + uint64_t{ex.StagingSlot(ex.global_rank(rank))} * bytes, buf.send, bytes);
  }
  // The others sleep on exchange_done, which no abort of the segment wakes:
  // rank 0 failing aborts and wakes them itself.
  auto leader_failed = [&](const Status& s) {
    seg.Abort(s.code(), s.message().c_str());
    ring::WakeWaiters(ex.exchange_done());
    return s;
  };
  Status mid = Barrier(seg, rank, index, ring::kPhaseMid, StatusCode::kOk, ctx);
  if (!mid.ok()) return rank == 0 ? leader_failed(mid) : mid;
  trace.reads_done_ns.store(ring::NowNs(), std::memory_order_relaxed);
  const bool avg = reduce && d.reduce_op == ReduceOp::kAvg;
  bool output_written = false;
  if (rank == 0) {
    // Rank 0's output is written during the exchange, except kAvg's (divided after).
    output_written = reduce && !avg;
    // All-gather: on staging. A node of one rank: nobody else reads staging.
    Status s = ex.Exchange(index, d, own, output_written ? buf.recv : nullptr, n == 1, ctx);
    if (!s.ok()) return leader_failed(s);
    if (avg) DivideElements(d.dtype, staging, d.count, ex.global_world());
    ring::PublishWord(ex.exchange_done(), index + 1);
  } else {
    Status s = ring::WaitAtLeast(ex.exchange_done(), index + 1, ctx, "the exchange between nodes");
    if (!s.ok()) return s;
  }
  if (reduce) {
    if (!output_written) std::memcpy(buf.recv, staging, bytes);
  } else {
    for (uint32_t g = 0; g < ex.global_world(); ++g) {
      std::memcpy(buf.recv + uint64_t{g} * bytes, staging + uint64_t{ex.StagingSlot(g)} * bytes, bytes);
    }
  }
  trace.output_done_ns.store(ring::NowNs(), std::memory_order_release);
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

// Clears what an op of `rank` reports (its text and trace stamps) before it runs.
void ResetOpRecords(const CommSegment& seg, uint32_t rank, uint64_t index) {
  seg.slot(rank, index).status_message[0] = '\0';
  ring::StatusRecord& trace = seg.status_record(rank, index);
  trace.reads_done_ns.store(0, std::memory_order_relaxed);
  trace.output_done_ns.store(0, std::memory_order_relaxed);
  trace.completed_ns.store(0, std::memory_order_relaxed);
}

bool Disjoint(const uint8_t* a, uint64_t a_bytes, const uint8_t* b, uint64_t b_bytes) {
  return a + a_bytes <= b || b + b_bytes <= a;
}

// Whether rank 0's executor may run op `index` alone (RankExecutor's led
// ops): every descriptor matched and valid, every rank's output together
// small, one within a slot (the scratch), and nothing a negative control or
// debug hook needs the barriers for. The verdicts of the rest come from
// ExecuteOp.
bool Leadable(const CommSegment& seg, uint64_t index, const OpDescriptor* const* descs, uint64_t max_bytes) {
  const uint32_t n = seg.world_size();
  const ring::SegmentParams& p = seg.params();
  if (p.unsafe_flags != 0 || p.debug_delay_rank >= 0 || !ring::MatchDescriptors(index, descs, n).ok()) return false;
  for (uint32_t k = 0; k < n; ++k) {
    if (!ring::ValidateDescriptor(*descs[k], p.max_message_bytes).ok()) return false;
  }
  // What the leader writes: every rank's output.
  const uint64_t in = descs[0]->count * DataTypeSize(descs[0]->dtype);
  const uint64_t out = descs[0]->kind == CollectiveKind::kAllGather ? in * n : in;
  return out * n <= max_bytes && out <= p.max_message_bytes;
}

// The body of a led op: every rank's buffers resolved here, read in place,
// every output written. `scratch` (a slot no one else uses meanwhile) holds
// the result first where an output overlaps an input other than exactly.
Status RunLedBody(const CommSegment& seg, const OpDescriptor* const* descs, BufferResolver& resolver,
                  uint8_t* scratch) {
  const uint32_t n = seg.world_size();
  const OpDescriptor& d = *descs[0];
  const uint64_t in_bytes = d.count * DataTypeSize(d.dtype);
  const bool gather = d.kind == CollectiveKind::kAllGather;
  const uint64_t out_bytes = gather ? in_bytes * n : in_bytes;
  std::vector<OpBuffers> bufs(n);
  for (uint32_t k = 0; k < n; ++k) {
    Status r = ResolveOwnBuffers(*descs[k], k, n, resolver, &bufs[k]);
    if (!r.ok()) return Status(r.code(), "rank " + std::to_string(k) + ": " + r.message());
  }
  // Where an output may be written before every input is read: only over
  // exactly its own input (in place), never across part of another.
  bool direct = true;
  for (uint32_t k = 0; direct && k < n; ++k) {
    for (uint32_t j = 0; direct && j < n; ++j) {
      const uint8_t* own_place = bufs[k].recv + (gather ? j * in_bytes : 0);
      const bool exact = own_place == bufs[j].send && (gather ? j == k : true);
      if (!exact && !Disjoint(bufs[k].recv, out_bytes, bufs[j].send, in_bytes)) direct = false;
      if (j != k && bufs[k].recv != bufs[j].recv && !Disjoint(bufs[k].recv, out_bytes, bufs[j].recv, out_bytes)) {
        direct = false;
      }
    }
  }
  std::vector<const void*> inputs(n);
  for (uint32_t k = 0; k < n; ++k) inputs[k] = bufs[k].send;
  if (!gather) {
    // One reduction (the bits every algorithm gives), then a copy per output.
    uint8_t* result = direct ? bufs[0].recv : scratch;
    ReduceElements(d.dtype, d.reduce_op, result, inputs.data(), n, 0, d.count);
    for (uint32_t k = 0; k < n; ++k) {
      if (bufs[k].recv != result) std::memcpy(bufs[k].recv, result, in_bytes);
    }
  } else if (direct) {
    for (uint32_t k = 0; k < n; ++k) {
      for (uint32_t j = 0; j < n; ++j) {
        uint8_t* place = bufs[k].recv + j * in_bytes;
        if (place != bufs[j].send) std::memcpy(place, bufs[j].send, in_bytes);
      }
    }
  } else {
    for (uint32_t j = 0; j < n; ++j) std::memcpy(scratch + j * in_bytes, bufs[j].send, in_bytes);
    for (uint32_t k = 0; k < n; ++k) std::memcpy(bufs[k].recv, scratch, out_bytes);
  }
  return Status::Ok();
}

}  // namespace

Status ExecuteOp(const CommSegment& seg, uint32_t rank, uint64_t index, BufferResolver& resolver,
                 const std::atomic<bool>* stop, NodeExchange* exchange, int64_t deadline_ns) {
  const uint32_t n = seg.world_size();
  if (deadline_ns == 0) deadline_ns = ring::NowNs() + static_cast<int64_t>(seg.params().op_timeout_ns);
  ring::WaitContext ctx{&seg, stop, deadline_ns};
  // A failed wait means a peer is gone or stuck: abort the communicator so
  // every rank stops waiting, and fail the op with the reason.
  auto fail_hard = [&](const Status& s) {
    seg.Abort(s.code(), s.message().c_str());
    Status final = seg.AbortStatus();
    if (final.ok()) final = s;
    CountOp(seg, rank, index, false, final);
    ring::CompleteOp(seg, rank, index, final);
    return final;
  };

  ResetOpRecords(seg, rank, index);  // this op's text (a prologue failure writes it) and stamps
  // Prologue: every rank's descriptor, matched and validated identically.
  std::vector<const OpDescriptor*> descs(n);
  for (uint32_t k = 0; k < n; ++k) {
    Status s = ring::WaitAtLeast(seg.slot(k, index).ready_seq, index + 1, ctx, "a peer to post");
    if (!s.ok()) {
      return fail_hard(Status(s.code(), "rank " + std::to_string(rank) + ", op " + std::to_string(index) +
                                            ": rank " + std::to_string(k) + " did not post (" + s.message() + ")"));
    }
    descs[k] = &seg.slot(k, index).desc;
  }
  // After an abort no slot is written again: a peer whose barrier of an
  // earlier op ended on the abort word may still be reading this rank's
  // slots (the end barrier held nobody for it). The abort is sticky, and
  // every failed barrier raises it (fail_hard) before its rank moves on.
  if (seg.aborted()) return fail_hard(seg.AbortStatus());
  Status verdict = ring::MatchDescriptors(index, descs.data(), n);
  const bool matched = verdict.ok();
  for (uint32_t k = 0; verdict.ok() && k < n; ++k) {
    Status v = ring::ValidateDescriptor(*descs[k], seg.params().max_message_bytes);
    if (!v.ok()) verdict = Status(v.code(), "rank " + std::to_string(k) + ": " + v.message());
  }
  const OpDescriptor own = *descs[rank];
  OpBuffers buf;
  OpInputs inputs;
  inputs.algorithm = own.algorithm;
  StatusCode local = StatusCode::kOk;
  if (verdict.ok()) {
    Status r = ResolveOwnBuffers(own, rank, exchange != nullptr ? exchange->global_world() : n, resolver, &buf);
    bool any_in_place = false;
    const uint64_t in_bytes = own.count * DataTypeSize(own.dtype);
    if (r.ok() && exchange != nullptr && own.kind == CollectiveKind::kAllGather) {
      // Each rank copies its own input into the staging area: no peer reads it.
    } else if (r.ok() && CanReadInPlace(descs.data(), n, resolver, &any_in_place)) {
      // Zero copy: read every rank's send buffer where it is. One-shot in
      // place would overwrite an input a peer is still reading; two-shot
      // reads inputs only before its mid barrier.
      inputs.ptrs.resize(n);
      for (uint32_t k = 0; r.ok() && k < n; ++k) {
        void* p = nullptr;
        r = resolver.Resolve(k, descs[k]->send_buffer_id, descs[k]->send_offset, in_bytes, &p);
        inputs.ptrs[k] = p;
      }
      if (any_in_place && inputs.algorithm == ring::Algorithm::kOneShot) inputs.algorithm = ring::Algorithm::kTwoShot;
      inputs.skip_own_chunk = own.kind == CollectiveKind::kAllGather && own.send_buffer_id == own.recv_buffer_id &&
                              own.send_offset == own.recv_offset + rank * in_bytes;
    } else if (r.ok()) {
      inputs.ptrs.resize(n);
      for (uint32_t k = 0; k < n; ++k) inputs.ptrs[k] = seg.in_slot(k);
      if (inputs.algorithm == ring::Algorithm::kTwoShot && exchange == nullptr) {
        // Two-shot: rank k reads only shard k of each slot, so this rank's
        // own shard of its slot has no reader but itself: it reads that
        // shard from its send buffer, and copies only the others.
        const ShardRange own_shard = Shard(own.count, n, rank);
        const size_t es = DataTypeSize(own.dtype);
        std::memcpy(seg.in_slot(rank), buf.send, own_shard.begin * es);
        std::memcpy(static_cast<uint8_t*>(seg.in_slot(rank)) + own_shard.end * es, buf.send + own_shard.end * es,
                    in_bytes - own_shard.end * es);
        inputs.ptrs[rank] = buf.send;
      } else {
        std::memcpy(seg.in_slot(rank), buf.send, in_bytes);
      }
    }
    if (!r.ok()) {
      local = r.code();
      std::snprintf(seg.slot(rank, index).status_message, ring::kMessageBytes, "%s", r.message().c_str());
    }
  }
  Status s = Barrier(seg, rank, index, ring::kPhaseStart, local, ctx);
  if (!s.ok()) return fail_hard(s);
  if (verdict.ok()) verdict = PeerVerdict(seg, index);

  const uint32_t unsafe = seg.params().unsafe_flags;
  // Negative control (DeepEP): completion published before the output is written.
  const bool complete_early = verdict.ok() && (unsafe & ring::kUnsafeEventBeforeEpilogue) != 0;
  if (complete_early) {
    CountOp(seg, rank, index, matched, verdict);
    ring::CompleteOp(seg, rank, index, verdict);
  }
  if (verdict.ok()) {
    s = exchange != nullptr ? RunSpanningBody(seg, rank, index, own, buf, inputs, ctx, *exchange)
                            : RunBody(seg, rank, index, own, buf, inputs, ctx);
    if (!s.ok()) return complete_early ? s : fail_hard(s);
  }
  // This rank's reads of peers' slots and buffers are over. A peer whose
  // barrier ended on the abort word has failed this op, and its client may
  // write its buffers again while they are read in place: once aborted, the
  // op does not succeed. Checked before this rank's end flag, which a peer
  // completing cleanly (and then destroying the communicator, an abort
  // too) must see first: such a leave cannot fail an op read in time.
  if (verdict.ok() && !complete_early && seg.aborted()) return fail_hard(seg.AbortStatus());
  // Even a refused op ends with the barrier, so no rank runs ahead into a
  // slot a peer is still reading. Negative control (AITER): leave without it.
  if ((unsafe & ring::kUnsafeSkipEndBarrier) == 0) {
    s = Barrier(seg, rank, index, ring::kPhaseEnd, StatusCode::kOk, ctx);
    if (!s.ok()) return complete_early ? s : fail_hard(s);
  }
  if (!complete_early) {
    CountOp(seg, rank, index, matched, verdict);
    ring::CompleteOp(seg, rank, index, verdict);
  }
  return verdict;
}

RankExecutor::RankExecutor(ring::CommSegment seg, uint32_t rank, BufferResolver* resolver, NodeExchange* exchange,
                           bool caller_runs, uint64_t lead_max_bytes)
    : seg_(seg),
      rank_(rank),
      resolver_(resolver),
      exchange_(exchange),
      caller_runs_(caller_runs),
      lead_max_bytes_(exchange == nullptr && !caller_runs && seg.world_size() > 1 && resolver->ResolvesPeers()
                          ? lead_max_bytes
                          : 0) {}

RankExecutor::~RankExecutor() { Stop(); }

void RankExecutor::Start() {
  {
    MutexLock lock(&duty_);
    next_ = seg_.control(rank_).completed.value.load(std::memory_order_acquire);
  }
  thread_ = std::thread([this] {
    if (caller_runs_) {
      CallerRunsLoop();
    } else if (lead_max_bytes_ != 0 && rank_ != 0) {
      FollowLoop();
    } else {
      Loop();
    }
  });
}

void RankExecutor::RunReadyLocked(uint64_t index) {
  while (next_ <= index && !stop_.load(std::memory_order_acquire) &&
         seg_.slot(rank_, next_).ready_seq.load(std::memory_order_acquire) >= next_ + 1) {
    ring::PublishCpu(seg_.control(rank_).executor_cpu.value);  // for the op's waiters (WaitOpDone)
    if (lead_max_bytes_ != 0) {
      LeadOp(next_);
    } else {
      ExecuteOp(seg_, rank_, next_, *resolver_, &stop_, exchange_);
    }
    ++next_;
  }
}

namespace {

// Sets the lead word to `state` for op `index` unless it already speaks for
// that op or a later one: true when this thread decided the op. A running
// word (the leader completing an earlier led op, which it finishes without
// waiting on anyone) is waited out first, so no op is ever declined over
// one. Only the leader writes "running", and never while it claims, so
// the leader's own claim never waits. `stop` (optional) ends the attempt.
bool ClaimLeadWord(std::atomic<uint64_t>& word, uint64_t index, LeadState state, const std::atomic<bool>* stop) {
  uint64_t seen = word.load(std::memory_order_acquire);
  while ((seen >> 2) < index + 1 && (stop == nullptr || !stop->load(std::memory_order_acquire))) {
    if ((seen & 3) == kLeadRunning) {
      ring::FutexWait(word, seen, 100'000);
      seen = word.load(std::memory_order_acquire);
      continue;
    }
    if (word.compare_exchange_weak(seen, ((index + 1) << 2) | state, std::memory_order_acq_rel,
                                   std::memory_order_acquire)) {
      return true;
    }
  }
  return false;
}

}  // namespace

Status RankExecutor::LeadOp(uint64_t index) {
  const uint32_t n = seg_.world_size();
  const int64_t deadline = ring::NowNs() + static_cast<int64_t>(seg_.params().op_timeout_ns);
  const ring::WaitContext ctx{&seg_, &stop_, deadline};
  std::vector<const OpDescriptor*> descs(n);
  bool lead = true;
  for (uint32_t k = 0; lead && k < n; ++k) {
    ring::WaitContext post_ctx = ctx;  // the poster may share this core: then no spin
    post_ctx.writer_cpus[0] = &seg_.control(k).poster_cpu.value;
    lead = ring::WaitAtLeast(seg_.slot(k, index).ready_seq, index + 1, post_ctx, "a peer to post").ok();
    descs[k] = &seg_.slot(k, index).desc;
  }
  // No led op after an abort: ExecuteOp fails it on every rank.
  lead = lead && !seg_.aborted() && Leadable(seg_, index, descs.data(), lead_max_bytes_);
  if (lead) {
    // A client that waits for this op may have posted from this CPU: the
    // op then runs only when its wait yields. Step to a CPU no client is on.
    std::array<uint64_t, ring::kMaxRanks> posters{};
    for (uint32_t k = 0; k < n; ++k) posters[k] = seg_.control(k).poster_cpu.value.load(std::memory_order_relaxed);
    if (mover_.MoveOffBusy(posters.data(), n)) ring::PublishCpu(seg_.control(0).executor_cpu.value);
  }
  std::atomic<uint64_t>& word = seg_.control(0).lead.value;
  const bool claimed = ClaimLeadWord(word, index, lead ? kLeadRunning : kLeadDeclined, nullptr);
  if (!claimed || !lead) {
    // Declined here or by a follower that gave up waiting: every rank runs it.
    if (claimed) ring::WakeWaiters(word);
    return ExecuteOp(seg_, 0, index, *resolver_, &stop_, nullptr, deadline);
  }
  // The followers' ops before this one (run with every rank) complete first,
  // so each completion word only grows. ExecuteOp completes on every path
  // within its own deadline, which an abort does not shorten: wait past it.
  const ring::WaitContext before{nullptr, &stop_, deadline + static_cast<int64_t>(seg_.params().op_timeout_ns)};
  for (uint32_t k = 1; k < n; ++k) {
    Status s = ring::WaitAtLeast(seg_.control(k).completed.value, index, before, "a peer's op before to complete");
    if (s.ok()) continue;
    // Stopped, or a follower's op before never completed: that rank's op
    // cannot be completed here (its word would go back). Abort and hand the
    // op back as declined: each follower fails it itself, after its op
    // before (ExecuteOp on an aborted segment).
    seg_.Abort(s.code(), ("rank 0, op " + std::to_string(index) + ": " + s.message()).c_str());
    Status final = seg_.AbortStatus();
    if (final.ok()) final = s;
    CountOp(seg_, 0, index, true, final);
    ring::CompleteOp(seg_, 0, index, final);
    word.store(((index + 1) << 2) | kLeadDeclined, std::memory_order_release);
    ring::WakeWaiters(word);
    return final;
  }
  for (uint32_t k = 0; k < n; ++k) ResetOpRecords(seg_, k, index);
  Status verdict = RunLedBody(seg_, descs.data(), *resolver_, seg_.in_slot(0));
  // As in ExecuteOp: an op read in place does not succeed once aborted.
  if (verdict.ok() && seg_.aborted()) verdict = seg_.AbortStatus();
  const int64_t now = ring::NowNs();
  for (uint32_t k = 0; k < n; ++k) {
    ring::StatusRecord& trace = seg_.status_record(k, index);
    trace.reads_done_ns.store(now, std::memory_order_relaxed);
    trace.output_done_ns.store(now, std::memory_order_release);
  }
  CountOp(seg_, 0, index, true, verdict);
  for (uint32_t k = 0; k < n; ++k) ring::CompleteOp(seg_, k, index, verdict);
  // Only now may a follower decline a later op (never over a running one):
  // until every rank's op is complete, a follower reading the word past its
  // op would take the op for one the leader gave up on.
  word.store(((index + 1) << 2) | kLeadFinished, std::memory_order_release);
  return verdict;
}

void RankExecutor::RunDeclined(uint64_t index, int64_t deadline_ns) {
  MutexLock lock(&duty_);
  if (stop_.load(std::memory_order_acquire) || next_ != index) return;
  ring::PublishCpu(seg_.control(rank_).executor_cpu.value);
  ExecuteOp(seg_, rank_, index, *resolver_, &stop_, nullptr, deadline_ns);
  next_ = index + 1;
}

void RankExecutor::FollowLoop() {
  pthread_setname_np(pthread_self(), "cd-executor");
  std::atomic<uint64_t>& word = seg_.control(0).lead.value;
  const auto& own_done = seg_.control(rank_).completed.value;
  const int64_t timeout = static_cast<int64_t>(seg_.params().op_timeout_ns);
  const ring::WaitContext idle{nullptr, &stop_, 0, true};
  constexpr int64_t kBusyNs = 1'000'000;  // "right after an op", as in Loop
  int64_t last_ran = 0;
  // The sleep slice of the undecided wait below, carried from op to op: a
  // stream of led ops completes ops without a wake, so a slice started
  // afresh each op woke every follower about once an op, and carried over
  // it roughly halved the 8-process 16 KiB led op on 2 cores
  // (docs/results-history.md, twenty-seventh session's move of "Host backend
  // against Open MPI, now"). Reset by a
  // declined op, after which the leader wakes the followers anyway.
  constexpr int64_t kFirstSliceNs = 20'000;
  int64_t led_slice = kFirstSliceNs;
  while (!stop_.load(std::memory_order_acquire)) {
    uint64_t index = 0;
    {
      MutexLock lock(&duty_);
      next_ = std::max(next_, own_done.load(std::memory_order_acquire));  // led ops are complete
      index = next_;
    }
    const ring::RingSlot& slot = seg_.slot(rank_, index);
    const uint64_t w = word.load(std::memory_order_acquire);
    if (own_done.load(std::memory_order_acquire) >= index + 1) continue;  // led meanwhile (read after the word)
    const uint64_t decided_for = w >> 2;
    if (decided_for == index + 1 && (w & 3) == kLeadRunning) {
      // The leader completes this rank's op (its completion wakes this
      // wait), or hands it back declined if it had to give up: look again
      // every millisecond.
      const ring::WaitContext led{nullptr, &stop_, ring::NowNs() + kBusyNs, true};
      ring::WaitAtLeast(own_done, index + 1, led, "the led op");
      continue;
    }
    if (decided_for >= index + 1) {
      // Declined; or the leader moved past it without this rank (it failed
      // the op alone: its ExecuteOp aborted the communicator).
      if (!ring::WaitAtLeast(slot.ready_seq, index + 1, idle, "next op").ok()) break;
      RunDeclined(index, 0);
      last_ran = ring::NowNs();
      led_slice = kFirstSliceNs;
      continue;
    }
    // Undecided. This executor reads nothing of its own slot but the atomic
    // ready_seq: once the op completes (led), its client may write the slot
    // for a later op. Right after a declined op (a large one) the next is
    // likely declined too: the wait then spins and yields a while before it
    // sleeps, so a stream of large ops is not a futex wake each.
    if (ring::NowNs() - last_ran < kBusyNs && !seg_.aborted()) {
      const ring::WaitContext busy{&seg_, &stop_, ring::NowNs() + kBusyNs};
      ring::WaitAtLeast(word, index + 1, busy, "rank 0's executor to take the op", 2);
      continue;
    }
    // Sleep until the leader declines an op (it wakes the followers) or
    // moves past this one without it, this rank's op has waited a whole op
    // timeout undecided (the leader decides within that of its own post), an
    // abort, or a stop. Led ops change the word without a wake, and the
    // slices only grow (led_slice, above), to at most a second when the wait
    // starts: a follower of a stream of led ops wakes about once a second,
    // not once an op.
    bool give_up = false;
    int64_t seen_posted = 0;  // when this executor first saw its op posted
    int64_t slice = std::min(led_slice, ring::kMaxOpSliceNs);
    for (;; slice *= 2) {
      const uint64_t now_word = word.load(std::memory_order_acquire);
      const uint64_t decided = now_word >> 2;
      if (decided > index + 1 || (decided == index + 1 && (now_word & 3) == kLeadDeclined)) break;
      if (own_done.load(std::memory_order_acquire) >= index + 1 || stop_.load(std::memory_order_acquire)) break;
      const int64_t now = ring::NowNs();
      if (seen_posted == 0 && slot.ready_seq.load(std::memory_order_acquire) >= index + 1) seen_posted = now;
      // With its op posted, an abort raised between the check below and the
      // sleep wakes nothing this sleep sees: re-check each second, as op
      // waits do. Without one, nothing waits on it: sleep as idle waits do.
      slice = std::min(slice, seen_posted != 0 ? ring::kMaxOpSliceNs : ring::kMaxSliceNs);
      const int64_t left = seen_posted != 0 ? seen_posted + timeout - now : slice;
      if (seg_.aborted() || left <= 0) {
        give_up = true;
        break;
      }
      ring::FutexWait(word, now_word, std::min(slice, left));
    }
    led_slice = slice;
    if (stop_.load(std::memory_order_acquire)) break;
    if (!give_up) continue;
    // Aborted before this rank posted: its op fails as soon as it is posted.
    if (!ring::WaitAtLeast(slot.ready_seq, index + 1, idle, "next op").ok()) break;
    const int64_t own_deadline = seen_posted + timeout;
    if (!ClaimLeadWord(word, index, kLeadDeclined, &stop_)) continue;  // the leader decided first
    ring::WakeWaiters(word);
    RunDeclined(index, seg_.aborted() || seen_posted == 0 ? 0 : own_deadline);
    last_ran = ring::NowNs();
    led_slice = kFirstSliceNs;
  }
  exited_.store(true, std::memory_order_release);
}

bool RankExecutor::RunPosted(uint64_t index) {
  if (!duty_.TryLock()) return false;
  RunReadyLocked(index);
  duty_.Unlock();
  return true;
}

void RankExecutor::Stop() {
  stop_.store(true, std::memory_order_release);
  // The thread may sleep on any word of the segment. A wake that lands
  // between its stop check and its futex wait is lost (the stop flag is not
  // the word it sleeps on), so wake until it is gone.
  while (thread_.joinable() && !exited_.load(std::memory_order_acquire)) {
    seg_.WakeAll();
    if (exchange_ != nullptr) ring::WakeWaiters(exchange_->exchange_done());  // not a word of the segment
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  if (thread_.joinable()) thread_.join();
  // A client thread inside RunPosted sees the stop and returns soon; once
  // this lock is ours none runs an op again (RunReadyLocked checks stop_).
  MutexLock wait_for_callers(&duty_);
}

void RankExecutor::Loop() {
  pthread_setname_np(pthread_self(), "cd-executor");
  // Waiting for the next op is idle time, not an op wait: no deadline, only
  // stop. Right after an op the next one often follows at once: the wait
  // then yields its core a while (as waits inside an op do) before it sleeps,
  // so a steady stream of posts is not a futex wake each.
  const ring::WaitContext idle{nullptr, &stop_, 0, true};
  const ring::WaitContext busy{nullptr, &stop_, 0, false};
  constexpr int64_t kBusyNs = 1'000'000;
  int64_t last_ran = 0;
  while (!stop_.load(std::memory_order_acquire)) {
    uint64_t index = 0;
    {
      MutexLock lock(&duty_);
      index = next_;
    }
    const bool recent = ring::NowNs() - last_ran < kBusyNs;
    if (!ring::WaitAtLeast(seg_.slot(rank_, index).ready_seq, index + 1, recent ? busy : idle, "next op").ok()) break;
    // A waiting client thread may have run it meanwhile (RunPosted): run what is still posted.
    MutexLock lock(&duty_);
    RunReadyLocked(UINT64_MAX);
    last_ran = ring::NowNs();
  }
  exited_.store(true, std::memory_order_release);
}

void RankExecutor::CallerRunsLoop() {
  pthread_setname_np(pthread_self(), "cd-executor");
  // While ops keep coming the thread polls, sleeping on nothing a post
  // wakes: a post's wake goes to peers waiting for it, and the poster's own
  // thread runs the op when it waits. An op still not taken at a poll (its
  // poster does not wait, or waits with a timeout) runs here. Polls back off
  // while they find nothing; after a quiet spell the thread sleeps until a
  // post wakes it.
  constexpr int64_t kPollMinNs = 100'000, kPollMaxNs = 2'000'000, kActiveNs = 50'000'000;
  const ring::WaitContext idle{nullptr, &stop_, 0, true};
  int64_t poll_ns = kPollMinNs;
  int64_t last_active = ring::NowNs();
  auto sleep_ns = [](int64_t ns) {
    timespec ts{0, static_cast<long>(ns)};
    nanosleep(&ts, nullptr);
  };
  while (!stop_.load(std::memory_order_acquire)) {
    uint64_t index = 0;
    {
      MutexLock lock(&duty_);
      index = next_;
    }
    if (seg_.slot(rank_, index).ready_seq.load(std::memory_order_acquire) < index + 1) {
      if (ring::NowNs() - last_active < kActiveNs) {
        sleep_ns(poll_ns);
        poll_ns = std::min(poll_ns * 2, kPollMaxNs);
        continue;
      }
      if (!ring::WaitAtLeast(seg_.slot(rank_, index).ready_seq, index + 1, idle, "next op").ok()) break;
      last_active = ring::NowNs();
      poll_ns = kPollMinNs;
      sleep_ns(poll_ns);  // the poster's thread is about to wait for it: let it run the op
      continue;
    }
    last_active = ring::NowNs();
    if (duty_.TryLock()) {  // posted and nobody runs it: run it here
      RunReadyLocked(UINT64_MAX);
      duty_.Unlock();
    } else {
      sleep_ns(poll_ns);  // a waiting client thread runs it
    }
  }
  exited_.store(true, std::memory_order_release);
}

}  // namespace collectived::host
