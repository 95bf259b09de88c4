#include "daemon/fd_server.h"

#include <poll.h>
#include <spdlog/spdlog.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>

#include "ipc/fd_channel.h"

namespace collectived::daemon {
namespace {

void Reply(int sock, const Status& s, uint64_t bytes, int fd) {
  ipc::FdReply r{};
  r.code = static_cast<int32_t>(s.code());
  r.bytes = bytes;
  std::snprintf(r.message, sizeof(r.message), "%s", s.message().c_str());
  ipc::SendWithFd(sock, &r, sizeof(r), fd);
}

}  // namespace

FdServer::~FdServer() { Stop(); }

Status FdServer::Start() {
  COLLECTIVED_RETURN_IF_ERROR(ipc::ListenUnix(path_, &listen_fd_));
  chmod(path_.c_str(), 0660);
  accept_thread_ = std::thread([this] { AcceptLoop(); });
  return Status::Ok();
}

void FdServer::Stop() {
  if (stop_.exchange(true)) return;
  if (accept_thread_.joinable()) accept_thread_.join();
  if (listen_fd_ >= 0) close(listen_fd_);
  unlink(path_.c_str());
  std::list<Connection> conns;
  {
    std::lock_guard<std::mutex> lock(mu_);
    conns.swap(connections_);
  }
  for (auto& c : conns) shutdown(c.fd, SHUT_RDWR);
  for (auto& c : conns) {
    c.thread.join();
    close(c.fd);
  }
}

void FdServer::AcceptLoop() {
  while (!stop_.load()) {
    pollfd p{listen_fd_, POLLIN, 0};
    if (poll(&p, 1, 100) <= 0) continue;
    int sock = accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
    if (sock < 0) continue;
    std::lock_guard<std::mutex> lock(mu_);
    for (auto it = connections_.begin(); it != connections_.end();) {  // reap finished connections
      if (it->finished->load()) {
        it->thread.join();
        close(it->fd);
        it = connections_.erase(it);
      } else {
        ++it;
      }
    }
    auto finished = std::make_shared<std::atomic<bool>>(false);
    connections_.push_back(Connection{sock, finished, std::thread([this, sock, finished] {
                                        Serve(sock);
                                        finished->store(true);
                                      })});
  }
}

void FdServer::Serve(int sock) {
  uint64_t session = 0;
  for (;;) {
    ipc::FdRequest req{};
    int stray = -1;
    Status got = ipc::RecvWithFd(sock, &req, sizeof(req), &stray);  // closes every fd it does not hand out
    if (got.code() == StatusCode::kInvalidArgument) {  // the request was read whole: the stream is still framed
      Reply(sock, got, 0, -1);
      continue;
    }
    if (!got.ok()) break;
    if (req.magic == ipc::kFdMagic && req.type == ipc::FdRequestType::kDepositFd) {
      if (session == 0 || req.session_id != session) {
        if (stray >= 0) close(stray);
        Reply(sock, Status::PermissionDenied("deposit before hello, or for another session"), 0, -1);
        continue;
      }
      if (stray < 0) {
        Reply(sock, Status::InvalidArgument("a deposit carries an fd"), 0, -1);
        continue;
      }
      uint64_t deposit = 0;
      Status s = registry_->DepositFd(session, stray, &deposit);  // takes the fd
      Reply(sock, s, deposit, -1);
      continue;
    }
    if (stray >= 0) close(stray);
    if (req.magic != ipc::kFdMagic) {
      Reply(sock, Status::InvalidArgument("bad fd-socket request"), 0, -1);
      break;
    }
    if (req.type == ipc::FdRequestType::kHello) {
      if (session != 0) {
        Reply(sock, Status::FailedPrecondition("connection already bound"), 0, -1);
        continue;
      }
      Status s = registry_->BindConnection(req.session_id, req.arg);
      Reply(sock, s, 0, -1);
      if (!s.ok()) break;
      session = req.session_id;
    } else if (req.type == ipc::FdRequestType::kFetchWindow) {
      if (session == 0 || req.session_id != session) {
        Reply(sock, Status::PermissionDenied("fetch before hello, or for another session"), 0, -1);
        continue;
      }
      WindowFd window;
      Status s = registry_->FetchWindow(session, req.arg, &window);
      Reply(sock, s, s.ok() ? window.size : 0, s.ok() ? window.fd : -1);
      if (window.close_after_send && window.fd >= 0) close(window.fd);
    } else {
      Reply(sock, Status::InvalidArgument("unknown fd-socket request type"), 0, -1);
    }
  }
  // The lease ends with the connection: reclaim whatever the session held.
  if (session != 0 && !stop_.load()) registry_->ConnectionClosed(session);
  shutdown(sock, SHUT_RDWR);  // closed by Stop() or the reaper, never reused under them
}

}  // namespace collectived::daemon
