// Serves the fd socket: binds each connection to a session (its lease) and
// hands out window fds with SCM_RIGHTS. A closed connection reclaims the session.
// One thread polls every connection (requests are small and answered at once),
// so a thousand idle clients cost descriptors, not threads.
#ifndef COLLECTIVED_DAEMON_FD_SERVER_H_
#define COLLECTIVED_DAEMON_FD_SERVER_H_

#include <atomic>
#include <cstdint>
#include <string>
#include <thread>
#include <vector>

#include "collectived/status.h"
#include "daemon/registry.h"
#include "ipc/fd_channel.h"
#include "ipc/unix_peer.h"

namespace collectived::daemon {

// Limits from registry->config(): max_fd_connections (more are answered
// RESOURCE_EXHAUSTED and closed) and fd_handshake_timeout_ms (a connection
// not bound to a session within it, or stalled inside a request, is closed;
// a bound one is the session's lease and may stay silent).
class FdServer {
 public:
  FdServer(Registry* registry, std::string path) : registry_(registry), path_(std::move(path)) {}
  ~FdServer();
  Status Start();
  void Stop();
  const std::string& path() const { return path_; }

 private:
  struct Connection {
    int fd = -1;
    uint64_t session = 0;  // 0 until hello
    ipc::PeerCredentials peer;  // read at accept: hello binds only its owner's session
    int64_t accepted_ns = 0;
    int64_t partial_since_ns = 0;  // a request begun but not complete: since when
    size_t got = 0;
    ipc::FdRequest req{};
    std::vector<int> fds;  // received with the request so far
  };

  void Loop();
  // Accepts what is pending; on fd exhaustion pauses accepting (no spinning).
  void AcceptPending(int64_t now_ns, int64_t* paused_until_ns);
  // Reads and answers what `c` sent; false: close it.
  bool OnReadable(Connection& c, int64_t now_ns);
  bool Handle(Connection& c, int fd);
  void Close(Connection& c, bool reclaim);

  Registry* registry_;
  std::string path_;
  int listen_fd_ = -1;
  std::atomic<bool> stop_{false};
  std::thread thread_;
  std::vector<Connection> connections_;  // the loop thread's only
};

}  // namespace collectived::daemon

#endif  // COLLECTIVED_DAEMON_FD_SERVER_H_
