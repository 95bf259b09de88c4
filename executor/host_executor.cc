#include "executor/host_executor.h"

#include <pthread.h>
#include <time.h>

#include <chrono>

#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include "executor/op_support.h"
#include "kernels/host/reduce.h"
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
  // Two-shot: the reduce writes this rank's shard of its output as well as
  // its shard slot (the block still in L1), and the copy-out skips it. Only
  // where no peer reads that shard of this rank's buffers and it is no
  // input element this rank has yet to read: the output is the input
  // exactly (in place) or apart from it.
  bool own_shard_early = false;
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
      ReduceElements(d.dtype, d.reduce_op, seg.shard_slot(rank), shifted.data(), n, 0, own.end - own.begin,
                     in.own_shard_early ? buf.recv + own.begin * esize : nullptr);
      COLLECTIVED_RETURN_IF_ERROR(Barrier(seg, rank, index, ring::kPhaseMid, StatusCode::kOk, ctx));
      SleepUs(h.debug_delay_copyout_us);  // the copy-out: every shard into the output
      for (uint32_t k = 0; k < n; ++k) {
        if (k == rank && in.own_shard_early) continue;
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
      // Peers read only their own shards of this rank's input, and the
      // output is the input exactly or apart from every input here.
      inputs.own_shard_early = true;
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
        // The output's own shard may take the result as it is reduced where
        // it is the input's own shard exactly (in place) or apart from the
        // input: a partial overlap could land on input not read yet.
        const uint8_t* recv = buf.recv;
        inputs.own_shard_early = recv == buf.send || recv + in_bytes <= buf.send || buf.send + in_bytes <= recv;
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
