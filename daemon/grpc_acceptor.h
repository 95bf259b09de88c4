// Accepts the gRPC socket's connections itself, so that every call's caller
// is known: each connection's credentials are read at accept (SO_PEERCRED)
// and the connection is then handed to the gRPC server as a channel of its
// own (AddInsecureChannelFromFd), whose calls report peer() "fd:N". It also
// caps connections at once, and pauses accepting when out of descriptors
// instead of spinning.
#ifndef COLLECTIVED_DAEMON_GRPC_ACCEPTOR_H_
#define COLLECTIVED_DAEMON_GRPC_ACCEPTOR_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "base/mutex.h"
#include "base/thread_annotations.h"
#include "collectived/status.h"
#include "daemon/daemon_config.h"
#include "ipc/unix_peer.h"

namespace grpc {
class Server;
}

namespace collectived::daemon {

class GrpcAcceptor {
 public:
  struct Limits {
    uint32_t max_connections = 1024;         // all uids together
    uint32_t max_connections_per_uid = 256;  // one uid (no user can take every slot)
    // Administrators are counted against neither cap while fewer than
    // kAdminReserve of their connections are open beyond them: whoever may
    // Drain can always connect.
    std::function<bool(const ipc::PeerCredentials&)> is_admin;
  };
  static constexpr uint32_t kAdminReserve = kAdminConnectionReserve;
  // Connections past a cap are closed at accept (the client sees
  // UNAVAILABLE), until one of the open ones ends.
  GrpcAcceptor(std::string path, Limits limits);
  ~GrpcAcceptor();
  // Binds and listens (mode 0660; the caller holds the socket's lock).
  Status Listen();
  // Serves accepted connections to `server` (built with no listening port)
  // from a thread of its own, until Stop().
  void Start(grpc::Server* server);
  void Stop();

  // The credentials of the connection a call came on, by the call's
  // ServerContext::peer(). False for a peer this acceptor did not accept.
  bool Lookup(const std::string& peer, ipc::PeerCredentials* out) const COLLECTIVED_EXCLUDES(mu_);
  size_t connections() const COLLECTIVED_EXCLUDES(mu_);

 private:
  // gRPC owns the accepted fd; the acceptor keeps a duplicate of it only to
  // learn when the connection ends (POLLHUP once the peer closes it or gRPC
  // shuts it down), since gRPC reports no such event.
  struct Watch {
    int dup_fd;
    int grpc_fd;
    uint64_t serial;
    uint32_t uid;
    bool admin_reserve;  // admitted past a cap as an administrator
  };
  // The reason to refuse a new connection of `peer`, or "" to accept it.
  std::string Refusal(const ipc::PeerCredentials& peer, bool* admin_reserve) const;
  // A connection's credentials by the number gRPC knows it by. The number
  // stays reserved (a tombstone, closed_ns set) for a while after the
  // connection ended, since a call of it may still be running: a new
  // connection is never handed to gRPC under a number still in this map.
  struct Entry {
    ipc::PeerCredentials peer;
    uint64_t serial;       // fd numbers are reused: an entry is closed only by its own connection
    int64_t closed_ns = 0;  // when its connection ended; 0: open
  };

  void Loop();
  void AcceptPending(int64_t now_ns, int64_t* paused_until_ns);
  // `sock` under a number no entry holds (moved with F_DUPFD if needed).
  int UnusedNumber(int sock) COLLECTIVED_EXCLUDES(mu_);

  const std::string path_;
  const Limits limits_;
  int listen_fd_ = -1;
  grpc::Server* server_ = nullptr;
  std::atomic<bool> stop_{false};
  std::thread thread_;
  std::vector<Watch> watches_;  // the loop thread's only
  uint64_t next_serial_ = 1;    // the loop thread's only
  mutable Mutex mu_;
  std::map<int, Entry> by_fd_ COLLECTIVED_GUARDED_BY(mu_);
};

}  // namespace collectived::daemon

#endif  // COLLECTIVED_DAEMON_GRPC_ACCEPTOR_H_
