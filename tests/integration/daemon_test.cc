// Integration tests: a real collectived, clients as threads (each its own
// session) or as separate processes.
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include <sys/mman.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <thread>

#include "collectived/v1/collectived.grpc.pb.h"
#include "ipc/fd_channel.h"
#include "ring/segment_layout.h"
#include "tests/integration/daemon_harness.h"
#include "tests/support/exact_data.h"

namespace collectived {
namespace {

using testing::Daemon;

// Runs fn(rank) on `n` threads, each with its own client session.
void RunRanks(uint32_t n, const std::function<void(uint32_t)>& fn) {
  std::vector<std::thread> threads;
  for (uint32_t r = 0; r < n; ++r) threads.emplace_back(fn, r);
  for (auto& t : threads) t.join();
}

std::unique_ptr<Communicator> Join(Client& c, const std::string& key, uint32_t world, uint32_t rank,
                                   ExecutionMode mode = ExecutionMode::kClient, Status* status = nullptr) {
  CommunicatorOptions o;
  o.key = key;
  o.world_size = world;
  o.rank = rank;
  o.mode = mode;
  o.join_timeout_ms = 10000;
  std::unique_ptr<Communicator> comm;
  Status s = c.CreateCommunicator(o, &comm);
  if (status) *status = s;
  EXPECT_TRUE(status != nullptr || s.ok()) << s.ToString();
  return comm;
}

std::unique_ptr<v1::CollectiveService::Stub> RawStub(const Daemon& d) {
  return v1::CollectiveService::NewStub(
      grpc::CreateChannel("unix:" + d.socket(), grpc::InsecureChannelCredentials()));
}

// `token`: the session's (what the client library sends); 0: none.
std::unique_ptr<grpc::ClientContext> Ctx(uint64_t token = 0) {
  auto c = std::make_unique<grpc::ClientContext>();
  c->set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
  if (token != 0) c->AddMetadata(kSessionTokenMetadata, std::to_string(token));
  return c;
}

v1::GetStatsResponse Stats(const Daemon& d) {
  v1::GetStatsResponse r;
  auto ctx = Ctx();
  EXPECT_TRUE(RawStub(d)->GetStats(ctx.get(), v1::GetStatsRequest(), &r).ok());
  return r;
}

// One all-reduce of `count` float32 sums on every rank; returns wrong elements.
uint64_t SumAllReduce(Client& c, Communicator& comm, uint64_t count, uint64_t seed, bool via_rpc = false) {
  Buffer b;
  EXPECT_TRUE(c.AllocBuffer(count * 4, &b).ok());
  testing::FillInput(DataType::kFloat32, ReduceOp::kSum, comm.rank(), seed, b.data(), count);
  Handle h;
  Status s = via_rpc ? comm.SubmitAllReduce(b, b, count, DataType::kFloat32, ReduceOp::kSum, &h)
                     : comm.AllReduce(b, b, count, DataType::kFloat32, ReduceOp::kSum, &h);
  EXPECT_TRUE(s.ok()) << s.ToString();
  if (!s.ok()) return count;
  s = h.Wait();
  EXPECT_TRUE(s.ok()) << s.ToString();
  return testing::CountWrongAllReduce(DataType::kFloat32, ReduceOp::kSum, comm.world_size(), seed, b.data(), count);
}

class DaemonTest : public ::testing::Test {
 protected:
  void SetUp() override { ASSERT_TRUE(daemon_.ready()) << daemon_.Log(); }
  Daemon daemon_{{"--max-message-bytes", "1048576", "--op-timeout-ms", "4000", "--join-timeout-ms", "2000",
                  "--max-buffer-bytes", "268435456"}};
};

TEST_F(DaemonTest, VersionAndCapabilities) {
  auto c = daemon_.Connect();
  ASSERT_NE(c, nullptr);
  VersionInfo v;
  ASSERT_TRUE(c->GetVersion(&v).ok());
  EXPECT_EQ(v.api_major, kApiMajor);
  EXPECT_EQ(v.active_backend, "host");
  EXPECT_EQ(v.max_message_bytes, 1048576u);
  EXPECT_NE(std::find(v.capabilities.begin(), v.capabilities.end(), "mode.daemon"), v.capabilities.end());
}

TEST_F(DaemonTest, BothModesEveryCollectiveFromFourClients) {
  for (ExecutionMode mode : {ExecutionMode::kClient, ExecutionMode::kDaemon}) {
    const std::string key = std::string("both-") + ExecutionModeName(mode);
    std::atomic<uint64_t> wrong{0};
    RunRanks(4, [&](uint32_t r) {
      auto c = daemon_.Connect();
      ASSERT_NE(c, nullptr);
      auto comm = Join(*c, key, 4, r, mode);
      ASSERT_NE(comm, nullptr);
      EXPECT_EQ(comm->mode(), mode);
      // One-shot (1 element) and two-shot (above 2 KiB at four host ranks:
      // ring::HostOneShotMaxBytes), odd sizes.
      for (uint64_t count : {uint64_t{1}, uint64_t{1001}, uint64_t{100003}}) {
        for (DataType dt : {DataType::kFloat32, DataType::kBFloat16, DataType::kInt64}) {
          const size_t es = DataTypeSize(dt);
          Buffer in, out;
          ASSERT_TRUE(c->AllocBuffer(count * es, &in).ok());
          ASSERT_TRUE(c->AllocBuffer(4 * count * es, &out).ok());
          testing::FillInput(dt, ReduceOp::kMax, r, count, in.data(), count);
          testing::Poison(dt, out.data(), count);
          Handle h;
          ASSERT_TRUE(comm->AllReduce(in, out, count, dt, ReduceOp::kMax, &h).ok());
          ASSERT_TRUE(h.Wait().ok());
          EXPECT_TRUE(h.Wait().ok());  // a handle may be waited on again
          wrong += testing::CountWrongAllReduce(dt, ReduceOp::kMax, 4, count, out.data(), count);
          testing::FillInput(dt, ReduceOp::kUnspecified, r, count + 1, in.data(), count);
          testing::Poison(dt, out.data(), 4 * count);
          ASSERT_TRUE(comm->AllGather(in, out, count, dt, &h).ok());
          ASSERT_TRUE(h.Wait().ok());
          wrong += testing::CountWrongAllGather(dt, 4, count + 1, out.data(), count);
        }
      }
      { Status ds = comm->Destroy(); EXPECT_TRUE(ds.ok()) << ds.ToString(); }
    });
    EXPECT_EQ(wrong.load(), 0u) << ExecutionModeName(mode);
  }
}

TEST_F(DaemonTest, SubmitRpcPostsForDaemonExecutedCommunicators) {
  std::atomic<uint64_t> wrong{0};
  RunRanks(3, [&](uint32_t r) {
    auto c = daemon_.Connect();
    auto comm = Join(*c, "submit", 3, r, ExecutionMode::kDaemon);
    ASSERT_NE(comm, nullptr);
    for (int k = 0; k < 20; ++k) wrong += SumAllReduce(*c, *comm, 513 + k, k, /*via_rpc=*/true);
    // Ring posts and Submit posts share one sequence.
    wrong += SumAllReduce(*c, *comm, 77, 99, false);
  });
  EXPECT_EQ(wrong.load(), 0u);
}

TEST_F(DaemonTest, SubmitOnClientExecutedCommunicatorIsRefused) {
  RunRanks(2, [&](uint32_t r) {
    auto c = daemon_.Connect();
    auto comm = Join(*c, "submit-client", 2, r);
    Buffer b;
    ASSERT_TRUE(c->AllocBuffer(64, &b).ok());
    Handle h;
    Status s = comm->SubmitAllReduce(b, b, 4, DataType::kFloat32, ReduceOp::kSum, &h);
    EXPECT_EQ(s.code(), StatusCode::kFailedPrecondition);
    EXPECT_NE(s.message().find("daemon-executed"), std::string::npos) << s.message();
  });
}

TEST_F(DaemonTest, LocalBadArgumentsAreRefusedBeforePosting) {
  auto c = daemon_.Connect();
  auto other = daemon_.Connect("other");
  auto comm = Join(*c, "solo", 1, 0);
  Buffer b, foreign;
  ASSERT_TRUE(c->AllocBuffer(1024, &b).ok());
  ASSERT_TRUE(other->AllocBuffer(1024, &foreign).ok());
  Handle h;
  EXPECT_EQ(comm->AllReduce(b, b, 0, DataType::kFloat32, ReduceOp::kSum, &h).code(), StatusCode::kInvalidArgument);
  Status s = comm->AllReduce(b, b, 257, DataType::kFloat32, ReduceOp::kSum, &h);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("exceeds its buffer"), std::string::npos) << s.message();
  s = comm->AllReduce(b, b, 300000, DataType::kFloat32, ReduceOp::kSum, &h);
  EXPECT_NE(s.message().find("exceeds the communicator's max"), std::string::npos) << s.message();
  s = comm->AllReduce(b, b, 4, DataType::kInt32, ReduceOp::kAvg, &h);
  EXPECT_NE(s.message().find("not allowed on int32"), std::string::npos) << s.message();
  s = comm->AllReduce(BufferSpan(b, 1020), b, 4, DataType::kFloat32, ReduceOp::kSum, &h);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  s = comm->AllReduce(foreign, b, 4, DataType::kFloat32, ReduceOp::kSum, &h);
  EXPECT_NE(s.message().find("does not belong to this client"), std::string::npos) << s.message();
  s = comm->AllReduce(b, b, 4, static_cast<DataType>(99), ReduceOp::kSum, &h);
  EXPECT_NE(s.message().find("unknown data type"), std::string::npos) << s.message();
  s = comm->AllGather(b, b, 200, DataType::kFloat32, &h);  // 1 rank: fits; would not with more
  EXPECT_TRUE(s.ok()) << s.ToString();
  EXPECT_TRUE(h.Wait().ok());
  Buffer freed;
  ASSERT_TRUE(c->AllocBuffer(64, &freed).ok());
  Buffer moved = std::move(freed);
  ASSERT_TRUE(moved.Free().ok());
  EXPECT_EQ(comm->AllReduce(moved, b, 4, DataType::kFloat32, ReduceOp::kSum, &h).code(),
            StatusCode::kInvalidArgument);
  // Nothing was posted by the refused calls: the communicator still works.
  EXPECT_EQ(SumAllReduce(*c, *comm, 100, 5), 0u);
}

TEST_F(DaemonTest, MismatchedOpFailsOnEveryRankAndTheCommunicatorGoesOn) {
  RunRanks(3, [&](uint32_t r) {
    auto c = daemon_.Connect();
    auto comm = Join(*c, "mismatch", 3, r);
    Buffer b;
    ASSERT_TRUE(c->AllocBuffer(4096, &b).ok());
    Handle h;
    if (r == 1) {
      ASSERT_TRUE(comm->AllGather(b, b, 8, DataType::kFloat32, &h).ok());
    } else {
      ASSERT_TRUE(comm->AllReduce(b, b, 8, DataType::kFloat32, ReduceOp::kSum, &h).ok());
    }
    Status s = h.Wait();
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s.ToString();
    EXPECT_NE(s.message().find("rank 1 posted all_gather"), std::string::npos) << s.message();
    EXPECT_EQ(SumAllReduce(*c, *comm, 1000, 3), 0u);
  });
  auto stats = Stats(daemon_);
  ASSERT_EQ(stats.communicators_size(), 0);  // all destroyed
  ASSERT_EQ(stats.recently_closed_size(), 1);
  const auto& c = stats.recently_closed(0);
  EXPECT_EQ(c.key(), "mismatch");
  EXPECT_TRUE(c.closed());
  EXPECT_EQ(c.posted(), 2u);
  EXPECT_EQ(c.matched(), 1u);
  EXPECT_EQ(c.completed(), 1u);
  EXPECT_EQ(c.failed(), 1u);
  for (const auto& r : c.ranks()) EXPECT_EQ(r.completed(), 2u);
}

// Every member destroying its communicator is a clean end: stats show it
// closed, not aborted (the abort raised to release peers of the first rank
// to leave is not the communicator's fate). A member that dies is not clean.
TEST_F(DaemonTest, CleanlyDestroyedCommunicatorIsClosedNotAborted) {
  RunRanks(2, [&](uint32_t r) {
    auto c = daemon_.Connect();
    auto comm = Join(*c, "clean-end", 2, r);
    EXPECT_EQ(SumAllReduce(*c, *comm, 64, 4), 0u);
    EXPECT_TRUE(comm->Destroy().ok());
  });
  {
    auto c = daemon_.Connect();
    auto comm = Join(*c, "clean-solo", 1, 0);
    EXPECT_EQ(SumAllReduce(*c, *comm, 64, 5), 0u);
  }  // ~Communicator destroys it
  {
    // The control: a session that ends (its fd socket closed) without
    // destroying its communicator is not a clean end.
    auto stub = RawStub(daemon_);
    v1::AttachRequest attach;
    attach.set_api_major(kApiMajor);
    attach.set_pid(static_cast<uint32_t>(getpid()));
    v1::AttachResponse session;
    auto ctx = Ctx();
    ASSERT_TRUE(stub->Attach(ctx.get(), attach, &session).ok());
    int sock = -1;
    ASSERT_TRUE(ipc::ConnectUnix(session.fd_socket_path(), &sock).ok());
    ipc::FdRequest hello{ipc::kFdMagic, ipc::FdRequestType::kHello, session.session_id(), session.session_token()};
    ipc::FdReply reply{};
    int fd = -1;
    ASSERT_TRUE(ipc::SendWithFd(sock, &hello, sizeof(hello), -1).ok());
    ASSERT_TRUE(ipc::RecvWithFd(sock, &reply, sizeof(reply), &fd).ok());
    ASSERT_EQ(reply.code, 0) << reply.message;
    v1::CreateCommunicatorRequest join;
    join.set_session_id(session.session_id());
    join.set_key("left-behind");
    join.set_world_size(1);
    v1::CreateCommunicatorResponse comm;
    auto ctx2 = Ctx(session.session_token());
    ASSERT_TRUE(stub->CreateCommunicator(ctx2.get(), join, &comm).ok());
    close(sock);
  }
  bool left_behind_aborted = false;
  for (int i = 0; i < 100 && !left_behind_aborted; ++i) {
    const v1::GetStatsResponse stats = Stats(daemon_);
    for (const auto& cs : stats.recently_closed()) left_behind_aborted |= cs.key() == "left-behind" && cs.aborted();
    if (!left_behind_aborted) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  EXPECT_TRUE(left_behind_aborted);
  int seen = 0;
  const v1::GetStatsResponse stats = Stats(daemon_);
  for (const auto& cs : stats.recently_closed()) {
    if (cs.key() == "clean-end" || cs.key() == "clean-solo") {
      ++seen;
      EXPECT_TRUE(cs.closed()) << cs.key();
      EXPECT_FALSE(cs.aborted()) << cs.key() << ": " << cs.abort_reason();
      EXPECT_EQ(cs.abort_reason(), "") << cs.key();
    }
  }
  EXPECT_EQ(seen, 2);
  // The daemon's line for each closed communicator says so too.
  auto closed_line = [&](const std::string& key) {
    const std::string log = daemon_.Log();
    const size_t at = log.find("'" + key + "' closed:");
    return at == std::string::npos ? std::string() : log.substr(at, log.find('\n', at) - at);
  };
  EXPECT_NE(closed_line("left-behind").find("; aborted: "), std::string::npos) << daemon_.Log();
  EXPECT_NE(closed_line("clean-end"), "") << daemon_.Log();
  EXPECT_EQ(closed_line("clean-end").find("aborted"), std::string::npos) << closed_line("clean-end");
}

// Communicator::Abort from a second thread while the first waits on an op a
// peer never posts: the wait ends ABORTED at once (not at the 4 s op
// deadline), the peer sees it through AsyncError, and the daemon goes on.
TEST_F(DaemonTest, AbortFromAnotherThreadEndsAStalledOpAndPeersSeeIt) {
  for (ExecutionMode mode : {ExecutionMode::kClient, ExecutionMode::kDaemon}) {
    SCOPED_TRACE(ExecutionModeName(mode));
    const std::string key = std::string("abort-") + ExecutionModeName(mode);
    auto c0 = daemon_.Connect();
    auto c1 = daemon_.Connect();
    std::unique_ptr<Communicator> comm0, comm1;
    RunRanks(2, [&](uint32_t r) { (r == 0 ? comm0 : comm1) = Join(r == 0 ? *c0 : *c1, key, 2, r, mode); });
    ASSERT_TRUE(comm0 && comm1);
    EXPECT_TRUE(comm1->AsyncError().ok());
    Buffer b;
    ASSERT_TRUE(c0->AllocBuffer(4096, &b).ok());
    testing::FillInput(DataType::kFloat32, ReduceOp::kSum, 0, 1, b.data(), 1024);
    Handle h;
    ASSERT_TRUE(comm0->AllReduce(b, b, 1024, DataType::kFloat32, ReduceOp::kSum, &h).ok());
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    Status early;
    EXPECT_FALSE(h.Test(&early)) << "the op completed without its peer: " << early.ToString();  // really stalled
    const auto t0 = std::chrono::steady_clock::now();
    Status waited;
    std::thread waiter([&] { waited = h.Wait(); });
    std::thread aborter([&] { EXPECT_TRUE(comm0->Abort("a test's watchdog").ok()); });
    aborter.join();
    const auto abort_ms = std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - t0);
    waiter.join();
    const auto wait_ms = std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - t0);
    EXPECT_LT(abort_ms.count(), 1500);
    EXPECT_LT(wait_ms.count(), 1500);
    EXPECT_EQ(waited.code(), StatusCode::kAborted) << waited.ToString();
    EXPECT_NE(waited.message().find("rank 0 aborted the communicator: a test's watchdog"), std::string::npos)
        << waited.ToString();
    Status seen;
    for (int i = 0; i < 100 && seen.ok(); ++i) {
      seen = comm1->AsyncError();
      if (seen.ok()) std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    EXPECT_EQ(seen.code(), StatusCode::kAborted) << seen.ToString();
    EXPECT_NE(seen.message().find("rank 0 aborted"), std::string::npos) << seen.ToString();
    Buffer b1;
    ASSERT_TRUE(c1->AllocBuffer(4096, &b1).ok());
    Handle h1;
    Status posted = comm1->AllReduce(b1, b1, 1024, DataType::kFloat32, ReduceOp::kSum, &h1);
    if (posted.ok()) posted = h1.Wait();
    EXPECT_EQ(posted.code(), StatusCode::kAborted) << posted.ToString();
    EXPECT_TRUE(comm0->Abort("again").ok());  // idempotent
    EXPECT_EQ(comm0->Destroy().code(), StatusCode::kAborted);
    EXPECT_FALSE(comm0->AllReduce(b, b, 1024, DataType::kFloat32, ReduceOp::kSum, &h).ok());
  }
  // The daemon goes on serving.
  RunRanks(2, [&](uint32_t r) {
    auto c = daemon_.Connect();
    auto comm = Join(*c, "after-abort", 2, r);
    EXPECT_EQ(SumAllReduce(*c, *comm, 256, 9), 0u);
  });
}

// A peer that destroys its communicator after its last op failed nothing:
// AsyncError stays OK for the others (the GPU soak of 2026-12-06 counted a
// rank's last graph-replayed op failed when a faster peer had left) until an
// op of theirs needs that peer; then it fails naming the leave, and
// AsyncError reports it.
TEST_F(DaemonTest, APeerThatLeavesWhenDoneIsNotAnAsyncErrorUntilAnOpNeedsIt) {
  for (ExecutionMode mode : {ExecutionMode::kClient, ExecutionMode::kDaemon}) {
    SCOPED_TRACE(ExecutionModeName(mode));
    const std::string key = std::string("leave-done-") + ExecutionModeName(mode);
    auto c0 = daemon_.Connect();
    auto c1 = daemon_.Connect();
    std::unique_ptr<Communicator> comm0, comm1;
    RunRanks(2, [&](uint32_t r) { (r == 0 ? comm0 : comm1) = Join(r == 0 ? *c0 : *c1, key, 2, r, mode); });
    ASSERT_TRUE(comm0 && comm1);
    RunRanks(2, [&](uint32_t r) { EXPECT_EQ(SumAllReduce(r == 0 ? *c0 : *c1, r == 0 ? *comm0 : *comm1, 1024, 3), 0u); });
    ASSERT_TRUE(comm0->Destroy().ok());  // done: rank 0 leaves
    EXPECT_TRUE(comm1->AsyncError().ok()) << comm1->AsyncError().ToString();
    Buffer b1;
    ASSERT_TRUE(c1->AllocBuffer(4096, &b1).ok());
    Handle h1;
    Status next = comm1->AllReduce(b1, b1, 1024, DataType::kFloat32, ReduceOp::kSum, &h1);
    if (next.ok()) next = h1.Wait();
    EXPECT_EQ(next.code(), StatusCode::kAborted) << next.ToString();
    EXPECT_NE(next.message().find("rank 0 left: destroyed the communicator"), std::string::npos) << next.ToString();
    const Status seen = comm1->AsyncError();
    EXPECT_EQ(seen.code(), StatusCode::kAborted) << seen.ToString();
    EXPECT_NE(seen.message().find("rank 0 left"), std::string::npos) << seen.ToString();
  }
}

// A fault after a clean leave is what the others must learn of: rank 0
// leaves when done (no error for rank 2), then rank 1 aborts: rank 2's
// AsyncError names rank 1's abort though no op of rank 2 failed.
TEST_F(DaemonTest, AFaultAfterACleanLeaveIsAnAsyncError) {
  const std::string key = "fault-after-leave";
  std::vector<std::unique_ptr<Client>> c(3);
  std::vector<std::unique_ptr<Communicator>> comm(3);
  for (auto& x : c) x = daemon_.Connect();
  RunRanks(3, [&](uint32_t r) { comm[r] = Join(*c[r], key, 3, r); });
  for (const auto& x : comm) ASSERT_TRUE(x);
  RunRanks(3, [&](uint32_t r) { EXPECT_EQ(SumAllReduce(*c[r], *comm[r], 512, 5), 0u); });
  ASSERT_TRUE(comm[0]->Destroy().ok());
  EXPECT_TRUE(comm[2]->AsyncError().ok()) << comm[2]->AsyncError().ToString();
  EXPECT_TRUE(comm[1]->Abort("a test's fault").ok());
  const Status seen = comm[2]->AsyncError();
  EXPECT_EQ(seen.code(), StatusCode::kAborted) << seen.ToString();
  EXPECT_NE(seen.message().find("rank 1 aborted the communicator: a test's fault"), std::string::npos)
      << seen.ToString();
}

// A wait that times out before the op completes must not become the op's
// status: once the op completes, waits report its own (OK) status.
TEST_F(DaemonTest, ShortWaitTimeoutIsNotTheOpsStatus) {
  auto c0 = daemon_.Connect(), c1 = daemon_.Connect();
  std::unique_ptr<Communicator> m0, m1;
  std::thread t([&] { m1 = Join(*c1, "short-wait", 2, 1); });
  m0 = Join(*c0, "short-wait", 2, 0);
  t.join();
  Buffer b0, b1;
  ASSERT_TRUE(c0->AllocBuffer(4096, &b0).ok());
  ASSERT_TRUE(c1->AllocBuffer(4096, &b1).ok());
  testing::FillInput(DataType::kFloat32, ReduceOp::kSum, 0, 4, b0.data(), 1024);
  testing::FillInput(DataType::kFloat32, ReduceOp::kSum, 1, 4, b1.data(), 1024);
  Handle h0, h1;
  ASSERT_TRUE(m0->AllReduce(b0, b0, 1024, DataType::kFloat32, ReduceOp::kSum, &h0).ok());
  EXPECT_EQ(h0.Wait(20).code(), StatusCode::kDeadlineExceeded);  // rank 1 has not posted yet
  ASSERT_TRUE(m1->AllReduce(b1, b1, 1024, DataType::kFloat32, ReduceOp::kSum, &h1).ok());
  EXPECT_TRUE(h0.Wait().ok());
  EXPECT_TRUE(h0.Wait(0).ok());
  EXPECT_TRUE(h1.Wait().ok());
  EXPECT_EQ(testing::CountWrongAllReduce(DataType::kFloat32, ReduceOp::kSum, 2, 4, b0.data(), 1024), 0u);
}

// A member whose join timed out is withdrawn: it never becomes a phantom
// member, and the key can be joined again by everyone.
TEST_F(DaemonTest, TimedOutJoinIsWithdrawn) {
  auto c0 = daemon_.Connect(), c1 = daemon_.Connect();
  CommunicatorOptions o;
  o.key = "retry";
  o.world_size = 2;
  o.rank = 0;
  o.join_timeout_ms = 200;  // shorter than the daemon's 2000
  std::unique_ptr<Communicator> comm;
  const auto t0 = std::chrono::steady_clock::now();
  Status s = c0->CreateCommunicator(o, &comm);
  EXPECT_EQ(s.code(), StatusCode::kDeadlineExceeded) << s.ToString();
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::milliseconds(1500));
  std::unique_ptr<Communicator> m0, m1;
  std::thread t([&] { m1 = Join(*c1, "retry", 2, 1); });
  m0 = Join(*c0, "retry", 2, 0);
  t.join();
  ASSERT_NE(m0, nullptr);
  ASSERT_NE(m1, nullptr);
  std::atomic<uint64_t> wrong{0};
  std::thread t1([&] { wrong += SumAllReduce(*c1, *m1, 333, 8); });
  wrong += SumAllReduce(*c0, *m0, 333, 8);
  t1.join();
  EXPECT_EQ(wrong.load(), 0u);
}

TEST_F(DaemonTest, JoinErrorsAreSpecific) {
  auto c = daemon_.Connect();
  Status s;
  Join(*c, "j", 2, 2, ExecutionMode::kClient, &s);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  Join(*c, "j", 0, 0, ExecutionMode::kClient, &s);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  Join(*c, "", 1, 0, ExecutionMode::kClient, &s);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  // Rank 0 waits for a peer that never comes: DEADLINE_EXCEEDED naming it.
  std::thread waiter([&] {
    auto c0 = daemon_.Connect();
    Status s0;
    Join(*c0, "lonely", 3, 0, ExecutionMode::kClient, &s0);
    EXPECT_EQ(s0.code(), StatusCode::kDeadlineExceeded) << s0.ToString();
    EXPECT_NE(s0.message().find("missing ranks 2"), std::string::npos) << s0.message();
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  auto c1 = daemon_.Connect();
  Status s1;
  std::thread second([&] { Join(*c1, "lonely", 3, 1, ExecutionMode::kClient, &s1); });
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  Join(*c, "lonely", 4, 2, ExecutionMode::kClient, &s);  // wrong world size
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("differs"), std::string::npos) << s.message();
  Join(*c, "lonely", 3, 1, ExecutionMode::kClient, &s);  // rank taken
  EXPECT_EQ(s.code(), StatusCode::kAlreadyExists);
  Join(*c, "lonely", 3, 2, ExecutionMode::kDaemon, &s);  // other mode
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  waiter.join();
  second.join();
  EXPECT_EQ(s1.code(), StatusCode::kDeadlineExceeded);
  // The daemon serves on.
  auto comm = Join(*c, "after", 1, 0);
  EXPECT_EQ(SumAllReduce(*c, *comm, 10, 1), 0u);
}

TEST_F(DaemonTest, BufferBudgetAndFreeWhileInUse) {
  auto c = daemon_.Connect();
  Buffer b;
  EXPECT_EQ(c->AllocBuffer(0, &b).code(), StatusCode::kInvalidArgument);
  Status s = c->AllocBuffer(uint64_t{1} << 40, &b);
  EXPECT_EQ(s.code(), StatusCode::kResourceExhausted);
  EXPECT_NE(s.message().find("budget"), std::string::npos);
  // A posted op pins its buffers until it completes.
  auto c1 = daemon_.Connect();
  std::unique_ptr<Communicator> comm0, comm1;
  std::thread t([&] { comm1 = Join(*c1, "pin", 2, 1); });
  comm0 = Join(*c, "pin", 2, 0);
  t.join();
  Buffer x, y;
  ASSERT_TRUE(c->AllocBuffer(4096, &x).ok());
  ASSERT_TRUE(c1->AllocBuffer(4096, &y).ok());
  testing::FillInput(DataType::kFloat32, ReduceOp::kSum, 0, 8, x.data(), 1024);
  testing::FillInput(DataType::kFloat32, ReduceOp::kSum, 1, 8, y.data(), 1024);
  Handle h0, h1;
  ASSERT_TRUE(comm0->AllReduce(x, x, 1024, DataType::kFloat32, ReduceOp::kSum, &h0).ok());
  s = x.Free();
  EXPECT_EQ(s.code(), StatusCode::kFailedPrecondition) << s.ToString();
  EXPECT_TRUE(x.valid());
  ASSERT_TRUE(comm1->AllReduce(y, y, 1024, DataType::kFloat32, ReduceOp::kSum, &h1).ok());
  ASSERT_TRUE(h0.Wait().ok());
  ASSERT_TRUE(h1.Wait().ok());
  EXPECT_EQ(testing::CountWrongAllReduce(DataType::kFloat32, ReduceOp::kSum, 2, 8, x.data(), 1024), 0u);
  EXPECT_TRUE(x.Free().ok());
}

TEST_F(DaemonTest, RawRpcBadIdsGetPreciseCodes) {
  auto stub = RawStub(daemon_);
  {
    v1::AttachRequest req;
    req.set_api_major(2);
    v1::AttachResponse resp;
    auto ctx = Ctx();
    EXPECT_EQ(stub->Attach(ctx.get(), req, &resp).error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  }
  {
    v1::AllocBufferRequest req;
    req.set_session_id(424242);
    req.set_bytes(64);
    v1::AllocBufferResponse resp;
    auto ctx = Ctx();
    EXPECT_EQ(stub->AllocBuffer(ctx.get(), req, &resp).error_code(), grpc::StatusCode::NOT_FOUND);
  }
  auto c = daemon_.Connect();
  auto comm = Join(*c, "raw", 1, 0, ExecutionMode::kDaemon);
  {
    v1::SubmitRequest req;
    req.set_session_id(c->session_id());
    req.set_comm_id(comm->id() + 1000);
    // A well-formed op: the op's own fields are checked before any id is looked up.
    req.mutable_op()->set_kind(v1::COLLECTIVE_KIND_ALL_REDUCE);
    req.mutable_op()->set_dtype(v1::DATA_TYPE_FLOAT32);
    req.mutable_op()->set_reduce_op(v1::REDUCE_OP_SUM);
    req.mutable_op()->set_count(4);
    v1::SubmitResponse resp;
    auto ctx = Ctx(c->session_token());
    EXPECT_EQ(stub->Submit(ctx.get(), req, &resp).error_code(), grpc::StatusCode::NOT_FOUND);
  }
  {
    v1::SubmitRequest req;  // a buffer id that is not this session's
    req.set_session_id(c->session_id());
    req.set_comm_id(comm->id());
    auto* op = req.mutable_op();
    op->set_kind(v1::COLLECTIVE_KIND_ALL_REDUCE);
    op->set_dtype(v1::DATA_TYPE_FLOAT32);
    op->set_reduce_op(v1::REDUCE_OP_SUM);
    op->set_count(4);
    op->set_send_buffer_id(987654);
    op->set_recv_buffer_id(987654);
    v1::SubmitResponse resp;
    auto ctx = Ctx(c->session_token());
    grpc::Status s = stub->Submit(ctx.get(), req, &resp);
    EXPECT_EQ(s.error_code(), grpc::StatusCode::NOT_FOUND);
    EXPECT_NE(s.error_message().find("buffer 987654"), std::string::npos);
    op->set_dtype(v1::DATA_TYPE_INT32);
    op->set_reduce_op(v1::REDUCE_OP_AVG);
    auto ctx2 = Ctx(c->session_token());
    EXPECT_EQ(stub->Submit(ctx2.get(), req, &resp).error_code(), grpc::StatusCode::INVALID_ARGUMENT);
    req.set_rank(5);
    auto ctx3 = Ctx(c->session_token());
    EXPECT_EQ(stub->Submit(ctx3.get(), req, &resp).error_code(), grpc::StatusCode::PERMISSION_DENIED);
  }
  {
    v1::WaitOpRequest req;
    req.set_session_id(c->session_id());
    req.set_comm_id(comm->id());
    req.set_op_index(77);
    v1::WaitOpResponse resp;
    auto ctx = Ctx(c->session_token());
    EXPECT_EQ(stub->WaitOp(ctx.get(), req, &resp).error_code(), grpc::StatusCode::NOT_FOUND);
  }
  {
    // Without the session's token, or with a wrong one, nothing is done for it.
    v1::AllocBufferRequest req;
    req.set_session_id(c->session_id());
    req.set_bytes(64);
    v1::AllocBufferResponse resp;
    for (uint64_t token : {uint64_t{0}, c->session_token() + 1}) {
      auto ctx = Ctx(token);
      grpc::Status s = stub->AllocBuffer(ctx.get(), req, &resp);
      EXPECT_EQ(s.error_code(), grpc::StatusCode::PERMISSION_DENIED) << token;
      EXPECT_NE(s.error_message().find("session token"), std::string::npos) << s.error_message();
    }
    v1::DetachRequest detach;
    detach.set_session_id(c->session_id());
    v1::DetachResponse detached;
    auto ctx = Ctx();
    EXPECT_EQ(stub->Detach(ctx.get(), detach, &detached).error_code(), grpc::StatusCode::PERMISSION_DENIED);
    auto ctx2 = Ctx(c->session_token());  // the control: with it, the same call is served
    EXPECT_TRUE(stub->AllocBuffer(ctx2.get(), req, &resp).ok());
  }
  // WaitOp on a real op reports its completion.
  EXPECT_EQ(SumAllReduce(*c, *comm, 64, 2, true), 0u);
  {
    v1::WaitOpRequest req;
    req.set_session_id(c->session_id());
    req.set_comm_id(comm->id());
    req.set_op_index(0);
    req.set_timeout_ms(1000);
    v1::WaitOpResponse resp;
    auto ctx = Ctx(c->session_token());
    ASSERT_TRUE(stub->WaitOp(ctx.get(), req, &resp).ok());
    EXPECT_TRUE(resp.done());
    EXPECT_EQ(resp.status_code(), 0);
  }
  // The fd socket refuses a wrong token and an unbound fetch.
  int sock = -1;
  ASSERT_TRUE(ipc::ConnectUnix(daemon_.socket() + ".fds", &sock).ok());
  ipc::FdRequest fetch{ipc::kFdMagic, ipc::FdRequestType::kFetchWindow, c->session_id(), comm->id()};
  ipc::FdReply reply{};
  int fd = -1;
  ASSERT_TRUE(ipc::SendWithFd(sock, &fetch, sizeof(fetch), -1).ok());
  ASSERT_TRUE(ipc::RecvWithFd(sock, &reply, sizeof(reply), &fd).ok());
  EXPECT_EQ(reply.code, static_cast<int>(StatusCode::kPermissionDenied));
  EXPECT_EQ(fd, -1);
  ipc::FdRequest hello{ipc::kFdMagic, ipc::FdRequestType::kHello, c->session_id(), 12345};
  ASSERT_TRUE(ipc::SendWithFd(sock, &hello, sizeof(hello), -1).ok());
  ASSERT_TRUE(ipc::RecvWithFd(sock, &reply, sizeof(reply), &fd).ok());
  EXPECT_EQ(reply.code, static_cast<int>(StatusCode::kPermissionDenied));
  close(sock);
  // All of it left the daemon serving.
  EXPECT_EQ(SumAllReduce(*c, *comm, 64, 3), 0u);
}

// Registration of callers' GPU buffers (API 1.3), checked where CI runs it:
// fds deposited over the fd socket, bounded per session, and a registration
// refused with the reason on a communicator that is not a GPU one.
TEST_F(DaemonTest, GpuBufferRegistrationIsCheckedOnTheHostBackend) {
  auto stub = RawStub(daemon_);
  v1::AttachRequest attach;
  attach.set_api_major(kApiMajor);
  attach.set_pid(static_cast<uint32_t>(getpid()));
  attach.set_client_name("raw-register");
  v1::AttachResponse session;
  auto ctx = Ctx();
  ASSERT_TRUE(stub->Attach(ctx.get(), attach, &session).ok());
  int sock = -1;
  ASSERT_TRUE(ipc::ConnectUnix(session.fd_socket_path(), &sock).ok());
  auto call = [&](ipc::FdRequestType type, int fd_to_send, ipc::FdReply* reply) {
    ipc::FdRequest req{ipc::kFdMagic, type, session.session_id(), session.session_token()};
    int got = -1;
    ASSERT_TRUE(ipc::SendWithFd(sock, &req, sizeof(req), fd_to_send).ok());
    ASSERT_TRUE(ipc::RecvWithFd(sock, reply, sizeof(*reply), &got).ok());
    EXPECT_EQ(got, -1);
  };
  ipc::FdReply reply{};
  call(ipc::FdRequestType::kDepositFd, -1, &reply);  // before hello
  EXPECT_EQ(reply.code, static_cast<int>(StatusCode::kPermissionDenied));
  call(ipc::FdRequestType::kHello, -1, &reply);
  ASSERT_EQ(reply.code, 0) << reply.message;
  call(ipc::FdRequestType::kDepositFd, -1, &reply);  // no fd with it
  EXPECT_EQ(reply.code, static_cast<int>(StatusCode::kInvalidArgument));
  const int memfd = memfd_create("deposit", MFD_CLOEXEC);
  ASSERT_GE(memfd, 0);
  call(ipc::FdRequestType::kDepositFd, memfd, &reply);
  ASSERT_EQ(reply.code, 0) << reply.message;
  const uint64_t deposit = reply.bytes;
  EXPECT_NE(deposit, 0u);
  // A session cannot pile up unclaimed fds.
  int refused = 0;
  for (int i = 0; i < 80 && refused == 0; ++i) {
    call(ipc::FdRequestType::kDepositFd, memfd, &reply);
    if (reply.code == static_cast<int>(StatusCode::kResourceExhausted)) ++refused;
  }
  EXPECT_EQ(refused, 1);
  close(memfd);

  v1::CreateCommunicatorRequest join;
  join.set_session_id(session.session_id());
  join.set_key("raw-register");
  join.set_world_size(1);
  v1::CreateCommunicatorResponse comm;
  auto ctx2 = Ctx(session.session_token());
  ASSERT_TRUE(stub->CreateCommunicator(ctx2.get(), join, &comm).ok());
  v1::RegisterGpuBufferRequest reg;
  reg.set_session_id(session.session_id());
  reg.set_comm_id(comm.comm_id());
  reg.set_deposit_id(deposit);
  reg.set_allocation_bytes(1 << 20);
  reg.set_bytes(4096);
  v1::RegisterGpuBufferResponse reg_resp;
  auto ctx3 = Ctx(session.session_token());
  grpc::Status st = stub->RegisterGpuBuffer(ctx3.get(), reg, &reg_resp);
  EXPECT_EQ(st.error_code(), grpc::StatusCode::FAILED_PRECONDITION) << st.error_message();
  EXPECT_NE(st.error_message().find("needs a GPU communicator"), std::string::npos) << st.error_message();
  reg.set_comm_id(comm.comm_id() + 1000);
  auto ctx4 = Ctx(session.session_token());
  EXPECT_EQ(stub->RegisterGpuBuffer(ctx4.get(), reg, &reg_resp).error_code(), grpc::StatusCode::NOT_FOUND);
  v1::DeregisterGpuBufferRequest dereg;
  dereg.set_session_id(session.session_id());
  dereg.set_comm_id(comm.comm_id());
  dereg.set_buffer_id(1);
  v1::DeregisterGpuBufferResponse dereg_resp;
  auto ctx5 = Ctx(session.session_token());
  EXPECT_EQ(stub->DeregisterGpuBuffer(ctx5.get(), dereg, &dereg_resp).error_code(), grpc::StatusCode::NOT_FOUND);
  // Closing the fd socket ends the session: its deposits and membership go with it.
  const uint64_t sessions_before = Stats(daemon_).sessions();
  close(sock);
  for (int i = 0; i < 100 && Stats(daemon_).sessions() == sessions_before; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  EXPECT_EQ(Stats(daemon_).sessions(), sessions_before - 1);
  // The client library refuses it on a host communicator before asking the daemon.
  auto c = daemon_.Connect();
  auto host_comm = Join(*c, "register-host", 1, 0);
  Buffer out;
  int word = 0;
  EXPECT_EQ(host_comm->RegisterBuffer(&word, sizeof(word), &out).code(), StatusCode::kFailedPrecondition);
}

// A client killed while its peers wait in an op: they get ABORTED (naming the
// dead client) well before the op deadline, and the daemon reclaims its session.
TEST_F(DaemonTest, KilledClientAbortsPeersAndIsReclaimed) {
  for (const char* mode : {"client", "daemon"}) {
    const std::string key = std::string("kill-") + mode;
    auto victim = daemon_.SpawnClient(key, 2, 1, {"--mode", mode, "--scenario", "join-and-sleep"});
    auto c = daemon_.Connect();
    auto comm = Join(*c, key, 2, 0, std::string(mode) == "daemon" ? ExecutionMode::kDaemon : ExecutionMode::kClient);
    ASSERT_NE(comm, nullptr);
    Buffer b;
    ASSERT_TRUE(c->AllocBuffer(4096, &b).ok());
    Handle h;
    ASSERT_TRUE(comm->AllReduce(b, b, 1024, DataType::kFloat32, ReduceOp::kSum, &h).ok());
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    EXPECT_FALSE(h.Test(nullptr));  // waiting for rank 1
    const auto t0 = std::chrono::steady_clock::now();
    victim->Kill(SIGKILL);
    Status s = h.Wait();
    const auto waited = std::chrono::steady_clock::now() - t0;
    EXPECT_EQ(s.code(), StatusCode::kAborted) << s.ToString();
    EXPECT_NE(s.message().find("disconnected"), std::string::npos) << s.message();
    EXPECT_LT(waited, std::chrono::milliseconds(2000));  // op timeout is 4000
    Handle h2;
    EXPECT_EQ(comm->AllReduce(b, b, 4, DataType::kFloat32, ReduceOp::kSum, &h2).code(), StatusCode::kAborted);
    comm->Destroy();
  }
  auto stats = Stats(daemon_);
  EXPECT_EQ(stats.sessions(), 0u);  // every session reclaimed, the killed ones included
  EXPECT_EQ(stats.communicators_size(), 0);
}

// The acceptance load: 8 client processes x 1000 mixed ops, up to 16 in flight
// each, every element of every result checked, in each mode.
TEST_F(DaemonTest, EightProcessesThousandMixedOpsEachMode) {
  for (const char* mode : {"client", "daemon"}) {
    const std::string key = std::string("load-") + mode;
    std::vector<std::unique_ptr<testing::Process>> ranks;
    for (uint32_t r = 0; r < 8; ++r) {
      ranks.push_back(daemon_.SpawnClient(key, 8, r, {"--mode", mode, "--ops", "1000", "--seed", "17",
                                                      "--max-count", "2048", "--window", "16"}));
    }
    for (uint32_t r = 0; r < 8; ++r) {
      EXPECT_EQ(ranks[r]->Wait(240000), 0) << mode << " rank " << r << ": " << ranks[r]->Output();
      EXPECT_NE(ranks[r]->Output().find("1000 ops, 0 wrong, 0 failed"), std::string::npos) << ranks[r]->Output();
    }
  }
}

// A GPU communicator where there is none (CI: the client finds no GPU, and
// the daemon serves the host backend) is refused with FAILED_PRECONDITION and
// a reason, before anything is allocated; the session and the daemon go on.
// GPU machines run the cuda backend's own tests (gpu_daemon_test).
TEST_F(DaemonTest, GpuCommunicatorOnTheHostBackendIsRefusedAndServingGoesOn) {
  auto c = daemon_.Connect();
  ASSERT_TRUE(c);
  VersionInfo v;
  ASSERT_TRUE(c->GetVersion(&v).ok());
  if (v.active_backend != "host") GTEST_SKIP() << "this daemon serves " << v.active_backend;
  std::unique_ptr<Communicator> comm;
  Status s = c->CreateCommunicator({.key = "gpu", .world_size = 1, .rank = 0, .join_timeout_ms = 2000, .device = 0,
                                    .gpu_heap_bytes = 1 << 20},
                                   &comm);
  EXPECT_EQ(s.code(), StatusCode::kFailedPrecondition) << s.ToString();
  EXPECT_FALSE(s.message().empty());
  // A host-only option on a host communicator is refused too.
  s = c->CreateCommunicator({.key = "host-heap", .world_size = 1, .rank = 0, .gpu_heap_bytes = 1 << 20}, &comm);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s.ToString();
  // The same session goes on with a host communicator.
  auto ok = Join(*c, "after-gpu", 1, 0);
  ASSERT_TRUE(ok);
  EXPECT_FALSE(ok->on_gpu());
  Handle h;
  std::vector<float> x(16);
  EXPECT_EQ(ok->AllReduce(x.data(), x.data(), 16, DataType::kFloat32, ReduceOp::kSum, nullptr, &h).code(),
            StatusCode::kFailedPrecondition);  // the GPU overload on a host communicator
  EXPECT_EQ(SumAllReduce(*c, *ok, 1000, 5), 0u);
}

// RegisterPlan (what a GPU client sends when it captures an op into a graph)
// is checked like any op and counted per rank in the stats.
TEST_F(DaemonTest, RegisterPlanIsCheckedAndCounted) {
  auto c = daemon_.Connect();
  ASSERT_TRUE(c);
  auto comm = Join(*c, "plans", 1, 0);
  ASSERT_TRUE(comm);
  auto stub = RawStub(daemon_);
  auto call = [&](uint32_t rank, v1::DataType dtype, v1::ReduceOp op, uint64_t* plans) {
    v1::RegisterPlanRequest req;
    req.set_session_id(c->session_id());
    req.set_comm_id(comm->id());
    req.set_rank(rank);
    req.mutable_op()->set_kind(v1::COLLECTIVE_KIND_ALL_REDUCE);
    req.mutable_op()->set_dtype(dtype);
    req.mutable_op()->set_reduce_op(op);
    // Above the message limit (a plan may run on the heap or a registered
    // buffer): checked when the op runs; only counts above the budget are refused here.
    req.mutable_op()->set_count(1 << 24);
    v1::RegisterPlanResponse resp;
    auto ctx = Ctx(c->session_token());
    grpc::Status s = stub->RegisterPlan(ctx.get(), req, &resp);
    if (plans) *plans = resp.plans();
    return s.error_code();
  };
  uint64_t plans = 0;
  EXPECT_EQ(call(0, v1::DATA_TYPE_BFLOAT16, v1::REDUCE_OP_SUM, &plans), grpc::StatusCode::OK);
  EXPECT_EQ(plans, 1u);
  EXPECT_EQ(call(0, v1::DATA_TYPE_INT32, v1::REDUCE_OP_AVG, nullptr), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(call(1, v1::DATA_TYPE_FLOAT32, v1::REDUCE_OP_SUM, nullptr), grpc::StatusCode::PERMISSION_DENIED);
  EXPECT_EQ(call(0, v1::DATA_TYPE_FLOAT32, v1::REDUCE_OP_MAX, &plans), grpc::StatusCode::OK);
  EXPECT_EQ(plans, 2u);
  bool found = false;
  const v1::GetStatsResponse stats = Stats(daemon_);
  for (const auto& cs : stats.communicators()) {
    if (cs.key() != "plans") continue;
    found = true;
    ASSERT_EQ(cs.ranks_size(), 1);
    EXPECT_EQ(cs.ranks(0).captured_plans(), 2u);
  }
  EXPECT_TRUE(found);
}

// A member can write its whole communicator segment (docs/security.md). One
// that scribbles on the header and its counters spoils its own communicator
// only: the daemon reads its own copy of the layout, bounds what it loops
// over, maps the abort code, and keeps serving everyone else.
TEST_F(DaemonTest, AScribblingMemberSpoilsOnlyItsOwnCommunicator) {
  std::unique_ptr<Client> c[4];
  for (auto& x : c) x = daemon_.Connect();
  std::unique_ptr<Communicator> spoilt[2], bystander[2];
  RunRanks(2, [&](uint32_t r) {
    spoilt[r] = Join(*c[r], "spoilt", 2, r, ExecutionMode::kDaemon);
    bystander[r] = Join(*c[2 + r], "bystander", 2, r, ExecutionMode::kDaemon);
  });
  ASSERT_TRUE(spoilt[0] && spoilt[1] && bystander[0] && bystander[1]);
  RunRanks(2, [&](uint32_t r) { EXPECT_EQ(SumAllReduce(*c[r], *spoilt[r], 256, 1), 0u); });
  Buffer pinned;
  ASSERT_TRUE(c[0]->AllocBuffer(4096, &pinned).ok());
  // This process maps the segment (as "collectived-comm-<id>"): scribble on it.
  const std::string name = "memfd:collectived-comm-" + std::to_string(spoilt[0]->id()) + " ";
  std::ifstream maps("/proc/self/maps");
  std::string line;
  uintptr_t at = 0, end = 0;
  while (std::getline(maps, line)) {
    if (line.find(name) == std::string::npos) continue;
    at = std::stoull(line.substr(0, line.find('-')), nullptr, 16);
    end = std::stoull(line.substr(line.find('-') + 1), nullptr, 16);
  }
  ASSERT_NE(at, 0u) << "no mapping named " << name;
  ring::CommSegment seg;
  ASSERT_TRUE(ring::CommSegment::Attach(reinterpret_cast<void*>(at), end - at, &seg).ok());
  ring::CommHeader* h = &seg.header();
  h->ring_depth = 0;
  h->world_size = 1u << 30;
  h->op_timeout_ns = 0;
  h->max_message_bytes = ~0ull;
  seg.control(0).next_index.value.store(uint64_t{1} << 62);
  std::memset(h->abort_reason, '\n', sizeof(h->abort_reason));
  h->abort_code.store(999);
  h->abort_claim.store(1);
  // The daemon walks rank 0's in-flight ops for this free: bounded, not 2^62.
  const auto t0 = std::chrono::steady_clock::now();
  EXPECT_TRUE(pinned.Free().ok());
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(2));
  // Stats read the spoilt segment; the codes and texts in it are mapped.
  bool found = false;
  const v1::GetStatsResponse stats = Stats(daemon_);
  for (const auto& cs : stats.communicators()) {
    if (cs.comm_id() != spoilt[0]->id()) continue;
    found = true;
    EXPECT_EQ(cs.abort_reason().find('\n'), std::string::npos) << "a forged log line";
  }
  EXPECT_TRUE(found);
  // The spoilt communicator fails cleanly, with a status that exists.
  Buffer b;
  ASSERT_TRUE(c[0]->AllocBuffer(1024, &b).ok());
  Handle hd;
  Status s = spoilt[0]->AllReduce(b, b, 256, DataType::kFloat32, ReduceOp::kSum, &hd);
  if (s.ok()) s = hd.Wait();
  EXPECT_FALSE(s.ok());
  EXPECT_LE(static_cast<int>(s.code()), static_cast<int>(StatusCode::kUnauthenticated)) << s.ToString();
  EXPECT_EQ(s.message().find('\n'), std::string::npos) << s.message();
  // Everyone else is served exactly, a fresh client too.
  RunRanks(2, [&](uint32_t r) { EXPECT_EQ(SumAllReduce(*c[2 + r], *bystander[r], 4096, 7), 0u); });
  auto fresh = daemon_.Connect();
  Buffer f;
  EXPECT_TRUE(fresh->AllocBuffer(4096, &f).ok());
}

TEST(DaemonLifecycleTest, SecondDaemonOnTheSameSocketRefusesToStart) {
  Daemon first;
  ASSERT_TRUE(first.ready());
  testing::Process second({COLLECTIVED_DAEMON_BIN, "--socket", first.socket()}, first.dir() + "/second.log");
  EXPECT_EQ(second.Wait(5000), 1);
  EXPECT_NE(second.Output().find("another collectived already serves"), std::string::npos) << second.Output();
  auto c = first.Connect();
  ASSERT_NE(c, nullptr);  // the first one still serves
}

TEST(DaemonLifecycleTest, DrainRefusesNewWorkAndSigtermStops) {
  Daemon d;
  ASSERT_TRUE(d.ready());
  auto stub = RawStub(d);
  auto ctx = Ctx();
  v1::DrainResponse dr;
  ASSERT_TRUE(stub->Drain(ctx.get(), v1::DrainRequest(), &dr).ok());
  std::unique_ptr<Client> c;
  Status s = Client::Connect({.socket_path = d.socket()}, &c);
  EXPECT_EQ(s.code(), StatusCode::kUnavailable) << s.ToString();
  d.process().Kill(SIGTERM);
  EXPECT_EQ(d.process().Wait(5000), 0);
  EXPECT_FALSE(std::filesystem::exists(d.socket()));
}

// A daemon that dies and comes back on the same socket: the old session's
// next call is UNAVAILABLE (not a stranger's NOT_FOUND), the client library
// attaches again and forms new communicators, a third daemon is refused, and
// a clean stop leaves only the lock file behind.
TEST(DaemonLifecycleTest, ARestartedDaemonIsUnavailableToOldSessionsAndServesNewOnes) {
  testing::TempDir dir;
  const std::string sock = dir.path() + "/c.sock";
  int started = 0;
  auto start = [&]() {
    auto p = std::make_unique<testing::Process>(
        std::vector<std::string>{testing::DaemonBin(), "--socket", sock, "--log-level", "info"},
        dir.path() + "/daemon" + std::to_string(++started) + ".log");
    // Its own log says when it serves: a crashed daemon's socket files are there already.
    for (int i = 0; i < 400 && p->Output().find("serving unix:") == std::string::npos && p->Wait(0) == -1; ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    return p;
  };
  auto connect = [&](const char* name) {
    std::unique_ptr<Client> c;
    Status s = Client::Connect({.socket_path = sock, .client_name = name}, &c);
    EXPECT_TRUE(s.ok()) << s.ToString();
    return c;
  };
  auto first = start();
  auto old_client = connect("before");
  ASSERT_NE(old_client, nullptr);
  {
    auto comm = Join(*old_client, "before-restart", 1, 0);
    EXPECT_EQ(SumAllReduce(*old_client, *comm, 64, 1), 0u);
  }
  first->Kill(SIGKILL);  // a crash: its socket files stay behind
  ASSERT_EQ(first->Wait(5000), 128 + SIGKILL);
  auto second = start();
  ASSERT_EQ(second->Wait(0), -1) << second->Output();
  Buffer b;
  Status s = old_client->AllocBuffer(64, &b);
  EXPECT_EQ(s.code(), StatusCode::kUnavailable) << s.ToString();
  EXPECT_NE(s.message().find("connect again"), std::string::npos) << s.ToString();
  std::unique_ptr<Communicator> stale;
  EXPECT_EQ(old_client->CreateCommunicator(testing::CommOptions("stale", 1, 0), &stale).code(),
            StatusCode::kUnavailable);
  auto fresh = connect("after");
  ASSERT_NE(fresh, nullptr) << second->Output();
  {
    auto comm = Join(*fresh, "after-restart", 1, 0);
    EXPECT_EQ(SumAllReduce(*fresh, *comm, 64, 2), 0u);
  }
  auto third = start();
  EXPECT_NE(third->Wait(5000), 0);  // refused: the socket is served
  EXPECT_NE(third->Output().find("another collectived already serves"), std::string::npos) << third->Output();
  old_client.reset();
  fresh.reset();
  second->Kill(SIGTERM);
  EXPECT_EQ(second->Wait(15000), 0) << second->Output();
  std::vector<std::string> left;
  for (const auto& e : std::filesystem::directory_iterator(dir.path())) {
    const std::string name = e.path().filename();
    if (name.rfind("c.sock", 0) == 0) left.push_back(name);
  }
  EXPECT_EQ(left, std::vector<std::string>{"c.sock.lock"});  // the flock's file stays, by design
}

// collectivectl, as an operator uses it: health exit codes, JSON stats, drain.
TEST(DaemonLifecycleTest, CollectivectlHealthStatsAndDrain) {
  Daemon d;
  ASSERT_TRUE(d.ready());
  auto ctl = [&](std::vector<std::string> args, int* rc) {
    std::vector<std::string> argv = {COLLECTIVECTL_BIN, "--socket", d.socket()};
    argv.insert(argv.end(), args.begin(), args.end());
    testing::Process p(argv, d.dir() + "/ctl.log");
    *rc = p.Wait(10000);
    return p.Output();
  };
  int rc = -1;
  EXPECT_EQ(ctl({"health"}, &rc), "SERVING\n");
  EXPECT_EQ(rc, 0);
  // A communicator with one completed op shows up in JSON stats.
  {
    auto c = d.Connect();
    auto comm = Join(*c, "ctl-json", 1, 0);
    EXPECT_EQ(SumAllReduce(*c, *comm, 64, 1), 0u);
    const std::string json = ctl({"-o", "json", "stats"}, &rc);
    EXPECT_EQ(rc, 0);
    EXPECT_NE(json.find("\"key\":\"ctl-json\""), std::string::npos) << json;
    EXPECT_NE(json.find("\"completed\":1"), std::string::npos) << json;
    EXPECT_NE(json.find("\"captured_plans\":0"), std::string::npos) << json;
    EXPECT_NE(json.find("\"sessions\":1"), std::string::npos) << json;
  }
  const std::string version = ctl({"version"}, &rc);
  EXPECT_EQ(rc, 0);
  EXPECT_NE(version.find("API v1."), std::string::npos) << version;
  // JSON: capabilities are an array; status carries health, version and stats.
  const std::string version_json = ctl({"-o", "json", "version"}, &rc);
  EXPECT_EQ(rc, 0);
  EXPECT_NE(version_json.find("\"capabilities\":[\"mode.client\",\"mode.daemon\""), std::string::npos)
      << version_json;
  EXPECT_NE(version_json.find("\"backends\":[\"host\""), std::string::npos) << version_json;
  const std::string status_json = ctl({"-o", "json", "status"}, &rc);
  EXPECT_EQ(rc, 0);
  EXPECT_EQ(status_json.rfind("{\"health\":\"SERVING\",\"version\":{\"daemon_version\":", 0), 0u) << status_json;
  EXPECT_NE(status_json.find(",\"stats\":{\"sessions\":"), std::string::npos) << status_json;
  EXPECT_EQ(status_json.substr(status_json.size() - 4), "]}}\n") << status_json;
  EXPECT_EQ(ctl({"drain"}, &rc), "draining\n");
  EXPECT_EQ(rc, 0);
  EXPECT_EQ(ctl({"health"}, &rc), "NOT_SERVING\n");
  EXPECT_EQ(rc, 1);
  // Against no daemon: a clear failure, not a hang.
  testing::Process none({COLLECTIVECTL_BIN, "--socket", d.dir() + "/nobody.sock", "--timeout-ms", "500", "health"},
                        d.dir() + "/none.log");
  EXPECT_EQ(none.Wait(10000), 1);
  EXPECT_NE(none.Output().find("health check failed: UNAVAILABLE: "), std::string::npos) << none.Output();
}

// A member whose own process refuses it (say, a GPU rank that would share a
// hardware queue) tells the daemon instead of joining: the members already
// waiting fail at once with its reason, so do members arriving later, and
// once every rank was told the key is free again.
TEST(DaemonLifecycleTest, AMemberThatCannotJoinFailsItsPeersAtOnce) {
  Daemon d({"--join-timeout-ms", "20000"});
  ASSERT_TRUE(d.ready()) << d.Log();
  auto waiting = d.Connect("waiting");
  auto refusing = d.Connect("refusing");
  ASSERT_TRUE(waiting && refusing);
  auto refuse = [&](const std::string& key) {
    v1::CreateCommunicatorRequest req;
    req.set_session_id(refusing->session_id());
    req.set_key(key);
    req.set_world_size(2);
    req.set_rank(1);
    req.set_cannot_join("no hardware queue left");
    v1::CreateCommunicatorResponse resp;
    auto ctx = Ctx(refusing->session_token());
    return RawStub(d)->CreateCommunicator(ctx.get(), req, &resp);
  };
  const std::string reason = "rank 1 of 'refused' cannot join: no hardware queue left";
  Status early;
  const auto start = std::chrono::steady_clock::now();
  std::thread rank0([&] { Join(*waiting, "refused", 2, 0, ExecutionMode::kClient, &early); });
  std::this_thread::sleep_for(std::chrono::milliseconds(300));  // rank 0 is waiting by now
  grpc::Status said = refuse("refused");
  rank0.join();
  EXPECT_EQ(said.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_NE(said.error_message().find(reason), std::string::npos) << said.error_message();
  EXPECT_EQ(early.code(), StatusCode::kFailedPrecondition) << early.ToString();
  EXPECT_NE(early.message().find(reason), std::string::npos) << early.ToString();
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(5));  // not the 20 s join timeout

  // Refused first; the member arriving later is told at once.
  ASSERT_EQ(refuse("late").error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  Status late;
  Join(*waiting, "late", 2, 0, ExecutionMode::kClient, &late);
  EXPECT_EQ(late.code(), StatusCode::kFailedPrecondition) << late.ToString();
  EXPECT_NE(late.message().find("rank 1 of 'late' cannot join"), std::string::npos) << late.ToString();
  // Every rank was told: the key forms again.
  std::vector<std::unique_ptr<Communicator>> comms(2);
  RunRanks(2, [&](uint32_t r) { comms[r] = Join(r == 0 ? *waiting : *refusing, "late", 2, r); });
  EXPECT_TRUE(comms[0] && comms[1]);
}

TEST(DaemonLifecycleTest, BadFlagsAreRefused) {
  testing::TempDir dir;
  for (std::vector<std::string> flags : {std::vector<std::string>{"--ring-depth", "6"},
                                         std::vector<std::string>{"--backend", "cuda"},
                                         std::vector<std::string>{"--max-message-bytes", "12"},
                                         // a GPU-only negative control asked of the host backend
                                         std::vector<std::string>{"--backend", "host", "--unsafe-size-dependent-slots"}}) {
    std::vector<std::string> argv = {COLLECTIVED_DAEMON_BIN, "--socket", dir.path() + "/x.sock"};
    argv.insert(argv.end(), flags.begin(), flags.end());
    testing::Process p(argv, dir.path() + "/bad.log");
    EXPECT_EQ(p.Wait(5000), 2) << flags[0] << ": " << p.Output();
  }
  // Options with a fixed set of values: the CLI refuses others, naming the flag.
  for (const char* flag : {"--backend", "--gpu-gather-path", "--gpu-reduce-path", "--gpu-memory-export"}) {
    testing::Process p({COLLECTIVED_DAEMON_BIN, "--socket", dir.path() + "/x.sock", flag, "rocm"},
                       dir.path() + "/bad-choice.log");
    EXPECT_NE(p.Wait(5000), 0) << flag << ": " << p.Output();
    EXPECT_NE(p.Output().find(std::string(flag) + ": rocm not in"), std::string::npos) << p.Output();
  }
}

TEST(DaemonLifecycleTest, ConfigFileAndEnvironmentFollowPrecedence) {
  testing::TempDir dir;
  {
    std::ofstream f(dir.path() + "/c.toml");
    f << "max-message-bytes = 4096\nop-timeout-ms = 1234\nring-depth = 16\n";
  }
  setenv("COLLECTIVED_OP_TIMEOUT_MS", "2222", 1);
  testing::Process p({COLLECTIVED_DAEMON_BIN, "--config", dir.path() + "/c.toml", "--ring-depth", "32",
                      "--socket", dir.path() + "/s.sock", "--dump-config"},
                     dir.path() + "/dump.log");
  unsetenv("COLLECTIVED_OP_TIMEOUT_MS");
  ASSERT_EQ(p.Wait(5000), 0) << p.Output();
  const std::string out = p.Output();
  EXPECT_NE(out.find("max-message-bytes=4096"), std::string::npos) << out;  // file over default
  EXPECT_NE(out.find("op-timeout-ms=2222"), std::string::npos) << out;      // env over file
  EXPECT_NE(out.find("ring-depth=32"), std::string::npos) << out;           // flag over file
  // The config file we ship parses.
  testing::Process shipped({COLLECTIVED_DAEMON_BIN, "--config", COLLECTIVED_SOURCE_DIR "/deploy/collectived.toml",
                            "--dump-config"},
                           dir.path() + "/shipped.log");
  EXPECT_EQ(shipped.Wait(5000), 0) << shipped.Output();
}

// Every setting out of range, given as a flag or in the config file, stops
// start-up with a message naming it; so does a key the daemon does not know.
TEST(DaemonLifecycleTest, OutOfRangeSettingsAndUnknownKeysStopStartUp) {
  testing::TempDir dir;
  const std::vector<std::vector<std::string>> bad_flags = {
      {"--log-level", "bogus"},           {"--ring-depth", "8192"},          {"--ring-depth", "0"},
      {"--one-shot-max-bytes", "1099511627776"}, {"--op-timeout-ms", "0"}, {"--join-timeout-ms", "0"},
      {"--join-timeout-ms", "3600001"},   {"--max-buffer-bytes", "1"},        {"--drain-timeout-ms", "3600001"},
      {"--debug-delay-rank", "64"},       {"--debug-delay-us", "99999999"},   {"--debug-delay-copyout-us", "99999999"},
      {"--gpu-max-blocks-per-rank", "129"}};
  for (const auto& flags : bad_flags) {
    std::vector<std::string> argv = {COLLECTIVED_DAEMON_BIN, "--socket", dir.path() + "/x.sock"};
    argv.insert(argv.end(), flags.begin(), flags.end());
    testing::Process p(argv, dir.path() + "/bad.log");
    EXPECT_NE(p.Wait(5000), 0) << flags[0] << " " << flags[1] << ": " << p.Output();
    EXPECT_NE(p.Output().find(flags[0]), std::string::npos) << flags[0] << " " << flags[1] << ": " << p.Output();
    EXPECT_FALSE(std::filesystem::exists(dir.path() + "/x.sock")) << flags[0];
  }
  for (const auto& [line, names] : std::vector<std::pair<std::string, std::string>>{
           {"log-level = \"bogus\"", "log-level"}, {"ring-depth = 8192", "ring-depth"},
           {"ring-dept = 16", "ring-dept"}, {"[server]\nsocket = \"x\"", "parse server"}}) {
    {
      std::ofstream f(dir.path() + "/bad.toml");
      f << line << "\n";
    }
    testing::Process p({COLLECTIVED_DAEMON_BIN, "--socket", dir.path() + "/x.sock", "--config", dir.path() + "/bad.toml"},
                       dir.path() + "/bad-file.log");
    EXPECT_NE(p.Wait(5000), 0) << line << ": " << p.Output();
    EXPECT_NE(p.Output().find(names), std::string::npos) << line << ": " << p.Output();
  }
}

// --dump-config prints a config file: fed back, it starts a daemon (not
// another dump), and dumping from it gives the same text.
TEST(DaemonLifecycleTest, DumpedConfigIsValidInput) {
  testing::TempDir dir;
  auto dump = [&](std::vector<std::string> args, const std::string& log) {
    std::vector<std::string> argv = {COLLECTIVED_DAEMON_BIN};
    argv.insert(argv.end(), args.begin(), args.end());
    argv.push_back("--dump-config");
    testing::Process p(argv, dir.path() + "/" + log);
    EXPECT_EQ(p.Wait(5000), 0) << p.Output();
    return p.Output();
  };
  const std::string first = dump({"--socket", dir.path() + "/d.sock", "--ring-depth", "16", "--log-level", "debug",
                                  "--debug-delay-rank", "-1"},
                                 "dump1.log");
  EXPECT_EQ(first.find("dump-config"), std::string::npos) << first;
  // No option left without a value, but for those whose empty value means none (groups, metrics off).
  std::istringstream lines(first);
  for (std::string line; std::getline(lines, line);) {
    if (line.rfind("admin-group=", 0) == 0 || line.rfind("shared-group=", 0) == 0 ||
        line.rfind("coordinator=", 0) == 0 || line.rfind("cluster-secret=", 0) == 0 ||
        line.rfind("metrics-listen=", 0) == 0) {
      continue;
    }
    EXPECT_EQ(line.find("=\"\""), std::string::npos) << line;
  }
  {
    std::ofstream f(dir.path() + "/dumped.toml");
    f << first;
  }
  EXPECT_EQ(dump({"--config", dir.path() + "/dumped.toml"}, "dump2.log"), first);
  // It starts and serves (the harness adds its own socket and log level on
  // the command line, which win over the file).
  Daemon d({"--config", dir.path() + "/dumped.toml"});
  ASSERT_TRUE(d.ready()) << d.Log();
  auto c = d.Connect();
  ASSERT_NE(c, nullptr);
  auto comm = Join(*c, "from-dump", 1, 0);
  EXPECT_EQ(SumAllReduce(*c, *comm, 16, 9), 0u);
}

// On a machine without a GPU the log says so plainly: no CUDA driver
// version, no MPS advice.
TEST(DaemonLifecycleTest, WithoutAGpuTheLogSaysSoPlainly) {
  Daemon d;
  ASSERT_TRUE(d.ready()) << d.Log();
  const std::string log = d.Log();
  if (log.find("backend auto: host") == std::string::npos) GTEST_SKIP() << "a GPU is visible here";
  EXPECT_TRUE(log.find("backend auto: host (no GPU is visible to this process)") != std::string::npos ||
              log.find("built without the CUDA toolkit") != std::string::npos)
      << log;
  EXPECT_EQ(log.find("driver"), std::string::npos) << log;
  EXPECT_EQ(log.find("MPS"), std::string::npos) << log;
}

}  // namespace
}  // namespace collectived
