// The daemon's descriptors and limits: fd passing that never leaks, the fd
// server's bounded connections, caps, and recovery from fd exhaustion. Each
// test starts its own daemon and watches its descriptors in /proc.
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

#include "ipc/fd_channel.h"
#include "tests/integration/daemon_harness.h"

namespace collectived {
namespace {

using testing::Daemon;

int CountFds(pid_t pid) {
  int n = 0;
  std::error_code ec;
  for (auto it = std::filesystem::directory_iterator("/proc/" + std::to_string(pid) + "/fd", ec);
       !ec && it != std::filesystem::directory_iterator(); it.increment(ec)) {
    ++n;
  }
  return n;
}

// The daemon's fd count once it settles at `want` (closes may lag a reply a
// little), or what it is after `ms`.
int FdsSettleAt(pid_t pid, int want, int ms = 3000) {
  int n = CountFds(pid);
  for (int waited = 0; n != want && waited < ms; waited += 20) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    n = CountFds(pid);
  }
  return n;
}

// The fd count once it has not changed for 300 ms (gRPC closes lazily).
int StableFdCount(pid_t pid) {
  int last = CountFds(pid);
  for (int same_ms = 0, waited = 0; same_ms < 300 && waited < 5000; waited += 50) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    const int now = CountFds(pid);
    same_ms = now == last ? same_ms + 50 : 0;
    last = now;
  }
  return last;
}

// Sends `len` bytes with every fd of `fds` in one SCM_RIGHTS message.
bool SendFds(int sock, const void* data, size_t len, const std::vector<int>& fds) {
  iovec iov{const_cast<void*>(data), len};
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  std::vector<char> control(CMSG_SPACE(sizeof(int) * fds.size()));
  if (!fds.empty()) {
    msg.msg_control = control.data();
    msg.msg_controllen = control.size();
    cmsghdr* c = CMSG_FIRSTHDR(&msg);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN(sizeof(int) * fds.size());
    std::memcpy(CMSG_DATA(c), fds.data(), sizeof(int) * fds.size());
  }
  return sendmsg(sock, &msg, MSG_NOSIGNAL) == static_cast<ssize_t>(len);
}

ipc::FdReply ReadReply(int sock) {
  ipc::FdReply reply{};
  int fd = -1;
  Status s = ipc::RecvWithFd(sock, &reply, sizeof(reply), &fd);
  EXPECT_TRUE(s.ok()) << s.ToString();
  EXPECT_EQ(fd, -1);
  if (fd >= 0) close(fd);
  return reply;
}

// Every message shape a client may send descriptors in leaves none open in
// the daemon: several fds in one message, a request split over several
// writes each with its fd, fds with a request that is refused.
TEST(DaemonFdsTest, ReceivedDescriptorsAreClosedUnlessKept) {
  Daemon d;
  ASSERT_TRUE(d.ready()) << d.Log();
  const pid_t pid = d.process().pid();
  int sock = -1;
  ASSERT_TRUE(ipc::ConnectUnix(d.socket() + ".fds", &sock).ok());
  const ipc::FdRequest deposit{ipc::kFdMagic, ipc::FdRequestType::kDepositFd, 0, 0};
  const ipc::FdRequest fetch{ipc::kFdMagic, ipc::FdRequestType::kFetchWindow, 0, 0};
  ASSERT_TRUE(SendFds(sock, &fetch, sizeof(fetch), {}));
  EXPECT_EQ(ReadReply(sock).code, static_cast<int>(StatusCode::kPermissionDenied));  // the connection is served
  const int baseline = StableFdCount(pid);
  std::vector<int> mine;
  for (int i = 0; i < 3; ++i) mine.push_back(memfd_create("leak-probe", MFD_CLOEXEC));
  const char* bytes = reinterpret_cast<const char*>(&deposit);
  for (int round = 0; round < 10; ++round) {
    // Three descriptors with one request.
    ASSERT_TRUE(SendFds(sock, &deposit, sizeof(deposit), mine));
    ipc::FdReply r = ReadReply(sock);
    EXPECT_EQ(r.code, static_cast<int>(StatusCode::kInvalidArgument)) << r.message;
    EXPECT_NE(std::string(r.message).find("3 descriptors"), std::string::npos) << r.message;
    // One request in three writes, each with a descriptor.
    for (size_t off = 0; off < sizeof(deposit); off += 8) {
      ASSERT_TRUE(SendFds(sock, bytes + off, 8, {mine[off / 8]}));
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
    r = ReadReply(sock);
    EXPECT_EQ(r.code, static_cast<int>(StatusCode::kInvalidArgument)) << r.message;
    // One descriptor with a refused request (deposit before hello), and with the wrong request type.
    ASSERT_TRUE(SendFds(sock, bytes, 8, {}));
    ASSERT_TRUE(SendFds(sock, bytes + 8, sizeof(deposit) - 8, {mine[0]}));
    EXPECT_EQ(ReadReply(sock).code, static_cast<int>(StatusCode::kPermissionDenied));
    ASSERT_TRUE(SendFds(sock, &fetch, sizeof(fetch), {mine[1]}));
    EXPECT_EQ(ReadReply(sock).code, static_cast<int>(StatusCode::kPermissionDenied));
  }
  EXPECT_LE(FdsSettleAt(pid, baseline), baseline) << "descriptors left open in the daemon";
  for (int f : mine) close(f);
  close(sock);
}

}  // namespace
}  // namespace collectived
