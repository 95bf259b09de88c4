// The daemon's descriptors and limits: fd passing that never leaks, the fd
// server's bounded connections, caps, and recovery from fd exhaustion. Each
// test starts its own daemon and watches its descriptors in /proc.
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>
#include <poll.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "collectived/v1/collectived.grpc.pb.h"
#include "ipc/fd_channel.h"
#include "tests/integration/daemon_harness.h"
#include "tests/support/exact_data.h"

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

// The daemon's thread count (the fd server must not grow one per connection).
int CountThreads(pid_t pid) {
  std::ifstream f("/proc/" + std::to_string(pid) + "/status");
  std::string line;
  while (std::getline(f, line)) {
    if (line.rfind("Threads:", 0) == 0) return std::stoi(line.substr(8));
  }
  return -1;
}

// True once the daemon closed its end of `sock` (EOF), within `ms`.
bool ClosedByDaemon(int sock, int ms) {
  pollfd p{sock, POLLIN, 0};
  if (poll(&p, 1, ms) <= 0) return false;
  char byte;
  return recv(sock, &byte, 1, MSG_DONTWAIT) == 0;
}

// Raises this process's soft fd limit to the hard one (the daemon it spawns
// inherits it); the old limit comes back at the end of the scope.
class RaisedFdLimit {
 public:
  RaisedFdLimit() {
    getrlimit(RLIMIT_NOFILE, &old_);
    rlimit raised = old_;
    raised.rlim_cur = old_.rlim_max;
    setrlimit(RLIMIT_NOFILE, &raised);
  }
  ~RaisedFdLimit() { setrlimit(RLIMIT_NOFILE, &old_); }
  rlim_t limit() const { return old_.rlim_max; }

 private:
  rlimit old_{};
};

// A thousand idle fd-socket connections (and a hundred gRPC connections)
// neither stop a fresh client nor cost a thread each, and once they close
// the daemon holds what it held before.
TEST(DaemonFdsTest, AThousandIdleConnectionsAndRecovery) {
  constexpr int kIdle = 1000, kChannels = 100;
  RaisedFdLimit fd_limit;
  if (fd_limit.limit() < kIdle + kChannels + 500) GTEST_SKIP() << "RLIMIT_NOFILE hard limit " << fd_limit.limit();
  Daemon d({"--max-fd-connections", "1100", "--fd-handshake-timeout-ms", "120000"});
  ASSERT_TRUE(d.ready()) << d.Log();
  const pid_t pid = d.process().pid();
  { ASSERT_NE(d.Connect("warm-up"), nullptr); }  // what gRPC keeps after its first client
  const int baseline = StableFdCount(pid);
  std::vector<int> idle;
  for (int i = 0; i < kIdle; ++i) {
    int s = -1;
    ASSERT_TRUE(ipc::ConnectUnix(d.socket() + ".fds", &s).ok()) << i;
    idle.push_back(s);
  }
  std::vector<std::shared_ptr<grpc::Channel>> channels;
  for (int i = 0; i < kChannels; ++i) {
    grpc::ChannelArguments args;
    args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);  // a connection of its own
    channels.push_back(grpc::CreateCustomChannel("unix:" + d.socket(), grpc::InsecureChannelCredentials(), args));
    v1::GetVersionResponse v;
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
    ASSERT_TRUE(v1::CollectiveService::NewStub(channels.back())->GetVersion(&ctx, {}, &v).ok()) << i;
  }
  EXPECT_GE(FdsSettleAt(pid, baseline + kIdle + kChannels, 10000), baseline + kIdle + kChannels);
  EXPECT_LT(CountThreads(pid), 200) << "a thread per connection";
  {
    auto fresh = d.Connect("fresh");
    ASSERT_NE(fresh, nullptr);
    Buffer b;
    Status s = fresh->AllocBuffer(4096, &b);
    EXPECT_TRUE(s.ok()) << s.ToString();
  }
  for (int s : idle) close(s);
  channels.clear();
  EXPECT_EQ(FdsSettleAt(pid, baseline, 15000), baseline) << "descriptors left after the connections closed";
}

// Connections that never say hello, or stop half-way through a request, are
// closed after --fd-handshake-timeout-ms with whatever they sent; a bound
// one is a session's lease and stays however silent.
TEST(DaemonFdsTest, SilentConnectionsAreClosedAfterTheHandshakeTimeout) {
  Daemon d({"--fd-handshake-timeout-ms", "300"});
  ASSERT_TRUE(d.ready()) << d.Log();
  const pid_t pid = d.process().pid();
  auto bound = d.Connect("bound");
  ASSERT_NE(bound, nullptr);
  const int baseline = StableFdCount(pid);
  int silent = -1, half = -1, gone = -1;
  ASSERT_TRUE(ipc::ConnectUnix(d.socket() + ".fds", &silent).ok());
  ASSERT_TRUE(ipc::ConnectUnix(d.socket() + ".fds", &half).ok());
  ASSERT_TRUE(ipc::ConnectUnix(d.socket() + ".fds", &gone).ok());
  const ipc::FdRequest hello{ipc::kFdMagic, ipc::FdRequestType::kHello, 0, 0};
  std::vector<int> mine = {memfd_create("a", MFD_CLOEXEC), memfd_create("b", MFD_CLOEXEC)};
  ASSERT_TRUE(SendFds(half, &hello, 8, mine));  // a third of a request, two fds with it
  ASSERT_TRUE(SendFds(gone, &hello, 8, mine));
  close(gone);  // the peer leaves mid-request
  EXPECT_TRUE(ClosedByDaemon(silent, 3000));
  EXPECT_TRUE(ClosedByDaemon(half, 3000));
  close(silent);
  close(half);
  for (int f : mine) close(f);
  EXPECT_EQ(FdsSettleAt(pid, baseline), baseline) << "descriptors left open in the daemon";
  Buffer b;
  Status s = bound->AllocBuffer(4096, &b);  // the silent lease still holds
  EXPECT_TRUE(s.ok()) << s.ToString();
}

// Beyond --max-fd-connections a connection is answered RESOURCE_EXHAUSTED
// naming the limit; one closing makes room again.
TEST(DaemonFdsTest, ConnectionsBeyondTheCapAreRefusedNamingTheLimit) {
  Daemon d({"--max-fd-connections", "4", "--fd-handshake-timeout-ms", "60000"});
  ASSERT_TRUE(d.ready()) << d.Log();
  const pid_t pid = d.process().pid();
  const int baseline = StableFdCount(pid);
  std::vector<int> idle(4, -1);
  for (int& s : idle) ASSERT_TRUE(ipc::ConnectUnix(d.socket() + ".fds", &s).ok());
  ASSERT_EQ(FdsSettleAt(pid, baseline + 4), baseline + 4);
  int extra = -1;
  ASSERT_TRUE(ipc::ConnectUnix(d.socket() + ".fds", &extra).ok());
  ipc::FdReply r = ReadReply(extra);
  EXPECT_EQ(r.code, static_cast<int>(StatusCode::kResourceExhausted));
  EXPECT_STREQ(r.message, "--max-fd-connections (4) reached");
  close(extra);
  {
    // Through the client library: the same refusal, not a broken pipe.
    std::unique_ptr<Client> refused;
    Status s = Client::Connect({.socket_path = d.socket(), .client_name = "refused"}, &refused);
    EXPECT_EQ(s.code(), StatusCode::kResourceExhausted) << s.ToString();
    EXPECT_EQ(s.message(), "--max-fd-connections (4) reached");
  }
  close(idle.back());
  idle.pop_back();
  ASSERT_EQ(FdsSettleAt(pid, baseline + 3), baseline + 3);
  auto fresh = d.Connect("fresh");
  EXPECT_NE(fresh, nullptr);
  for (int s : idle) close(s);
}

// A non-blocking connect: a full backlog must not block the test.
int ConnectNonBlocking(const std::string& path) {
  int s = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::snprintf(addr.sun_path, sizeof(addr.sun_path), "%s", path.c_str());
  if (s >= 0 && connect(s, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    close(s);
    return -1;
  }
  return s;
}


// The daemon out of descriptors (started under a low RLIMIT_NOFILE, its fd
// socket and gRPC socket flooded with idle connections): it does not spin,
// a buffer it cannot make is RESOURCE_EXHAUSTED, and once the offenders are
// gone a new client is served and the descriptors are back to what they were.
TEST(DaemonFdsTest, FdExhaustionAndRecovery) {
  constexpr int kLimit = 300;
  RaisedFdLimit fd_limit;  // the offenders live in this process
  if (fd_limit.limit() < 2 * kLimit) GTEST_SKIP() << "RLIMIT_NOFILE hard limit " << fd_limit.limit();
  // Every descriptor a client can make the daemon hold is capped, and the
  // daemon checks at start that the caps fit its limit. So the limit is
  // lowered under the caps after start (as when something else in the
  // process took descriptors), and idle connections within the caps exhaust it.
  Daemon d({"--max-fd-connections", "100", "--max-sessions", "8", "--max-buffers", "16",
            "--max-communicators", "8", "--fd-handshake-timeout-ms", "120000"});
  ASSERT_TRUE(d.ready()) << d.Log();
  const pid_t pid = d.process().pid();
  const rlimit low{kLimit, kLimit};
  ASSERT_EQ(prlimit(pid, RLIMIT_NOFILE, &low, nullptr), 0) << std::strerror(errno);
  auto early = d.Connect("early");
  ASSERT_NE(early, nullptr);
  const int baseline = StableFdCount(pid);
  std::vector<int> offenders;
  for (int i = 0; i < 100; ++i) offenders.push_back(ConnectNonBlocking(d.socket() + ".fds"));
  for (int i = 0; i < kLimit && CountFds(pid) < kLimit - 1; ++i) {
    offenders.push_back(ConnectNonBlocking(d.socket()));
    if (i % 32 == 31) std::this_thread::sleep_for(std::chrono::milliseconds(50));  // let it accept
  }
  ASSERT_GE(FdsSettleAt(pid, kLimit, 5000), kLimit - 1) << "the daemon did not run out of descriptors";
  const int queued = ConnectNonBlocking(d.socket() + ".fds");  // waits in the backlog: accept fails
  {
    // Whether a descriptor is free at this instant is racy (gRPC closes some
    // of its own); what must never come back is INTERNAL.
    Buffer held;
    Status s = early->AllocBuffer(4096, &held);
    EXPECT_TRUE(s.ok() || s.code() == StatusCode::kResourceExhausted) << s.ToString();
  }
  const double cpu0 = testing::CpuSeconds(pid);
  std::this_thread::sleep_for(std::chrono::seconds(2));
  const double busy = testing::CpuSeconds(pid) - cpu0;
  EXPECT_LT(busy, 0.5) << "the daemon spins while out of descriptors";
  for (int f : offenders) {
    if (f >= 0) close(f);
  }
  if (queued >= 0) close(queued);
  std::unique_ptr<Client> after;
  for (int i = 0; i < 50 && after == nullptr; ++i) {  // gRPC retries its accepts once a second
    after = d.Connect("after");
    if (after == nullptr) std::this_thread::sleep_for(std::chrono::milliseconds(200));
  }
  ASSERT_NE(after, nullptr) << d.Log();
  Buffer b;
  Status s = after->AllocBuffer(4096, &b);
  EXPECT_TRUE(s.ok()) << s.ToString();
  after.reset();
  EXPECT_EQ(FdsSettleAt(pid, baseline, 15000), baseline) << "descriptors left after recovery";
}

// Idle costs nothing: 400 daemon-executed communicators (an executor thread
// each, waiting for its next op) and a client blocked in a long WaitOp on an
// op that cannot complete. Before waits slept until woken (2 ms futex slices,
// a 200 us WaitOp poll) the first cost 6 % of a core on 2 cores; the bounds
// here are loose (CI shares its cores); the figures it prints are in
// bench/RESULTS.md.
TEST(DaemonIdleTest, FourHundredIdleCommunicatorsCostAlmostNoCpu) {
  constexpr int kClients = 8, kPerClient = 50;
  Daemon d({"--max-message-bytes", "65536", "--op-timeout-ms", "30000"});
  ASSERT_TRUE(d.ready()) << d.Log();
  const pid_t pid = d.process().pid();
  std::vector<std::unique_ptr<Client>> clients;
  std::vector<std::unique_ptr<Communicator>> comms;
  for (int c = 0; c < kClients; ++c) {
    clients.push_back(d.Connect("idle-" + std::to_string(c)));
    ASSERT_NE(clients.back(), nullptr);
    for (int i = 0; i < kPerClient; ++i) {
      CommunicatorOptions o =
          testing::CommOptions("idle-" + std::to_string(c) + "-" + std::to_string(i), 1, 0, ExecutionMode::kDaemon);
      std::unique_ptr<Communicator> comm;
      ASSERT_TRUE(clients.back()->CreateCommunicator(o, &comm).ok()) << o.key;
      comms.push_back(std::move(comm));
    }
  }
  // Each executor ran an op (exact), so every thread went through its wait once.
  std::vector<Buffer> bufs(kClients);  // a communicator takes its own client's buffers
  for (int c = 0; c < kClients; ++c) ASSERT_TRUE(clients[c]->AllocBuffer(64 * 4, &bufs[c]).ok());
  for (size_t i = 0; i < comms.size(); ++i) {
    Buffer& b = bufs[i / kPerClient];
    testing::FillInput(DataType::kFloat32, ReduceOp::kSum, 0, i, b.data(), 64);
    Handle h;
    ASSERT_TRUE(comms[i]->AllReduce(b, b, 64, DataType::kFloat32, ReduceOp::kSum, &h).ok());
    ASSERT_TRUE(h.Wait().ok());
    ASSERT_EQ(testing::CountWrongAllReduce(DataType::kFloat32, ReduceOp::kSum, 1, i, b.data(), 64), 0u) << i;
  }
  // A world-2 communicator whose rank 1 never posts: rank 0's op waits in
  // the daemon, and a client waits on it through WaitOp.
  auto lone = d.Connect("lone");
  auto partner = d.Connect("partner");
  ASSERT_TRUE(lone && partner);
  std::unique_ptr<Communicator> pair0, pair1;
  std::thread join1([&] {
    CommunicatorOptions o = testing::CommOptions("idle-pair", 2, 1, ExecutionMode::kDaemon);
    EXPECT_TRUE(partner->CreateCommunicator(o, &pair1).ok());
  });
  CommunicatorOptions o = testing::CommOptions("idle-pair", 2, 0, ExecutionMode::kDaemon);
  ASSERT_TRUE(lone->CreateCommunicator(o, &pair0).ok());
  join1.join();
  Buffer lb, pb;
  ASSERT_TRUE(lone->AllocBuffer(64 * 4, &lb).ok());
  ASSERT_TRUE(partner->AllocBuffer(64 * 4, &pb).ok());
  testing::FillInput(DataType::kFloat32, ReduceOp::kSum, 0, 5, lb.data(), 64);
  testing::FillInput(DataType::kFloat32, ReduceOp::kSum, 1, 5, pb.data(), 64);
  Handle pending;
  ASSERT_TRUE(pair0->SubmitAllReduce(lb, lb, 64, DataType::kFloat32, ReduceOp::kSum, &pending).ok());
  // The daemon's CPU share over `seconds` (top -H names its threads, for who spends it).
  auto measure = [&](int seconds) {
    const double cpu0 = testing::CpuSeconds(pid);
    const auto t0 = std::chrono::steady_clock::now();
    std::this_thread::sleep_for(std::chrono::seconds(seconds));
    const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    return (testing::CpuSeconds(pid) - cpu0) / wall;
  };
  std::this_thread::sleep_for(std::chrono::milliseconds(2000));  // the sleep slices have grown
  const double idle = measure(4);
  std::printf("idle daemon: %.2f %% of a core (401 communicators, %d threads)\n", 100 * idle, CountThreads(pid));
  EXPECT_LT(idle, 0.05);

  auto stub = v1::CollectiveService::NewStub(grpc::CreateChannel("unix:" + d.socket(), grpc::InsecureChannelCredentials()));
  std::thread waiter([&] {
    v1::WaitOpRequest req;
    req.set_session_id(lone->session_id());
    req.set_comm_id(pair0->id());
    req.set_op_index(0);
    req.set_timeout_ms(4000);
    v1::WaitOpResponse resp;
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(20));
    ctx.AddMetadata(kSessionTokenMetadata, std::to_string(lone->session_token()));
    grpc::Status s = stub->WaitOp(&ctx, req, &resp);
    EXPECT_TRUE(s.ok()) << s.error_message();
    EXPECT_FALSE(resp.done());  // answered at its timeout, not before
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  const double waiting = measure(3);
  std::printf("idle daemon with a WaitOp pending: %.2f %% of a core\n", 100 * waiting);
  EXPECT_LT(waiting, 0.10);
  waiter.join();
  // Rank 1 posts at last: rank 0's executor, asleep in its barrier for
  // seconds, is woken by it and both get the exact sum.
  Handle h1;
  ASSERT_TRUE(pair1->SubmitAllReduce(pb, pb, 64, DataType::kFloat32, ReduceOp::kSum, &h1).ok());
  EXPECT_TRUE(pending.Wait().ok());
  EXPECT_TRUE(h1.Wait().ok());
  EXPECT_EQ(testing::CountWrongAllReduce(DataType::kFloat32, ReduceOp::kSum, 2, 5, lb.data(), 64), 0u);
  EXPECT_EQ(testing::CountWrongAllReduce(DataType::kFloat32, ReduceOp::kSum, 2, 5, pb.data(), 64), 0u);
}

}  // namespace
}  // namespace collectived
