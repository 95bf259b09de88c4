// The registry's facade: construction, session cleanup, housekeeping, and
// the per-op calls (Submit, QueryOp, RegisterPlan). The other concerns live in
// sessions.cc, buffers.cc, join.cc, gpu_registrations.cc and stats.cc.
#include "daemon/registry.h"

#include <spdlog/spdlog.h>

#include "daemon/registry_state.h"
#include "ring/matcher.h"
#include "ring/op_ring.h"
#include "ring/wait.h"

namespace collectived::daemon {

Registry::Registry(const DaemonConfig& config, AccessPolicy access) : config_(config), access_(access) {}

Registry::~Registry() {
  std::vector<uint64_t> ids;
  {
    MutexLock lock(&mu_);
    for (auto& [id, s] : sessions_) ids.push_back(id);
  }
  for (uint64_t id : ids) CleanupSession(id, "daemon shutting down");
}

size_t Registry::session_count() {
  MutexLock lock(&mu_);
  return sessions_.size();
}

Status Registry::RegisterPlan(uint64_t session_id, uint64_t comm_id, uint32_t rank, const ring::OpDescriptor& desc,
                              uint64_t* plans) {
  MutexLock lock(&mu_);
  Comm* comm = nullptr;
  COLLECTIVED_RETURN_IF_ERROR(MemberLocked(session_id, comm_id, rank, &comm));
  // Sizes are checked when the op runs (heap ops may exceed the slot); here
  // the kind, type and reduction.
  COLLECTIVED_RETURN_IF_ERROR(ring::ValidateDescriptor(desc, UINT64_MAX));
  *plans = ++comm->captured_plans[rank];
  if (comm->gpu_executor) comm->gpu_executor->NoteCapturedPlan();
  spdlog::debug("communicator {} rank {}: captured plan {} ({} x {})", comm_id, rank, *plans, desc.count,
                DataTypeName(desc.dtype));
  return Status::Ok();
}

Status Registry::Submit(uint64_t session_id, uint64_t comm_id, uint32_t rank, ring::OpDescriptor desc,
                        uint64_t* index) {
  COLLECTIVED_RETURN_IF_ERROR(CheckServing());
  MutexLock lock(&mu_);
  Comm* comm = nullptr;
  COLLECTIVED_RETURN_IF_ERROR(MemberLocked(session_id, comm_id, rank, &comm));
  if (comm->mode != ExecutionMode::kDaemon) {
    return Status::FailedPrecondition("Submit needs a daemon-executed communicator; communicator " +
                                      std::to_string(comm_id) + " is client-executed");
  }
  if (comm->gpu) {
    return Status::FailedPrecondition("Submit serves host communicators; GPU communicators post from the "
                                      "client's stream (Communicator::AllReduce with a GpuStream)");
  }
  COLLECTIVED_RETURN_IF_ERROR(ring::ValidateDescriptor(desc, config_.max_message_bytes));
  const uint64_t in_bytes = desc.count * DataTypeSize(desc.dtype);
  const uint64_t out_bytes = desc.kind == CollectiveKind::kAllGather ? in_bytes * comm->world_size : in_bytes;
  Session& s = *sessions_.at(session_id);
  for (auto [id, off, bytes, what] : {std::tuple{desc.send_buffer_id, desc.send_offset, in_bytes, "send"},
                                      std::tuple{desc.recv_buffer_id, desc.recv_offset, out_bytes, "recv"}}) {
    auto bit = s.buffers.find(id);
    if (bit == s.buffers.end()) {
      return Status::NotFound(std::string(what) + " buffer " + std::to_string(id) + " not found in this session");
    }
    if (off > bit->second.bytes || bytes > bit->second.bytes - off) {
      return Status::InvalidArgument(std::string(what) + " range [" + std::to_string(off) + ", +" +
                                     std::to_string(bytes) + ") exceeds buffer " + std::to_string(id) + " of " +
                                     std::to_string(bit->second.bytes) + " bytes");
    }
  }
  const ring::CommSegment& seg = comm->seg;
  const uint64_t posted = seg.control(rank).next_index.value.load(std::memory_order_acquire);
  const uint64_t done = seg.control(rank).completed.value.load(std::memory_order_acquire);
  if (posted - done >= seg.ring_depth()) {
    return Status::ResourceExhausted("op ring of rank " + std::to_string(rank) + " is full (" +
                                     std::to_string(seg.ring_depth()) + " ops in flight)");
  }
  desc.algorithm = ring::ChooseAlgorithm(desc.kind, in_bytes, seg.params().one_shot_max_bytes);
  // Post outside the lock: if another poster of this rank took the last free
  // slot, PostOp waits for the rank's executor, which needs this lock to
  // resolve buffers. The window keeps the segment mapped meanwhile.
  std::shared_ptr<ipc::ShmWindow> keep = comm->window;
  const ring::CommSegment posted_seg = seg;
  lock.Unlock();
  ring::WaitContext ctx{&posted_seg, nullptr,
                        ring::NowNs() + static_cast<int64_t>(posted_seg.params().op_timeout_ns)};
  return ring::PostOp(posted_seg, rank, desc, ctx, index);
}

Status Registry::QueryOp(uint64_t session_id, uint64_t comm_id, uint32_t rank, uint64_t index, bool* done,
                         Status* op_status) {
  MutexLock lock(&mu_);
  Comm* comm = nullptr;
  COLLECTIVED_RETURN_IF_ERROR(MemberLocked(session_id, comm_id, rank, &comm));
  const uint64_t posted = comm->seg.control(rank).next_index.value.load(std::memory_order_acquire);
  if (index >= posted) {
    return Status::NotFound("op " + std::to_string(index) + " was never posted (rank " + std::to_string(rank) +
                            " posted " + std::to_string(posted) + ")");
  }
  *done = ring::IsOpDone(comm->seg, rank, index);
  if (*done) *op_status = ring::CompletedOpStatus(comm->seg, rank, index);
  return Status::Ok();
}

void Registry::CleanupSession(uint64_t session_id, const std::string& why) {
  Deferred after;
  {
    MutexLock lock(&mu_);
    auto sit = sessions_.find(session_id);
    if (sit == sessions_.end()) return;
    Session& s = *sit->second;
    const std::string reason = "session " + std::to_string(session_id) + " (pid " + std::to_string(s.pid) + ") " + why;
    auto memberships = s.memberships;
    for (const auto& [comm_id, rank] : memberships) {
      auto cit = comms_.find(comm_id);
      if (cit != comms_.end()) LeaveLocked(*cit->second, rank, reason, &after);
    }
    // Buffers are unmapped only after the executors above stopped using them.
    auto buffers = std::make_shared<std::map<uint64_t, BufferRecord>>(std::move(s.buffers));
    for (auto& [id, b] : *buffers) buffer_bytes_ -= b.bytes;
    after.push_back([buffers] { buffers->clear(); });
    // Legacy-IPC memory it may still have had open (the last holder frees it, outside the lock).
    after.push_back([held = std::move(s.held_gpu_memory)]() mutable { held.clear(); });
    spdlog::info("{}; reclaimed {} buffers, {} memberships", reason, buffers->size(), memberships.size());
    sessions_.erase(sit);
  }
  for (auto& f : after) f();
}

void Registry::Housekeeping() {
  std::vector<uint64_t> unbound;
  Deferred after;
  {
    MutexLock lock(&mu_);
    const int64_t now = ring::NowNs();
    for (auto it = refused_keys_.begin(); it != refused_keys_.end();) {  // keys used once never come back
      it = it->second.until_ns <= now ? refused_keys_.erase(it) : std::next(it);
    }
    // A member whose join waited past its deadline gets DEADLINE_EXCEEDED and
    // is withdrawn, so a client that gave up never becomes a phantom member.
    std::vector<std::pair<uint64_t, uint32_t>> expired;
    for (auto& [id, c] : comms_) {
      if (c->formed) continue;
      for (uint32_t r = 0; r < c->world_size; ++r) {
        if (c->pending[r] && now >= c->join_deadline_ns[r]) expired.push_back({id, r});
      }
    }
    for (const auto& [id, r] : expired) {
      auto cit = comms_.find(id);
      if (cit == comms_.end()) continue;
      Comm& c = *cit->second;
      std::string missing;
      for (uint32_t k = 0; k < c.world_size; ++k) {
        if (c.members[k] == 0) missing += (missing.empty() ? "" : ",") + std::to_string(k);
      }
      const std::string msg = "only " + std::to_string(c.joined) + " of " + std::to_string(c.world_size) +
                              " ranks joined '" + c.key + "' before rank " + std::to_string(r) +
                              "'s join timed out (missing ranks " + missing + ")";
      spdlog::warn("{}", msg);
      WithdrawJoinLocked(c, r, Status::DeadlineExceeded(msg), &after);
    }
    for (auto& [id, c] : comms_) {
      if (c->formed) FailPendingRegistrationsLocked(*c, Status::Ok(), true, now, &after);
    }
    InspectStallsLocked(now);
    // An op that failed here (a transfer's length, a local limit, its
    // deadline) aborted the communicator here only: the plan's other nodes
    // would wait out their own deadline. Told within a tick.
    for (auto& [id, c] : comms_) {
      if (c->formed && c->exchange && !c->peers_told && c->seg.aborted()) {
        c->peers_told = true;
        TellSpannedNodesLocked(*c, c->seg.AbortStatus());
      }
    }
    // Another node's announcement outlives its members' joins only if the
    // withdrawal was lost (its node died: OnNodeLost drops it sooner).
    const int64_t keep_ns = (static_cast<int64_t>(config_.join_timeout_ms) + 5000) * 1000000;
    for (auto kit = announced_.begin(); kit != announced_.end();) {
      for (auto nit = kit->second.begin(); nit != kit->second.end();) {
        nit = now - nit->second.received_ns > keep_ns ? kit->second.erase(nit) : std::next(nit);
      }
      kit = kit->second.empty() ? announced_.erase(kit) : std::next(kit);
    }
    for (auto uit = used_announcements_.begin(); uit != used_announcements_.end();) {
      uit = now - uit->second > keep_ns ? used_announcements_.erase(uit) : std::next(uit);
    }
    for (auto eit = ended_spanning_.begin(); eit != ended_spanning_.end();) {
      eit = now - eit->second > keep_ns ? ended_spanning_.erase(eit) : std::next(eit);
    }
    // A session whose fd connection never came is a lease that never started.
    for (auto& [id, s] : sessions_) {
      if (!s->bound && now - s->attached_ns > 30'000'000'000LL) unbound.push_back(id);
    }
  }
  for (auto& f : after) f();
  for (uint64_t id : unbound) CleanupSession(id, "never opened its fd connection");
}

}  // namespace collectived::daemon
