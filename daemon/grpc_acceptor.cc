#include "daemon/grpc_acceptor.h"

#include <pthread.h>
#include <grpcpp/server.h>
#include <grpcpp/server_posix.h>
#include <poll.h>
#include <spdlog/spdlog.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fcntl.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>

#include "ipc/fd_channel.h"
#include "ring/wait.h"

namespace collectived::daemon {
namespace {

constexpr int kPollMs = 100;                     // also how soon Stop() is noticed
constexpr int64_t kAcceptPauseNs = 100'000'000;  // out of fds: retry accepting after this
constexpr int64_t kLogEveryNs = 5'000'000'000;
constexpr int64_t kTombstoneNs = 5'000'000'000;  // calls look their caller up as they start: far longer

}  // namespace

GrpcAcceptor::GrpcAcceptor(std::string path, Limits limits) : path_(std::move(path)), limits_(std::move(limits)) {}

std::string GrpcAcceptor::Refusal(const ipc::PeerCredentials& peer, bool* admin_reserve) const {
  uint32_t all = 0, same_uid = 0, reserve = 0;
  for (const Watch& w : watches_) {
    if (w.admin_reserve) {
      ++reserve;
      continue;
    }
    ++all;
    same_uid += w.uid == peer.uid;
  }
  std::string why;
  if (all >= limits_.max_connections) {
    why = "--max-grpc-connections (" + std::to_string(limits_.max_connections) + ") reached";
  } else if (same_uid >= limits_.max_connections_per_uid) {
    why = "--max-grpc-connections-per-uid (" + std::to_string(limits_.max_connections_per_uid) + ") reached for uid " +
          std::to_string(peer.uid);
  }
  *admin_reserve = false;
  if (!why.empty() && reserve < kAdminReserve && limits_.is_admin && limits_.is_admin(peer)) {
    *admin_reserve = true;
    return "";
  }
  return why;
}

GrpcAcceptor::~GrpcAcceptor() { Stop(); }

Status GrpcAcceptor::Listen() {
  COLLECTIVED_RETURN_IF_ERROR(ipc::ListenUnix(path_, &listen_fd_));
  chmod(path_.c_str(), 0660);
  fcntl(listen_fd_, F_SETFL, fcntl(listen_fd_, F_GETFL) | O_NONBLOCK);
  return Status::Ok();
}

void GrpcAcceptor::Start(grpc::Server* server) {
  server_ = server;
  thread_ = std::thread([this] { Loop(); });
}

void GrpcAcceptor::Stop() {
  if (stop_.exchange(true)) return;
  if (thread_.joinable()) thread_.join();
  for (const Watch& w : watches_) close(w.dup_fd);
  watches_.clear();
  if (listen_fd_ >= 0) close(listen_fd_);
  listen_fd_ = -1;
}

bool GrpcAcceptor::Lookup(const std::string& peer, ipc::PeerCredentials* out) const {
  if (peer.rfind("fd:", 0) != 0) return false;
  char* end = nullptr;
  const long fd = std::strtol(peer.c_str() + 3, &end, 10);
  if (end == peer.c_str() + 3 || *end != '\0') return false;
  MutexLock lock(&mu_);
  auto it = by_fd_.find(static_cast<int>(fd));
  // Unread credentials (uid unknown) must not match each other: refused.
  if (it == by_fd_.end() || it->second.closed_ns != 0 || it->second.peer.uid == UINT32_MAX) return false;
  *out = it->second.peer;
  return true;
}

size_t GrpcAcceptor::connections() const {
  MutexLock lock(&mu_);
  size_t open = 0;
  for (const auto& [fd, e] : by_fd_) open += e.closed_ns == 0;
  return open;
}

int GrpcAcceptor::UnusedNumber(int sock) {
  MutexLock lock(&mu_);
  while (by_fd_.count(sock) != 0) {
    const int moved = fcntl(sock, F_DUPFD_CLOEXEC, sock + 1);
    close(sock);
    if (moved < 0) return -1;
    sock = moved;
  }
  return sock;
}

void GrpcAcceptor::Loop() {
  pthread_setname_np(pthread_self(), "cd-grpc-accept");
  int64_t paused_until_ns = 0;
  std::vector<pollfd> polled;
  while (!stop_.load()) {
    const bool accepting = ring::NowNs() >= paused_until_ns;
    polled.assign(1, pollfd{listen_fd_, static_cast<short>(accepting ? POLLIN : 0), 0});
    // No events asked: poll reports POLLHUP (and POLLERR) regardless, and
    // never the data gRPC itself reads.
    for (const Watch& w : watches_) polled.push_back(pollfd{w.dup_fd, 0, 0});
    if (poll(polled.data(), polled.size(), kPollMs) < 0 && errno != EINTR) {
      spdlog::error("gRPC socket: poll: {}", std::strerror(errno));
      std::this_thread::sleep_for(std::chrono::milliseconds(kPollMs));
      continue;
    }
    std::vector<Watch> kept;
    kept.reserve(watches_.size());
    for (size_t i = 0; i < watches_.size(); ++i) {
      const Watch& w = watches_[i];
      if ((polled[i + 1].revents & (POLLHUP | POLLERR | POLLNVAL)) == 0) {
        kept.push_back(w);
        continue;
      }
      close(w.dup_fd);
      MutexLock lock(&mu_);
      auto it = by_fd_.find(w.grpc_fd);
      if (it != by_fd_.end() && it->second.serial == w.serial) it->second.closed_ns = ring::NowNs();
    }
    watches_.swap(kept);
    {
      const int64_t now = ring::NowNs();
      MutexLock lock(&mu_);
      for (auto it = by_fd_.begin(); it != by_fd_.end();) {
        it = it->second.closed_ns != 0 && now - it->second.closed_ns > kTombstoneNs ? by_fd_.erase(it) : std::next(it);
      }
    }
    if (accepting && (polled[0].revents & POLLIN)) AcceptPending(ring::NowNs(), &paused_until_ns);
  }
}

void GrpcAcceptor::AcceptPending(int64_t now_ns, int64_t* paused_until_ns) {
  static int64_t last_cap_log_ns = 0, last_fd_log_ns = 0;
  for (;;) {
    int sock = -1;
    Status s = ipc::AcceptPending(listen_fd_, &sock);
    if (s.code() == StatusCode::kUnavailable) return;
    int watch = -1;
    if (s.ok()) {
      // A number still in the map belonged to a connection gRPC closed (maybe
      // with a call still running under it): never reuse it for another.
      sock = UnusedNumber(sock);
      if (sock < 0) s = Status::ResourceExhausted(std::string("cannot move a connection: ") + std::strerror(errno));
    }
    if (s.ok()) {
      watch = fcntl(sock, F_DUPFD_CLOEXEC, 0);
      if (watch < 0) {
        close(sock);
        s = Status::ResourceExhausted(std::string("cannot watch a connection: ") + std::strerror(errno));
      }
    }
    if (!s.ok()) {
      if (now_ns - last_fd_log_ns > kLogEveryNs) {
        spdlog::warn("gRPC socket: {}; pausing accepts for {} ms", s.message(), kAcceptPauseNs / 1000000);
        last_fd_log_ns = now_ns;
      }
      *paused_until_ns = now_ns + kAcceptPauseNs;
      return;
    }
    Entry e;
    e.serial = next_serial_++;
    if (Status c = ipc::ReadPeerCredentials(sock, &e.peer); !c.ok()) {
      spdlog::warn("gRPC socket: {}; the connection's calls will be refused", c.message());
    }
    bool admin_reserve = false;
    if (const std::string why = Refusal(e.peer, &admin_reserve); !why.empty()) {
      if (now_ns - last_cap_log_ns > kLogEveryNs) {
        spdlog::warn("gRPC socket: {}; closing new connections", why);
        last_cap_log_ns = now_ns;
      }
      close(watch);
      close(sock);
      continue;
    }
    {
      MutexLock lock(&mu_);
      by_fd_[sock] = e;  // before gRPC sees the connection: its first call finds it
    }
    watches_.push_back(Watch{watch, sock, e.serial, e.peer.uid, admin_reserve});
    grpc::AddInsecureChannelFromFd(server_, sock);  // gRPC owns sock now
  }
}

}  // namespace collectived::daemon
