// Buffers (shared-memory windows a session allocates), and the windows a
// session may map: its buffers, its communicators' segments and GPU memory.
#include "daemon/registry.h"

#include "daemon/registry_state.h"
#include "ipc/shm_window.h"

namespace collectived::daemon {

size_t Registry::HeldBySessionLocked(const Session& session) {
  size_t held = session.buffers.size() + session.deposits.size();
  for (const auto& [comm_id, rank] : session.memberships) {
    auto cit = comms_.find(comm_id);
    if (cit == comms_.end()) continue;
    for (const auto& [id, g] : cit->second->registrations) {
      held += rank < g.fds.size() && g.fds[rank] != nullptr && !g.released[rank];
    }
  }
  return held;
}

Status Registry::CheckBufferCapsLocked(const Session& session) {
  if (HeldBySessionLocked(session) >= config_.max_buffers_per_session) {
    return Status::ResourceExhausted("--max-buffers-per-session (" + std::to_string(config_.max_buffers_per_session) +
                                     ") reached");
  }
  size_t held = 0;  // counted, not tracked: bounded by the caps, and never out of step
  for (const auto& [id, s] : sessions_) held += HeldBySessionLocked(*s);
  if (held >= config_.max_buffers) {
    return Status::ResourceExhausted("--max-buffers (" + std::to_string(config_.max_buffers) + ") reached");
  }
  return Status::Ok();
}

Status Registry::AllocBuffer(uint64_t session_id, uint64_t bytes, BufferInfo* out) {
  COLLECTIVED_RETURN_IF_ERROR(CheckServing());
  if (bytes == 0) return Status::InvalidArgument("buffer of 0 bytes");
  MutexLock lock(&mu_);
  auto sit = sessions_.find(session_id);
  if (sit == sessions_.end()) return Status::NotFound("session " + std::to_string(session_id) + " not found");
  COLLECTIVED_RETURN_IF_ERROR(CheckBufferCapsLocked(*sit->second));
  if (bytes > config_.max_buffer_bytes || buffer_bytes_ > config_.max_buffer_bytes - bytes) {
    return Status::ResourceExhausted("buffer of " + std::to_string(bytes) + " bytes exceeds the daemon's budget (" +
                                     std::to_string(buffer_bytes_) + " of " +
                                     std::to_string(config_.max_buffer_bytes) + " bytes in use)");
  }
  const uint64_t id = next_id_++;
  std::unique_ptr<ipc::ShmWindow> window;
  COLLECTIVED_RETURN_IF_ERROR(ipc::ShmWindow::Create("collectived-buffer-" + std::to_string(id), bytes, &window));
  buffer_bytes_ += bytes;
  out->buffer_id = id;
  out->window_id = id;  // one window per buffer
  out->offset = 0;
  out->bytes = bytes;
  out->window_bytes = window->size();
  sit->second->buffers[id] = BufferRecord{std::move(window), bytes};
  return Status::Ok();
}

bool Registry::BufferInUseLocked(uint64_t session_id, uint64_t buffer_id) {
  Session& s = *sessions_.at(session_id);
  for (const auto& [comm_id, rank] : s.memberships) {
    auto cit = comms_.find(comm_id);
    if (cit == comms_.end() || !cit->second->formed) continue;
    const ring::CommSegment& seg = cit->second->seg;
    const uint64_t done = seg.control(rank).completed.value.load(std::memory_order_acquire);
    const uint64_t posted = seg.control(rank).next_index.value.load(std::memory_order_acquire);
    // Both counters are member-writable: look at no more than the ring's
    // slots, so a scribbled count cannot keep this loop (under the lock) going.
    const uint64_t depth = seg.ring_depth();
    const uint64_t first = posted - done > depth ? posted - depth : done;
    for (uint64_t i = first; i < posted && i - first < depth; ++i) {
      const ring::RingSlot& slot = seg.slot(rank, i);
      if (slot.ready_seq.load(std::memory_order_acquire) != i + 1) continue;
      if (slot.desc.send_buffer_id == buffer_id || slot.desc.recv_buffer_id == buffer_id) return true;
    }
  }
  return false;
}

Status Registry::FreeBuffer(uint64_t session_id, uint64_t buffer_id) {
  std::shared_ptr<ipc::ShmWindow> drop;  // unmapped after the lock
  MutexLock lock(&mu_);
  auto sit = sessions_.find(session_id);
  if (sit == sessions_.end()) return Status::NotFound("session " + std::to_string(session_id) + " not found");
  auto bit = sit->second->buffers.find(buffer_id);
  if (bit == sit->second->buffers.end()) {
    return Status::NotFound("buffer " + std::to_string(buffer_id) + " not found in this session");
  }
  if (BufferInUseLocked(session_id, buffer_id)) {
    return Status::FailedPrecondition("buffer " + std::to_string(buffer_id) +
                                      " is used by a posted op that has not completed");
  }
  buffer_bytes_ -= bit->second.bytes;
  drop = std::move(bit->second.window);
  sit->second->buffers.erase(bit);
  return Status::Ok();
}

Status Registry::ResolveBuffer(uint64_t comm_id, uint32_t rank, uint64_t buffer_id, uint64_t offset, uint64_t bytes,
                               void** ptr) {
  MutexLock lock(&mu_);
  auto cit = comms_.find(comm_id);
  if (cit == comms_.end() || rank >= cit->second->members.size() || cit->second->members[rank] == 0) {
    return Status::NotFound("rank " + std::to_string(rank) + " has left the communicator");
  }
  Session& s = *sessions_.at(cit->second->members[rank]);
  auto bit = s.buffers.find(buffer_id);
  if (bit == s.buffers.end()) {
    return Status::NotFound("buffer " + std::to_string(buffer_id) + " is not a buffer of rank " +
                            std::to_string(rank) + "'s session");
  }
  const uint64_t size = bit->second.bytes;
  if (offset > size || bytes > size - offset) {
    return Status::InvalidArgument("range [" + std::to_string(offset) + ", +" + std::to_string(bytes) +
                                   ") outside buffer " + std::to_string(buffer_id) + " of " + std::to_string(size) +
                                   " bytes");
  }
  *ptr = bit->second.window->data() + offset;
  return Status::Ok();
}

Status Registry::FetchWindow(uint64_t session_id, uint64_t window_id, WindowFd* out) {
  MutexLock lock(&mu_);
  auto sit = sessions_.find(session_id);
  if (sit == sessions_.end()) return Status::NotFound("session " + std::to_string(session_id) + " not found");
  Session& s = *sit->second;
  auto borrow = [out](std::shared_ptr<ipc::ShmWindow> w) {
    out->fd = w->fd();
    out->size = w->size();
    out->keep = std::move(w);
    return Status::Ok();
  };
  auto bit = s.buffers.find(window_id);
  if (bit != s.buffers.end()) return borrow(bit->second.window);
  auto is_member = [session_id](const Comm& c) {
    for (uint64_t m : c.members) {
      if (m == session_id) return true;
    }
    return false;
  };
  auto cit = comms_.find(window_id);
  if (cit != comms_.end() && is_member(*cit->second)) return borrow(cit->second->window);
  auto git = gpu_windows_.find(window_id);
  if (git != gpu_windows_.end()) {
    auto owner = comms_.find(git->second.first);
    if (owner != comms_.end() && is_member(*owner->second) && owner->second->gpu_memory) {
      const GpuCommMemory& mem = *owner->second->gpu_memory;
      COLLECTIVED_RETURN_IF_ERROR(mem.ExportFd(git->second.second, &out->fd));
      out->size = mem.window_bytes(git->second.second);
      out->close_after_send = true;
      return Status::Ok();
    }
  }
  auto rit = registered_windows_.find(window_id);
  if (rit != registered_windows_.end()) {
    auto owner = comms_.find(rit->second.comm_id);
    if (owner != comms_.end() && is_member(*owner->second)) {
      auto reg = owner->second->registrations.find(rit->second.buffer_id);
      if (reg != owner->second->registrations.end() && reg->second.fds[rit->second.rank]) {
        out->fd = *reg->second.fds[rit->second.rank];
        out->size = reg->second.allocation_bytes[rit->second.rank];
        out->keep = reg->second.fds[rit->second.rank];
        return Status::Ok();
      }
    }
  }
  return Status::NotFound("window " + std::to_string(window_id) + " is not one this session may map");
}

}  // namespace collectived::daemon
