// Serves the fd socket: binds each connection to a session (its lease) and
// hands out window fds with SCM_RIGHTS. A closed connection reclaims the session.
#ifndef COLLECTIVED_DAEMON_FD_SERVER_H_
#define COLLECTIVED_DAEMON_FD_SERVER_H_

#include <atomic>
#include <list>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "collectived/status.h"
#include "daemon/registry.h"

namespace collectived::daemon {

class FdServer {
 public:
  FdServer(Registry* registry, std::string path) : registry_(registry), path_(std::move(path)) {}
  ~FdServer();
  Status Start();
  void Stop();
  const std::string& path() const { return path_; }

 private:
  void AcceptLoop();
  void Serve(int sock);

  Registry* registry_;
  std::string path_;
  int listen_fd_ = -1;
  std::atomic<bool> stop_{false};
  std::thread accept_thread_;
  std::mutex mu_;
  struct Connection {
    int fd;
    std::shared_ptr<std::atomic<bool>> finished;
    std::thread thread;
  };
  std::list<Connection> connections_;
};

}  // namespace collectived::daemon

#endif  // COLLECTIVED_DAEMON_FD_SERVER_H_
