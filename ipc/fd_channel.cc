#include "ipc/fd_channel.h"

#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace collectived::ipc {
namespace {

Status Errno(const std::string& what) { return Status::Unavailable(what + ": " + std::strerror(errno)); }

Status FillAddress(const std::string& path, sockaddr_un* addr) {
  if (path.size() >= sizeof(addr->sun_path)) {
    return Status::InvalidArgument("socket path longer than " + std::to_string(sizeof(addr->sun_path) - 1) +
                                   " bytes: " + path);
  }
  std::memset(addr, 0, sizeof(*addr));
  addr->sun_family = AF_UNIX;
  std::memcpy(addr->sun_path, path.c_str(), path.size());
  return Status::Ok();
}

}  // namespace

Status SendWithFd(int sock, const void* data, size_t len, int fd) {
  iovec iov{const_cast<void*>(data), len};
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int))];
  if (fd >= 0) {
    msg.msg_control = control;
    msg.msg_controllen = sizeof(control);
    cmsghdr* c = CMSG_FIRSTHDR(&msg);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN(sizeof(int));
    std::memcpy(CMSG_DATA(c), &fd, sizeof(int));
  }
  for (;;) {
    ssize_t n = sendmsg(sock, &msg, MSG_NOSIGNAL);
    if (n == static_cast<ssize_t>(len)) return Status::Ok();
    if (n < 0 && errno == EINTR) continue;
    return Errno("sendmsg");
  }
}

void CloseFds(std::vector<int>* fds) {
  for (int f : *fds) close(f);
  fds->clear();
}

Status RecvSome(int sock, void* data, size_t len, size_t* got, std::vector<int>* fds) {
  *got = 0;
  iovec iov{data, len};
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  // Room for the most descriptors one message can carry (SCM_MAX_FD, 253),
  // so a sender cannot make the kernel truncate what the daemon must close.
  union {
    cmsghdr align;
    char bytes[CMSG_SPACE(sizeof(int) * 253)];
  } control;
  msg.msg_control = control.bytes;
  msg.msg_controllen = sizeof(control.bytes);
  ssize_t n;
  do {
    n = recvmsg(sock, &msg, MSG_CMSG_CLOEXEC);
  } while (n < 0 && errno == EINTR);
  if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return Status::Ok();
  if (n < 0) return Errno("recvmsg");
  // Collect before looking at n: descriptors may come with the last bytes.
  for (cmsghdr* c = CMSG_FIRSTHDR(&msg); c != nullptr; c = CMSG_NXTHDR(&msg, c)) {
    if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS) continue;
    const size_t count = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
    for (size_t i = 0; i < count; ++i) {
      int f;
      std::memcpy(&f, CMSG_DATA(c) + i * sizeof(int), sizeof(int));
      fds->push_back(f);
    }
  }
  if (msg.msg_flags & MSG_CTRUNC) {
    CloseFds(fds);
    return Status::InvalidArgument("fd-socket message carried more descriptors than fit (control data truncated)");
  }
  if (n == 0) return Status::Unavailable("fd socket closed by peer");
  *got = static_cast<size_t>(n);
  return Status::Ok();
}

Status RecvWithFd(int sock, void* data, size_t len, int* fd) {
  *fd = -1;
  std::vector<int> fds;
  size_t got = 0;
  while (got < len) {
    size_t n = 0;
    Status s = RecvSome(sock, static_cast<char*>(data) + got, len - got, &n, &fds);
    if (s.ok() && n == 0) s = Status::Unavailable("recvmsg: no data (non-blocking socket or receive timeout)");
    if (!s.ok()) {
      CloseFds(&fds);
      return s;
    }
    got += n;
  }
  if (fds.size() > 1) {
    const size_t count = fds.size();
    CloseFds(&fds);
    return Status::InvalidArgument("fd-socket message carried " + std::to_string(count) +
                                   " descriptors; at most 1 is accepted");
  }
  if (!fds.empty()) *fd = fds[0];
  return Status::Ok();
}

Status ConnectUnix(const std::string& path, int* sock) {
  sockaddr_un addr;
  COLLECTIVED_RETURN_IF_ERROR(FillAddress(path, &addr));
  int s = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (s < 0) return Errno("socket");
  if (connect(s, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    Status st = Errno("connect " + path);
    close(s);
    return st;
  }
  *sock = s;
  return Status::Ok();
}

Status ListenUnix(const std::string& path, int* sock) {
  // Bound under a temporary name and renamed into place once listening: a
  // client that sees the path never finds it refusing connections.
  const std::string staging = path + ".new";
  sockaddr_un addr;
  COLLECTIVED_RETURN_IF_ERROR(FillAddress(staging, &addr));
  int s = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (s < 0) return Errno("socket");
  unlink(staging.c_str());
  if (bind(s, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 || listen(s, 128) != 0 ||
      rename(staging.c_str(), path.c_str()) != 0) {
    Status st = Errno("bind/listen " + path);
    close(s);
    unlink(staging.c_str());
    return st;
  }
  *sock = s;
  return Status::Ok();
}

}  // namespace collectived::ipc
