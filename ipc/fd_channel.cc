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

Status RecvWithFd(int sock, void* data, size_t len, int* fd) {
  *fd = -1;
  size_t got = 0;
  while (got < len) {
    iovec iov{static_cast<char*>(data) + got, len - got};
    msghdr msg{};
    msg.msg_iov = &iov;
    msg.msg_iovlen = 1;
    alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int))];
    msg.msg_control = control;
    msg.msg_controllen = sizeof(control);
    ssize_t n = recvmsg(sock, &msg, MSG_CMSG_CLOEXEC);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return Errno("recvmsg");
    if (n == 0) return Status::Unavailable("fd socket closed by peer");
    for (cmsghdr* c = CMSG_FIRSTHDR(&msg); c != nullptr; c = CMSG_NXTHDR(&msg, c)) {
      if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_RIGHTS) std::memcpy(fd, CMSG_DATA(c), sizeof(int));
    }
    got += static_cast<size_t>(n);
  }
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
  sockaddr_un addr;
  COLLECTIVED_RETURN_IF_ERROR(FillAddress(path, &addr));
  int s = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (s < 0) return Errno("socket");
  unlink(path.c_str());
  if (bind(s, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 || listen(s, 128) != 0) {
    Status st = Errno("bind/listen " + path);
    close(s);
    return st;
  }
  *sock = s;
  return Status::Ok();
}

}  // namespace collectived::ipc
