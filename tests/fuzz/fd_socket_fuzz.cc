// libFuzzer target: the fd socket (ipc/fd_channel.h) as hostile local
// clients could use it. A real FdServer over a real registry listens on a
// socket in a temp dir; each input drives up to four connections: raw bytes
// in any framing (split requests, garbage, several requests at once), with
// or without a descriptor attached (SCM_RIGHTS), well-formed requests whose
// fields come from the input (a real session and token put in where the
// input says so), reads of the replies, closes at any point.
//
// Checked per input, beyond "no crash, no sanitizer report": every reply is
// framed (a whole FdReply, a known status code, a terminated message);
// afterwards a fresh session still binds a connection and fetches its
// buffer's window; and the process holds no more descriptors than before
// the input (every descriptor a client sends is handed on or closed).
#include <dirent.h>
#include <fcntl.h>
#include <fuzzer/FuzzedDataProvider.h>
#include <poll.h>
#include <spdlog/spdlog.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <thread>

#include "daemon/fd_server.h"
#include "daemon/registry.h"
#include "ipc/fd_channel.h"
#include "tests/fuzz/fuzz_support.h"

namespace collectived::fuzz {
namespace {

struct Daemon {
  std::string dir;
  std::unique_ptr<daemon::Registry> registry;
  std::unique_ptr<daemon::FdServer> server;
  ipc::PeerCredentials self;
};
Daemon* g = nullptr;

[[noreturn]] void Fail(const std::string& what) {
  std::fprintf(stderr, "fd_socket_fuzz: %s\n", what.c_str());
  std::abort();
}

// The descriptors the daemon side of this process could leak: sockets and
// memfds (buffers, and every descriptor the input sends, which is a named
// memfd). Pipes and files are left out: the sanitizer runtime keeps pipes to
// its symbolizer open. *names: what each is, for the report.
int DaemonFds(std::string* names = nullptr) {
  int n = 0;
  DIR* d = opendir("/proc/self/fd");
  while (dirent* e = d != nullptr ? readdir(d) : nullptr) {
    if (e->d_name[0] == '.') continue;
    char target[256] = {};
    const std::string link = std::string("/proc/self/fd/") + e->d_name;
    (void)readlink(link.c_str(), target, sizeof(target) - 1);
    const std::string t = target;
    if (t.rfind("socket:", 0) != 0 && t.find("collectived-") == std::string::npos) continue;
    ++n;
    if (names != nullptr) *names += " " + std::string(e->d_name) + "=" + t;
  }
  if (d != nullptr) closedir(d);
  return n;
}

// A descriptor to send the daemon, named so that a leaked one says which
// step sent it.
int SentFd(const char* why) {
  static int n = 0;
  return memfd_create(("collectived-fuzz-sent-" + std::string(why) + "-" + std::to_string(n++)).c_str(), MFD_CLOEXEC);
}

// Reads whatever replies arrived on `sock` within `wait_ms`, checking each.
// False when the daemon closed the connection.
bool DrainReplies(int sock, int wait_ms) {
  for (;;) {
    pollfd p{sock, POLLIN, 0};
    if (poll(&p, 1, wait_ms) <= 0) return true;
    ipc::FdReply r{};
    int fd = -1;
    Status s = ipc::RecvWithFd(sock, &r, sizeof(r), &fd);
    if (fd >= 0) close(fd);
    if (!s.ok()) return false;  // closed (or reset) by the daemon
    if (r.code < 0 || r.code > static_cast<int32_t>(StatusCode::kUnauthenticated)) {
      Fail("a reply with status code " + std::to_string(r.code));
    }
    if (std::memchr(r.message, '\0', sizeof(r.message)) == nullptr) Fail("an unterminated reply message");
    wait_ms = 0;
  }
}

Status Request(int sock, ipc::FdRequestType type, uint64_t session, uint64_t arg, ipc::FdReply* reply, int* fd) {
  ipc::FdRequest req{ipc::kFdMagic, type, session, arg};
  // A daemon at its connection cap answers at accept and closes: the send
  // may fail (EPIPE), but the answer is there to read, as the client reads it.
  Status sent = ipc::SendWithFd(sock, &req, sizeof(req), -1);
  Status got = ipc::RecvWithFd(sock, reply, sizeof(*reply), fd);
  return got.ok() || sent.ok() ? got : sent;
}

// A new session binds a connection and fetches its buffer's window.
void ExpectServed() {
  uint64_t session = 0, token = 0;
  if (!g->registry->Attach("served", static_cast<uint32_t>(getpid()), g->self, &session, &token).ok()) Fail("attach");
  daemon::BufferInfo buf;
  if (!g->registry->AllocBuffer(session, 4096, &buf).ok()) Fail("alloc");
  // The input's connections may still hold the daemon's slots (it accepts
  // what waits in the backlog before it sees those peers gone): a client
  // refused for the cap tries again, as the client library would.
  int sock = -1;
  ipc::FdReply reply{};
  int fd = -1;
  Status s;
  for (int attempt = 0; attempt < 200; ++attempt) {
    if (!ipc::ConnectUnix(g->server->path(), &sock).ok()) Fail("connect");
    s = Request(sock, ipc::FdRequestType::kHello, session, token, &reply, &fd);
    if (!s.ok() || reply.code != static_cast<int32_t>(StatusCode::kResourceExhausted)) break;
    close(sock);
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  if (!s.ok() || reply.code != 0) Fail(std::string("hello after the input: ") + s.ToString() + " " + reply.message);
  s = Request(sock, ipc::FdRequestType::kFetchWindow, session, buf.window_id, &reply, &fd);
  if (!s.ok() || reply.code != 0 || fd < 0 || reply.bytes < 4096) {
    Fail(std::string("fetch after the input: ") + s.ToString() + " " + reply.message);
  }
  close(fd);
  close(sock);  // ends the lease: the daemon reclaims the session
}

}  // namespace
}  // namespace collectived::fuzz

using namespace collectived;        // NOLINT: a fuzz target's two entry points
using namespace collectived::fuzz;  // NOLINT

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  spdlog::set_level(spdlog::level::off);
  WriteSeedsIfAsked("fd_socket", [](std::vector<std::string>* seeds) {
    // Starting points only: FuzzedDataProvider takes integers from the
    // input's end and bytes from its front, so a seed's bytes do not map one
    // to one onto steps; coverage grows from them (docs/proof.md).
    seeds->push_back(std::string("\x00\x02\x00\x01\x03\x00\x00\x00\x00\x00\x00\x00\x00\x04\x00", 15));
    seeds->push_back(std::string("\x00\x01\x00\x10\x00hello, garbage!!\x04\x00", 21));
    seeds->push_back(std::string("\x00\x02\x00\x01\x03\x00\x00\x00\x00\x00\x00\x00\x00\x02\x00\x03\x03", 17) +
                     std::string(8, '\x01') + "\x04\x00");
    seeds->push_back(std::string("\x00\x01\x00\x05\x01\x43\x46\x44\x31\x01\x03\x00", 12));
  });
  g = new Daemon;
  char tmpl[] = "/tmp/collectived-fuzz-XXXXXX";
  if (mkdtemp(tmpl) == nullptr) Fail("mkdtemp");
  g->dir = tmpl;
  daemon::DaemonConfig c;
  c.backend = daemon::Backend::kHost;
  c.max_message_bytes = 4096;
  c.fd_handshake_timeout_ms = 50;
  c.max_fd_connections = 8;
  g->registry = std::make_unique<daemon::Registry>(c);
  g->self = SelfCredentials();
  g->server = std::make_unique<daemon::FdServer>(g->registry.get(), g->dir + "/fd.sock");
  if (!g->server->Start().ok()) Fail("fd server start");
  std::atexit([] {
    g->server->Stop();
    unlink((g->dir + "/fd.sock").c_str());
    rmdir(g->dir.c_str());
  });
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static std::string baseline_names;
  static const int baseline = DaemonFds(&baseline_names);  // the listening socket
  uint64_t session = 0, token = 0;
  if (!g->registry->Attach("fuzz", static_cast<uint32_t>(getpid()), g->self, &session, &token).ok()) Fail("attach");
  FuzzedDataProvider in(data, size);
  int socks[4] = {-1, -1, -1, -1};
  for (int steps = 0; steps < 32 && in.remaining_bytes() > 0; ++steps) {
    const uint8_t kind = in.ConsumeIntegral<uint8_t>() % 6;
    int& sock = socks[in.ConsumeIntegral<uint8_t>() % 4];
    if (kind == 0) {  // connect (again)
      if (sock >= 0) close(sock);
      sock = -1;
      (void)ipc::ConnectUnix(g->server->path(), &sock);
      continue;
    }
    if (sock < 0) continue;
    switch (kind) {
      case 1: {  // raw bytes, maybe with a descriptor
        const bool with_fd = in.ConsumeBool();
        const std::string b = in.ConsumeBytesAsString(in.ConsumeIntegralInRange<size_t>(1, 96));
        const int fd = with_fd ? SentFd("raw") : -1;
        (void)ipc::SendWithFd(sock, b.data(), b.size(), fd);
        if (fd >= 0) close(fd);
        break;
      }
      case 2: {  // a request: type, which session, which arg; maybe a descriptor
        const uint8_t t = in.ConsumeIntegral<uint8_t>();
        const uint8_t who = in.ConsumeIntegral<uint8_t>();
        ipc::FdRequest req{};
        req.magic = (who & 0x80) ? in.ConsumeIntegral<uint32_t>() : ipc::kFdMagic;
        req.type = static_cast<ipc::FdRequestType>(t % 5);
        req.session_id = (who & 1) ? session : in.ConsumeIntegral<uint64_t>();
        req.arg = (who & 2) ? token : in.ConsumeIntegral<uint64_t>();
        const int fd = (who & 4) ? SentFd(("request-type-" + std::to_string(t % 5)).c_str()) : -1;
        (void)ipc::SendWithFd(sock, &req, sizeof(req), fd);
        if (fd >= 0) close(fd);
        break;
      }
      case 3: {  // two descriptors in one message (the daemon takes at most one)
        int fds[2] = {SentFd("pair"), SentFd("pair")};
        char b = 0;
        iovec iov{&b, 1};
        alignas(cmsghdr) char control[CMSG_SPACE(2 * sizeof(int))] = {};
        msghdr msg{};
        msg.msg_iov = &iov;
        msg.msg_iovlen = 1;
        msg.msg_control = control;
        msg.msg_controllen = sizeof(control);
        cmsghdr* cm = CMSG_FIRSTHDR(&msg);
        cm->cmsg_level = SOL_SOCKET;
        cm->cmsg_type = SCM_RIGHTS;
        cm->cmsg_len = CMSG_LEN(2 * sizeof(int));
        std::memcpy(CMSG_DATA(cm), fds, sizeof(fds));
        (void)sendmsg(sock, &msg, MSG_NOSIGNAL);
        close(fds[0]);
        close(fds[1]);
        break;
      }
      case 4:
        if (!DrainReplies(sock, in.ConsumeIntegralInRange(0, 5))) {
          close(sock);
          sock = -1;
        }
        break;
      case 5:
        close(sock);
        sock = -1;
        break;
    }
  }
  for (int& s : socks) {
    if (s >= 0) {
      (void)DrainReplies(s, 1);
      close(s);
    }
  }
  (void)g->registry->Detach(session);  // unless its connection's close already reclaimed it
  if (NegativeControl()) (void)SentFd("control");  // the control: a descriptor left open
  ExpectServed();
  // The daemon closes what it held of these connections within its poll period.
  int open_now = DaemonFds();
  for (int i = 0; i < 100 && open_now > baseline; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
    open_now = DaemonFds();
  }
  if (open_now > baseline) {
    std::string names;
    DaemonFds(&names);
    Fail("descriptors leaked: " + std::to_string(open_now) + " open, " + std::to_string(baseline) +
         " before (" + baseline_names + "):" + names);
  }
  return 0;
}
