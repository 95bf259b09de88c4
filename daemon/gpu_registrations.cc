// Callers' own GPU buffers registered by every rank of a GPU communicator:
// fds deposited over the fd socket, claimed by a registration, and answered
// once every rank registered its buffer of the same index.
#include "daemon/registry.h"

#include <spdlog/spdlog.h>

#include "daemon/registry_state.h"
#include "ring/wait.h"

namespace collectived::daemon {

// Deposited fds a session may hold unclaimed: each is a reference to GPU memory.
constexpr size_t kMaxDepositsPerSession = 64;

Status Registry::DepositFd(uint64_t session_id, int fd, uint64_t* deposit_id) {
  SharedFd owned = OwnFd(fd);  // closed on every refusal below
  MutexLock lock(&mu_);
  auto sit = sessions_.find(session_id);
  if (sit == sessions_.end()) return Status::NotFound("session " + std::to_string(session_id) + " not found");
  if (sit->second->deposits.size() >= kMaxDepositsPerSession) {
    return Status::ResourceExhausted("session holds " + std::to_string(kMaxDepositsPerSession) +
                                     " deposited fds no registration claimed");
  }
  COLLECTIVED_RETURN_IF_ERROR(CheckBufferCapsLocked(*sit->second));
  *deposit_id = next_id_++;
  sit->second->deposits[*deposit_id] = std::move(owned);
  return Status::Ok();
}

void Registry::RegisterGpuBuffer(const GpuRegisterRequest& req, GpuRegisterDone done) {
  Deferred after;
  Status error;
  {
    MutexLock lock(&mu_);
    error = RegisterGpuBufferLocked(req, &done, &after);
  }
  for (auto& f : after) f();
  if (!error.ok()) done(error, GpuRegisterResult{});
}

Status Registry::RegisterGpuBufferLocked(const GpuRegisterRequest& req, GpuRegisterDone* done, Deferred* after) {
  COLLECTIVED_RETURN_IF_ERROR(CheckServing());
  Comm* comm = nullptr;
  COLLECTIVED_RETURN_IF_ERROR(MemberLocked(req.session_id, req.comm_id, req.rank, &comm));
  if (!comm->gpu) return Status::FailedPrecondition("buffer registration needs a GPU communicator");
  if (comm->seg.aborted()) return comm->seg.AbortStatus();
  Session& s = *sessions_.at(req.session_id);
  auto dit = s.deposits.find(req.deposit_id);
  if (dit == s.deposits.end()) {
    return Status::NotFound("deposit " + std::to_string(req.deposit_id) +
                            " not found: send the allocation's fd over the fd socket first");
  }
  if (req.bytes == 0 || req.offset > req.allocation_bytes || req.bytes > req.allocation_bytes - req.offset) {
    return Status::InvalidArgument("buffer [" + std::to_string(req.offset) + ", +" + std::to_string(req.bytes) +
                                   ") is empty or outside its allocation of " +
                                   std::to_string(req.allocation_bytes) + " bytes");
  }
  const uint32_t world = comm->world_size, r = req.rank;
  const uint64_t id = ++comm->registrations_made[r];
  GpuRegistration& g = comm->registrations[id];
  if (g.fds.empty()) {
    g.fds.resize(world);
    g.allocation_bytes.assign(world, 0);
    g.offsets.assign(world, 0);
    g.bytes.assign(world, 0);
    g.window_ids.assign(world, 0);
    g.pending.resize(world);
    g.released.assign(world, false);
    g.deadline_ns = ring::NowNs() + static_cast<int64_t>(config_.join_timeout_ms) * 1000000;
  }
  g.fds[r] = std::move(dit->second);
  s.deposits.erase(dit);
  g.allocation_bytes[r] = req.allocation_bytes;
  g.offsets[r] = req.offset;
  g.bytes[r] = req.bytes;
  g.pending[r] = std::move(*done);
  if (++g.arrived < world) return Status::Ok();  // answered when the last rank registers

  // Every rank registered buffer `id`: peers address each other's at the
  // same offsets, so the sizes must agree.
  Status formed;
  for (uint32_t k = 1; k < world && formed.ok(); ++k) {
    if (g.bytes[k] != g.bytes[0]) {
      formed = Status::InvalidArgument("ranks registered buffers of different sizes as registered buffer " +
                                       std::to_string(id) + ": rank 0 " + std::to_string(g.bytes[0]) +
                                       " bytes, rank " + std::to_string(k) + " " + std::to_string(g.bytes[k]));
    }
  }
  if (formed.ok() && comm->gpu_executor) {  // daemon-executed: the fused launch addresses them here
    std::vector<int> fds;
    for (const SharedFd& fd : g.fds) fds.push_back(*fd);
    formed = comm->gpu_executor->AddCallersBuffer(id, fds, g.allocation_bytes, g.offsets, g.bytes[0]);
  }
  GpuRegisterResult result;
  result.buffer_id = id;
  if (formed.ok()) {
    g.formed = true;
    for (uint32_t k = 0; k < world; ++k) {
      g.window_ids[k] = next_id_++;
      registered_windows_[g.window_ids[k]] = {comm->id, id, k};
      result.allocations.push_back({g.window_ids[k], g.allocation_bytes[k], comm->device_uuids[k], ""});
      result.offsets.push_back(g.offsets[k]);
    }
    spdlog::info("communicator {} '{}': registered buffer {} of {} bytes on every rank", comm->id, comm->key, id,
                 g.bytes[0]);
  }
  for (auto& d : g.pending) {
    after->push_back([d = std::move(d), formed, result] { d(formed, result); });
  }
  g.pending.assign(world, nullptr);
  if (!formed.ok()) comm->registrations.erase(id);
  return Status::Ok();
}

Status Registry::DeregisterGpuBuffer(uint64_t session_id, uint64_t comm_id, uint32_t rank, uint64_t buffer_id) {
  MutexLock lock(&mu_);
  Comm* comm = nullptr;
  COLLECTIVED_RETURN_IF_ERROR(MemberLocked(session_id, comm_id, rank, &comm));
  auto it = comm->registrations.find(buffer_id);
  if (it == comm->registrations.end() || !it->second.formed || it->second.released[rank]) {
    return Status::NotFound("registered buffer " + std::to_string(buffer_id) + " is not registered by rank " +
                            std::to_string(rank));
  }
  GpuRegistration& g = it->second;
  g.released[rank] = true;
  for (bool r : g.released) {
    if (!r) return Status::Ok();
  }
  for (uint64_t w : g.window_ids) registered_windows_.erase(w);
  if (comm->gpu_executor) comm->gpu_executor->RemoveCallersBuffer(buffer_id);
  comm->registrations.erase(it);  // closes the fds: the ranks' own mappings keep the memory
  return Status::Ok();
}

void Registry::FailPendingRegistrationsLocked(Comm& comm, const Status& status, bool expired_only, int64_t now_ns,
                                              Deferred* after) {
  for (auto it = comm.registrations.begin(); it != comm.registrations.end();) {
    GpuRegistration& g = it->second;
    if (g.formed || (expired_only && now_ns < g.deadline_ns)) {
      ++it;
      continue;
    }
    Status why = status;
    if (expired_only) {
      std::string missing;
      for (uint32_t k = 0; k < comm.world_size; ++k) {
        if (!g.fds[k]) missing += (missing.empty() ? "" : ",") + std::to_string(k);
      }
      why = Status::DeadlineExceeded("registered buffer " + std::to_string(it->first) + " of '" + comm.key +
                                     "': ranks " + missing + " did not register theirs within the join timeout");
      spdlog::warn("{}", why.message());
    }
    for (auto& d : g.pending) {
      if (d) after->push_back([d = std::move(d), why] { d(why, GpuRegisterResult{}); });
    }
    it = comm.registrations.erase(it);
  }
}

}  // namespace collectived::daemon
