#include "daemon/fd_server.h"

#include <pthread.h>
#include <fcntl.h>
#include <poll.h>
#include <spdlog/spdlog.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

#include "ipc/unix_peer.h"
#include "ring/wait.h"

namespace collectived::daemon {
namespace {

constexpr int kPollMs = 100;                      // also how soon Stop() is noticed
constexpr int64_t kAcceptPauseNs = 100'000'000;   // out of fds: retry accepting after this
constexpr int kRequestsPerWake = 16;              // then the other connections get their turn

// False when the reply could not be sent (a peer that does not read its
// replies fills its socket; it is dropped rather than waited for).
bool Reply(int sock, const Status& s, uint64_t bytes, int fd) {
  ipc::FdReply r{};
  r.code = static_cast<int32_t>(s.code());
  r.bytes = bytes;
  std::snprintf(r.message, sizeof(r.message), "%s", s.message().c_str());
  return ipc::SendWithFd(sock, &r, sizeof(r), fd).ok();
}

}  // namespace

FdServer::~FdServer() { Stop(); }

Status FdServer::Start() {
  COLLECTIVED_RETURN_IF_ERROR(ipc::ListenUnix(path_, &listen_fd_));
  chmod(path_.c_str(), 0660);
  // Non-blocking: the loop accepts until EAGAIN and must never block there.
  fcntl(listen_fd_, F_SETFL, fcntl(listen_fd_, F_GETFL) | O_NONBLOCK);
  thread_ = std::thread([this] { Loop(); });
  return Status::Ok();
}

void FdServer::Stop() {
  if (stop_.exchange(true)) return;
  if (thread_.joinable()) thread_.join();
  if (listen_fd_ >= 0) close(listen_fd_);
  unlink(path_.c_str());
}

void FdServer::Loop() {
  pthread_setname_np(pthread_self(), "cd-fd-server");  // top -H, perf
  const DaemonConfig& cfg = registry_->config();
  const int64_t handshake_ns = static_cast<int64_t>(cfg.fd_handshake_timeout_ms) * 1000000;
  int64_t paused_until_ns = 0;
  std::vector<pollfd> polled;
  while (!stop_.load()) {
    const bool accepting = ring::NowNs() >= paused_until_ns;
    polled.assign(1, pollfd{listen_fd_, static_cast<short>(accepting ? POLLIN : 0), 0});
    for (const Connection& c : connections_) polled.push_back(pollfd{c.fd, POLLIN, 0});
    if (poll(polled.data(), polled.size(), kPollMs) < 0 && errno != EINTR) {
      spdlog::error("fd socket: poll: {}", std::strerror(errno));
      std::this_thread::sleep_for(std::chrono::milliseconds(kPollMs));
      continue;
    }
    const int64_t now = ring::NowNs();
    std::vector<Connection> kept;
    kept.reserve(connections_.size());
    for (size_t i = 0; i < connections_.size(); ++i) {
      Connection& c = connections_[i];
      bool keep = true;
      if (polled[i + 1].revents != 0) keep = OnReadable(c, now);
      if (keep && c.session == 0 && now - c.accepted_ns > handshake_ns) {
        spdlog::warn("fd socket: closing a connection that sent no hello within --fd-handshake-timeout-ms ({})",
                     cfg.fd_handshake_timeout_ms);
        keep = false;
      } else if (keep && c.partial_since_ns != 0 && now - c.partial_since_ns > handshake_ns) {
        spdlog::warn("fd socket: closing session {}'s connection: a request stalled half-sent for over "
                     "--fd-handshake-timeout-ms ({})", c.session, cfg.fd_handshake_timeout_ms);
        keep = false;
      }
      if (keep) {
        kept.push_back(std::move(c));
      } else {
        Close(c, /*reclaim=*/true);
      }
    }
    connections_.swap(kept);
    if (accepting && (polled[0].revents & POLLIN)) AcceptPending(now, &paused_until_ns);
  }
  for (Connection& c : connections_) Close(c, /*reclaim=*/false);  // the registry's end reclaims them
  connections_.clear();
}

void FdServer::AcceptPending(int64_t now_ns, int64_t* paused_until_ns) {
  const size_t max_connections = registry_->config().max_fd_connections;
  for (;;) {
    int sock = -1;
    Status s = ipc::AcceptPending(listen_fd_, &sock);
    if (s.code() == StatusCode::kUnavailable) return;
    if (!s.ok()) {
      // The client waits in the backlog instead of the loop spinning.
      static int64_t last_log_ns = 0;
      if (now_ns - last_log_ns > 5'000'000'000LL) {
        spdlog::warn("fd socket: {}; pausing accepts for {} ms", s.message(), kAcceptPauseNs / 1000000);
        last_log_ns = now_ns;
      }
      *paused_until_ns = now_ns + kAcceptPauseNs;
      return;
    }
    if (connections_.size() >= max_connections) {
      Reply(sock, Status::ResourceExhausted("--max-fd-connections (" + std::to_string(max_connections) + ") reached"),
            0, -1);
      close(sock);
      continue;
    }
    Connection c;
    c.fd = sock;
    c.accepted_ns = now_ns;
    // Unreadable credentials leave uid unknown: such a connection binds no session.
    ipc::ReadPeerCredentials(sock, &c.peer);
    connections_.push_back(std::move(c));
  }
}

bool FdServer::OnReadable(Connection& c, int64_t now_ns) {
  for (int served = 0; served < kRequestsPerWake;) {
    size_t n = 0;
    Status s = ipc::RecvSome(c.fd, reinterpret_cast<char*>(&c.req) + c.got, sizeof(c.req) - c.got, &n, &c.fds);
    if (!s.ok()) return false;  // closed by the peer, or a broken stream; Close() closes c.fds
    if (n == 0) return true;    // nothing more for now
    c.got += n;
    if (c.got < sizeof(c.req)) {
      if (c.partial_since_ns == 0) c.partial_since_ns = now_ns;
      continue;
    }
    c.got = 0;
    c.partial_since_ns = 0;
    ++served;
    if (c.fds.size() > 1) {
      const size_t count = c.fds.size();
      ipc::CloseFds(&c.fds);
      if (!Reply(c.fd, Status::InvalidArgument("fd-socket message carried " + std::to_string(count) +
                                               " descriptors; at most 1 is accepted"), 0, -1)) {
        return false;
      }
      continue;
    }
    const int fd = c.fds.empty() ? -1 : c.fds[0];
    c.fds.clear();  // Handle owns fd now
    if (!Handle(c, fd)) return false;
  }
  return true;
}

bool FdServer::Handle(Connection& c, int stray) {
  const ipc::FdRequest& req = c.req;
  if (req.magic == ipc::kFdMagic && req.type == ipc::FdRequestType::kDepositFd) {
    if (c.session == 0 || req.session_id != c.session) {
      if (stray >= 0) close(stray);
      return Reply(c.fd, Status::PermissionDenied("deposit before hello, or for another session"), 0, -1);
    }
    if (stray < 0) return Reply(c.fd, Status::InvalidArgument("a deposit carries an fd"), 0, -1);
    uint64_t deposit = 0;
    Status s = registry_->DepositFd(c.session, stray, &deposit);  // takes the fd
    return Reply(c.fd, s, deposit, -1);
  }
  if (stray >= 0) close(stray);
  if (req.magic != ipc::kFdMagic) {
    Reply(c.fd, Status::InvalidArgument("bad fd-socket request"), 0, -1);
    return false;
  }
  if (req.type == ipc::FdRequestType::kHello) {
    if (c.session != 0) return Reply(c.fd, Status::FailedPrecondition("connection already bound"), 0, -1);
    Status s = registry_->BindConnection(req.session_id, req.arg, c.peer.uid);
    if (s.ok()) c.session = req.session_id;  // set first: a failed reply still ends the lease
    return Reply(c.fd, s, 0, -1) && s.ok();
  }
  if (req.type == ipc::FdRequestType::kFetchWindow) {
    if (c.session == 0 || req.session_id != c.session) {
      return Reply(c.fd, Status::PermissionDenied("fetch before hello, or for another session"), 0, -1);
    }
    WindowFd window;
    Status s = registry_->FetchWindow(c.session, req.arg, &window);
    const bool sent = Reply(c.fd, s, s.ok() ? window.size : 0, s.ok() ? window.fd : -1);
    if (window.close_after_send && window.fd >= 0) close(window.fd);
    return sent;
  }
  return Reply(c.fd, Status::InvalidArgument("unknown fd-socket request type"), 0, -1);
}

void FdServer::Close(Connection& c, bool reclaim) {
  ipc::CloseFds(&c.fds);
  if (c.fd >= 0) close(c.fd);
  c.fd = -1;
  // The lease ends with the connection: reclaim whatever the session held.
  if (reclaim && c.session != 0) registry_->ConnectionClosed(c.session);
  c.session = 0;
}

}  // namespace collectived::daemon
