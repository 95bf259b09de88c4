// The session lifecycle: attach, the fd-socket lease, detach.
#include "daemon/registry.h"

#include <spdlog/spdlog.h>

#include <random>

#include "daemon/registry_state.h"
#include "ring/wait.h"

namespace collectived::daemon {
namespace {

uint64_t RandomToken() {
  std::random_device rd;
  return (static_cast<uint64_t>(rd()) << 32) ^ rd();
}

}  // namespace

Status Registry::Attach(const std::string& name, uint32_t pid, const ipc::PeerCredentials& owner,
                        uint64_t* session_id, uint64_t* token) {
  COLLECTIVED_RETURN_IF_ERROR(CheckServing());
  MutexLock lock(&mu_);
  if (sessions_.size() >= config_.max_sessions) {
    return Status::ResourceExhausted("--max-sessions (" + std::to_string(config_.max_sessions) + ") reached");
  }
  auto s = std::make_unique<Session>();
  s->id = next_id_++;
  s->token = RandomToken();
  s->name = name;
  s->pid = pid;
  s->owner = owner;
  s->attached_ns = ring::NowNs();
  *session_id = s->id;
  *token = s->token;
  spdlog::info("session {} attached: '{}' pid {} uid {}", s->id, name, pid, owner.uid);
  sessions_[s->id] = std::move(s);
  return Status::Ok();
}

Status Registry::Authorize(uint64_t session_id, uint64_t token, const ipc::PeerCredentials& caller) {
  MutexLock lock(&mu_);
  auto it = sessions_.find(session_id);
  if (it == sessions_.end()) return Status::NotFound("session " + std::to_string(session_id) + " not found");
  const Session& s = *it->second;
  if (s.owner.uid != caller.uid) {
    return Status::PermissionDenied("session " + std::to_string(session_id) + " belongs to uid " +
                                    std::to_string(s.owner.uid) + "; this call comes from uid " +
                                    std::to_string(caller.uid));
  }
  if (s.token != token) {
    return Status::PermissionDenied("session " + std::to_string(session_id) +
                                    ": wrong or missing session token (metadata collectived-session-token)");
  }
  return Status::Ok();
}

Status Registry::Detach(uint64_t session_id) {
  {
    MutexLock lock(&mu_);
    if (!sessions_.count(session_id)) return Status::NotFound("session " + std::to_string(session_id) + " not found");
  }
  CleanupSession(session_id, "detached");
  return Status::Ok();
}

Status Registry::BindConnection(uint64_t session_id, uint64_t token, uint32_t uid) {
  MutexLock lock(&mu_);
  auto it = sessions_.find(session_id);
  if (it == sessions_.end()) return Status::NotFound("session " + std::to_string(session_id) + " not found");
  if (it->second->token != token) return Status::PermissionDenied("wrong session token");
  if (it->second->owner.uid != uid) {
    return Status::PermissionDenied("session " + std::to_string(session_id) + " belongs to another uid");
  }
  if (it->second->bound) return Status::AlreadyExists("session already has an fd connection");
  it->second->bound = true;
  return Status::Ok();
}

void Registry::ConnectionClosed(uint64_t session_id) { CleanupSession(session_id, "client disconnected"); }

}  // namespace collectived::daemon
