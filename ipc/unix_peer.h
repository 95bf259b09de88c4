// Who is on the other end of a Unix stream socket (the kernel's word, not the
// peer's), and accepting such sockets without ever spinning.
#ifndef COLLECTIVED_IPC_UNIX_PEER_H_
#define COLLECTIVED_IPC_UNIX_PEER_H_

#include <cstdint>
#include <vector>

#include "collectived/status.h"

namespace collectived::ipc {

// A connecting process's credentials as the kernel recorded them at
// connect(): SO_PEERCRED (uid, gid, pid) and SO_PEERGROUPS (its
// supplementary groups). A process cannot forge them.
struct PeerCredentials {
  uint32_t uid = UINT32_MAX;  // UINT32_MAX: unknown, matches nobody's session
  uint32_t gid = UINT32_MAX;
  int32_t pid = 0;
  std::vector<uint32_t> groups;
  bool InGroup(uint32_t group) const;  // primary or supplementary
};

Status ReadPeerCredentials(int sock, PeerCredentials* out);

// accept4 (non-blocking, close-on-exec) of one pending connection on a
// non-blocking listening socket. OK: *sock is the connection. UNAVAILABLE:
// none pending. RESOURCE_EXHAUSTED: out of descriptors or memory; the listen
// socket stays readable, so the caller must stop polling it for a while
// rather than retry at once (which would spin).
Status AcceptPending(int listen_fd, int* sock);

}  // namespace collectived::ipc

#endif  // COLLECTIVED_IPC_UNIX_PEER_H_
