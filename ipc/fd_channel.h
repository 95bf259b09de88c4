// The fd socket: a Unix stream socket beside the gRPC socket that carries
// window file descriptors (SCM_RIGHTS), which gRPC cannot. Fixed-size
// messages. The connection is also the session's lease: when it closes (the
// client exited or crashed), the daemon reclaims everything the session held.
#ifndef COLLECTIVED_IPC_FD_CHANNEL_H_
#define COLLECTIVED_IPC_FD_CHANNEL_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "collectived/status.h"

namespace collectived::ipc {

constexpr uint32_t kFdMagic = 0x43464431;  // "CFD1"

// kDepositFd: the client hands the daemon an fd of its own (the cuMem
// allocation behind a buffer it registers, sent with the request); the reply
// names the deposit, which the registering RPC then claims.
enum class FdRequestType : uint32_t { kHello = 1, kFetchWindow = 2, kDepositFd = 3 };

struct FdRequest {
  uint32_t magic;
  FdRequestType type;
  uint64_t session_id;
  uint64_t arg;  // hello: session token; fetch: window id; deposit: unused
};

struct FdReply {
  int32_t code;  // StatusCode
  uint32_t pad;
  uint64_t bytes;  // fetch: the window's size; deposit: the deposit id
  char message[112];
};

// Sends `len` bytes and, when `fd` >= 0, the descriptor with them.
Status SendWithFd(int sock, const void* data, size_t len, int fd);
// Receives exactly `len` bytes; a descriptor, if one came, goes to *fd (else -1).
// NOT_FOUND-free contract: UNAVAILABLE on orderly close by the peer.
// Every descriptor that arrives is either handed out or closed: on any error,
// and when the message (in however many pieces it came) carried more than one
// (INVALID_ARGUMENT; the bytes are consumed, so the stream stays framed).
Status RecvWithFd(int sock, void* data, size_t len, int* fd);

// One recvmsg of at most `len` bytes: *got is what came (0 and OK when a
// non-blocking socket has nothing), and every descriptor of every control
// message is appended to *fds, which the caller then owns. A truncated
// control message (MSG_CTRUNC) closes what did arrive and is INVALID_ARGUMENT.
Status RecvSome(int sock, void* data, size_t len, size_t* got, std::vector<int>* fds);
// Closes every fd in *fds and empties it.
void CloseFds(std::vector<int>* fds);

Status ConnectUnix(const std::string& path, int* sock);
// Binds and listens, then puts the socket at `path` (replacing a stale one;
// the caller holds the lock): it appears there only once it accepts.
Status ListenUnix(const std::string& path, int* sock);

}  // namespace collectived::ipc

#endif  // COLLECTIVED_IPC_FD_CHANNEL_H_
