#include "ipc/unix_peer.h"

#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <string>

namespace collectived::ipc {

bool PeerCredentials::InGroup(uint32_t group) const {
  return gid == group || std::find(groups.begin(), groups.end(), group) != groups.end();
}

Status ReadPeerCredentials(int sock, PeerCredentials* out) {
  ucred cred{};
  socklen_t len = sizeof(cred);
  if (getsockopt(sock, SOL_SOCKET, SO_PEERCRED, &cred, &len) != 0) {
    return Status::Internal(std::string("SO_PEERCRED: ") + std::strerror(errno));
  }
  PeerCredentials c;
  c.uid = cred.uid;
  c.gid = cred.gid;
  c.pid = cred.pid;
  // SO_PEERGROUPS (Linux 4.13): ERANGE says how much room the list needs.
  std::vector<gid_t> groups(16);
  for (int attempt = 0; attempt < 4; ++attempt) {
    len = static_cast<socklen_t>(groups.size() * sizeof(gid_t));
    if (getsockopt(sock, SOL_SOCKET, SO_PEERGROUPS, groups.data(), &len) == 0) {
      groups.resize(len / sizeof(gid_t));
      c.groups.assign(groups.begin(), groups.end());
      break;
    }
    if (errno != ERANGE) break;  // an older kernel: the primary gid only
    groups.resize(len / sizeof(gid_t) + 1);
  }
  *out = std::move(c);
  return Status::Ok();
}

Status AcceptPending(int listen_fd, int* sock) {
  for (;;) {
    const int s = accept4(listen_fd, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
    if (s >= 0) {
      *sock = s;
      return Status::Ok();
    }
    if (errno == EINTR || errno == ECONNABORTED) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) return Status::Unavailable("no connection pending");
    return Status::ResourceExhausted(std::string("cannot accept: ") + std::strerror(errno));
  }
}

}  // namespace collectived::ipc
