// Led ops (host_executor.h, LeadState; docs/protocol.md, "Led ops"): rank
// 0's executor runs a small daemon-executed op alone for every rank; the
// other ranks' executors follow.
#include "executor/host_executor.h"

#include <pthread.h>

#include <algorithm>
#include <array>
#include <cstring>
#include <string>
#include <vector>

#include "executor/op_support.h"
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
  // (docs/results-history.md, the twenty-fifth session's 2-core entry).
  // Reset by a declined op, after which the leader wakes the followers
  // anyway.
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

}  // namespace collectived::host
