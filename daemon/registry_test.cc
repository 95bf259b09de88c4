// The registry in-process, on the host backend: the control plane's refusals,
// timeouts, budget and cleanup without spawning the daemon (the integration
// tests in tests/integration/daemon_test.cc cover the same through gRPC).
#include "daemon/registry.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "ring/matcher.h"
#include "ring/segment_layout.h"

namespace collectived::daemon {
namespace {

constexpr uint32_t kPid = 4321;
constexpr uint64_t kBudget = 1 << 20;

// A session's owner as the acceptor reads it (SO_PEERCRED): uid 1000 in group 100.
ipc::PeerCredentials Owner(uint32_t uid = 1000, std::vector<uint32_t> groups = {}) {
  ipc::PeerCredentials c;
  c.uid = uid;
  c.gid = 100;
  c.pid = static_cast<int32_t>(kPid);
  c.groups = std::move(groups);
  return c;
}

DaemonConfig TestConfig() {
  DaemonConfig c;
  c.backend = Backend::kHost;
  c.max_message_bytes = 64 << 10;
  c.ring_depth = 8;
  c.op_timeout_ms = 2000;
  c.join_timeout_ms = 2000;
  c.max_buffer_bytes = kBudget;
  return c;
}

// Join's answer. Shared with the callback: a join still waiting when a test
// ends is answered by the registry's destructor, after the test's locals died.
struct Answer {
  int calls = 0;
  Status status;
  JoinResult result;
};
using AnswerPtr = std::shared_ptr<Answer>;

JoinDone Into(const AnswerPtr& a) {
  return [a](const Status& s, const JoinResult& r) {
    ++a->calls;
    a->status = s;
    a->result = r;
  };
}

JoinRequest Req(uint64_t session, const std::string& key, uint32_t world, uint32_t rank,
                ExecutionMode mode = ExecutionMode::kDefault) {
  JoinRequest r;
  r.session_id = session;
  r.key = key;
  r.world_size = world;
  r.rank = rank;
  r.mode = mode;
  return r;
}

bool Contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

// The parameters in communicator `comm`'s segment, as a member maps it.
void SegmentParamsOf(Registry& reg, uint64_t session, uint64_t comm, ring::SegmentParams* out) {
  WindowFd w;
  ASSERT_TRUE(reg.FetchWindow(session, comm, &w).ok());
  void* p = mmap(nullptr, w.size, PROT_READ | PROT_WRITE, MAP_SHARED, w.fd, 0);
  ASSERT_NE(p, MAP_FAILED);
  ring::CommSegment seg;
  const Status attached = ring::CommSegment::Attach(p, w.size, &seg);
  if (attached.ok()) *out = seg.params();
  munmap(p, w.size);
  ASSERT_TRUE(attached.ok()) << attached.ToString();
}

class RegistryTest : public ::testing::Test {
 protected:
  uint64_t Attach(const std::string& name = "test") {
    uint64_t id = 0, token = 0;
    EXPECT_TRUE(reg_.Attach(name, kPid, Owner(), &id, &token).ok());
    return id;
  }

  AnswerPtr Join(const JoinRequest& req) {
    auto a = std::make_shared<Answer>();
    reg_.Join(req, Into(a));
    return a;
  }

  // Every rank of `key` joins from its own session; returns the comm id.
  uint64_t Form(const std::vector<uint64_t>& sessions, const std::string& key,
                ExecutionMode mode = ExecutionMode::kDefault) {
    std::vector<AnswerPtr> answers;
    for (uint32_t r = 0; r < sessions.size(); ++r) {
      answers.push_back(Join(Req(sessions[r], key, static_cast<uint32_t>(sessions.size()), r, mode)));
    }
    for (const auto& a : answers) {
      EXPECT_EQ(a->calls, 1);
      EXPECT_TRUE(a->status.ok()) << a->status.ToString();
    }
    return answers[0]->result.comm_id;
  }

  // The communicator `key` in the stats (forming or formed), if any.
  std::optional<CommStats> Find(const std::string& key) {
    for (const auto& c : reg_.Stats().communicators) {
      if (c.key == key) return c;
    }
    return std::nullopt;
  }

  Registry reg_{TestConfig()};
};

TEST_F(RegistryTest, AJoinIsAnsweredOnceWhenTheLastRankJoins) {
  const uint64_t s0 = Attach(), s1 = Attach();
  AnswerPtr a0 = Join(Req(s0, "pair", 2, 0));
  EXPECT_EQ(a0->calls, 0);  // waits for rank 1
  AnswerPtr a1 = Join(Req(s1, "pair", 2, 1));
  ASSERT_EQ(a0->calls, 1);
  ASSERT_EQ(a1->calls, 1);
  ASSERT_TRUE(a0->status.ok()) << a0->status.ToString();
  ASSERT_TRUE(a1->status.ok()) << a1->status.ToString();
  EXPECT_EQ(a0->result.comm_id, a1->result.comm_id);
  EXPECT_EQ(a0->result.window_id, a0->result.comm_id);
  EXPECT_GT(a0->result.window_bytes, 0u);
  EXPECT_EQ(a0->result.mode, ExecutionMode::kClient);  // the host default
  EXPECT_FALSE(a0->result.gpu);

  const RegistryStats stats = reg_.Stats();
  ASSERT_EQ(stats.communicators.size(), 1u);
  const CommStats& c = stats.communicators[0];
  EXPECT_EQ(c.comm_id, a0->result.comm_id);
  EXPECT_EQ(c.key, "pair");
  EXPECT_EQ(c.world_size, 2u);
  EXPECT_EQ(c.mode, ExecutionMode::kClient);
  ASSERT_EQ(c.ranks.size(), 2u);
  EXPECT_EQ(c.ranks[0].session_id, s0);
  EXPECT_EQ(c.ranks[1].session_id, s1);
  EXPECT_FALSE(c.aborted);
}

// Every refusal names what is wrong, and none disturbs the member waiting.
TEST_F(RegistryTest, JoinRefusalsNameTheFieldAndLeaveTheWaitingMemberAlone) {
  const uint64_t s0 = Attach(), s1 = Attach();
  AnswerPtr waiting = Join(Req(s0, "k", 2, 0));
  struct Case {
    JoinRequest req;
    StatusCode code;
    std::string says;
  };
  std::vector<Case> cases;
  cases.push_back({Req(999999, "k", 2, 1), StatusCode::kNotFound, "session 999999 not found"});
  cases.push_back({Req(s1, "", 2, 1), StatusCode::kInvalidArgument, "communicator key is empty"});
  cases.push_back({Req(s1, "k", 0, 0), StatusCode::kInvalidArgument, "world_size 0 outside [1, 64]"});
  cases.push_back({Req(s1, "k", 65, 1), StatusCode::kInvalidArgument, "world_size 65 outside [1, 64]"});
  cases.push_back({Req(s1, "k", 2, 2), StatusCode::kInvalidArgument, "rank 2 outside world of 2"});
  cases.push_back({Req(s1, "k", 2, 1, static_cast<ExecutionMode>(7)), StatusCode::kInvalidArgument,
                   "unknown execution mode 7"});
  cases.push_back({Req(s1, "k", 3, 1), StatusCode::kInvalidArgument,
                   "world_size 3 differs from 2 of earlier members of 'k'"});
  cases.push_back({Req(s1, "k", 2, 0), StatusCode::kAlreadyExists, "rank 0 of 'k' already joined"});
  cases.push_back({Req(s1, "k", 2, 1, ExecutionMode::kDaemon), StatusCode::kInvalidArgument,
                   "execution mode daemon differs from client of earlier members"});
  JoinRequest timeout = Req(s1, "k", 2, 1);
  timeout.op_timeout_ms = 1234;
  cases.push_back({timeout, StatusCode::kInvalidArgument, "op_timeout_ms 1234 differs from 2000 of earlier members"});
  JoinRequest gpu = Req(s1, "k", 2, 1);
  gpu.device_uuid = "GPU-0";
  cases.push_back({gpu, StatusCode::kFailedPrecondition,
                   "this collectived serves the 'host' backend; GPU communicators need a daemon on the cuda backend"});
  JoinRequest heap = Req(s1, "k", 2, 1);
  heap.gpu_heap_bytes = 4096;
  cases.push_back({heap, StatusCode::kInvalidArgument, "gpu_heap_bytes needs a GPU communicator"});

  for (const Case& c : cases) {
    AnswerPtr a = Join(c.req);
    EXPECT_EQ(a->calls, 1) << c.says;
    EXPECT_EQ(a->status.code(), c.code) << c.says << ": " << a->status.ToString();
    EXPECT_TRUE(Contains(a->status.message(), c.says)) << a->status.ToString();
    EXPECT_EQ(waiting->calls, 0) << "refusing '" << c.says << "' answered the waiting member";
  }
  AnswerPtr last = Join(Req(s1, "k", 2, 1));
  EXPECT_TRUE(last->status.ok()) << last->status.ToString();
  ASSERT_EQ(waiting->calls, 1);
  EXPECT_TRUE(waiting->status.ok()) << waiting->status.ToString();
  EXPECT_EQ(waiting->result.comm_id, last->result.comm_id);
}

TEST_F(RegistryTest, AMemberThatCannotJoinFailsTheWaitingOnesWithItsReason) {
  const uint64_t s0 = Attach(), s1 = Attach();
  const std::string reason = "rank 1 of 'q' cannot join: no hardware queue left";
  AnswerPtr waiting = Join(Req(s0, "q", 2, 0));
  JoinRequest refuse = Req(s1, "q", 2, 1);
  refuse.cannot_join = "no hardware queue left";
  AnswerPtr refused = Join(refuse);
  EXPECT_EQ(refused->calls, 1);
  EXPECT_EQ(refused->status.code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(refused->status.message(), reason);
  ASSERT_EQ(waiting->calls, 1);  // at once, not at its join timeout
  EXPECT_EQ(waiting->status.code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(waiting->status.message(), reason);
  EXPECT_FALSE(Find("q").has_value());  // withdrawn and dropped

  // Refused first: the member arriving later is told the same, at once.
  JoinRequest early = Req(s1, "late", 2, 1);
  early.cannot_join = "no hardware queue left";
  EXPECT_EQ(Join(early)->status.code(), StatusCode::kFailedPrecondition);
  AnswerPtr late = Join(Req(s0, "late", 2, 0));
  ASSERT_EQ(late->calls, 1);
  EXPECT_EQ(late->status.code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(late->status.message(), "rank 1 of 'late' cannot join: no hardware queue left");
  // Every rank was told: the key forms again.
  Form({s0, s1}, "late");
}

TEST_F(RegistryTest, AJoinPastItsTimeoutIsDeadlineExceededNamingTheMissingRanks) {
  const uint64_t s0 = Attach(), s1 = Attach(), s2 = Attach();
  JoinRequest quick = Req(s0, "slow", 3, 0);
  quick.join_timeout_ms = 200;  // its own, shorter than the registry's 2000
  AnswerPtr a0 = Join(quick);
  AnswerPtr a1 = Join(Req(s1, "slow", 3, 1));
  reg_.Housekeeping();
  EXPECT_EQ(a0->calls, 0);  // not yet due
  std::this_thread::sleep_for(std::chrono::milliseconds(400));
  reg_.Housekeeping();
  ASSERT_EQ(a0->calls, 1);
  EXPECT_EQ(a0->status.code(), StatusCode::kDeadlineExceeded);
  EXPECT_EQ(a0->status.message(),
            "only 2 of 3 ranks joined 'slow' before rank 0's join timed out (missing ranks 2)");
  EXPECT_EQ(a1->calls, 0);  // its own timeout is the registry's
  // Withdrawn: rank 0 is no phantom member, and can join again.
  const std::optional<CommStats> forming = Find("slow");
  ASSERT_TRUE(forming.has_value());
  EXPECT_EQ(forming->ranks[0].session_id, 0u);
  EXPECT_EQ(forming->ranks[1].session_id, s1);
  AnswerPtr again = Join(Req(s0, "slow", 3, 0));
  AnswerPtr a2 = Join(Req(s2, "slow", 3, 2));
  for (const AnswerPtr& a : {again, a1, a2}) {
    ASSERT_EQ(a->calls, 1);
    EXPECT_TRUE(a->status.ok()) << a->status.ToString();
  }
}

TEST_F(RegistryTest, CancelPendingJoinsAnswersEveryWaitingMemberUnavailable) {
  const uint64_t s0 = Attach(), s1 = Attach();
  AnswerPtr a = Join(Req(s0, "x", 2, 0));
  AnswerPtr b = Join(Req(s1, "y", 3, 2));
  reg_.CancelPendingJoins("collectived is shutting down");
  for (const AnswerPtr& p : {a, b}) {
    ASSERT_EQ(p->calls, 1);
    EXPECT_EQ(p->status.code(), StatusCode::kUnavailable);
    EXPECT_EQ(p->status.message(), "collectived is shutting down");
  }
  EXPECT_TRUE(reg_.Stats().communicators.empty());
}

TEST_F(RegistryTest, ASessionEndingWhileItsJoinWaitsWithdrawsIt) {
  const uint64_t s0 = Attach();
  AnswerPtr a = Join(Req(s0, "gone", 2, 0));
  ASSERT_TRUE(reg_.Detach(s0).ok());
  ASSERT_EQ(a->calls, 1);
  EXPECT_EQ(a->status.code(), StatusCode::kCancelled);
  EXPECT_EQ(a->status.message(),
            "join withdrawn: session " + std::to_string(s0) + " (pid " + std::to_string(kPid) + ") detached");
  EXPECT_TRUE(reg_.Stats().communicators.empty());
}

TEST_F(RegistryTest, DrainingRefusesNewWorkUnavailable) {
  const uint64_t s0 = Attach();
  reg_.SetDraining();
  uint64_t id = 0, token = 0;
  EXPECT_EQ(reg_.Attach("late", kPid, Owner(), &id, &token).code(), StatusCode::kUnavailable);
  BufferInfo info{};
  EXPECT_EQ(reg_.AllocBuffer(s0, 64, &info).code(), StatusCode::kUnavailable);
  AnswerPtr a = Join(Req(s0, "d", 1, 0));
  EXPECT_EQ(a->status.code(), StatusCode::kUnavailable);
  EXPECT_TRUE(Contains(a->status.message(), "draining")) << a->status.ToString();
  EXPECT_TRUE(reg_.Stats().draining);
}

TEST_F(RegistryTest, BuffersStayWithinTheDaemonsBudget) {
  const uint64_t s0 = Attach(), s1 = Attach();
  BufferInfo big{}, rest{}, info{};
  Status s = reg_.AllocBuffer(s0, 0, &info);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(), "buffer of 0 bytes");
  ASSERT_TRUE(reg_.AllocBuffer(s0, 768 << 10, &big).ok());
  EXPECT_EQ(big.window_id, big.buffer_id);
  EXPECT_EQ(big.offset, 0u);
  EXPECT_EQ(big.bytes, 768u << 10);
  EXPECT_GE(big.window_bytes, big.bytes);
  s = reg_.AllocBuffer(s1, 512 << 10, &info);
  EXPECT_EQ(s.code(), StatusCode::kResourceExhausted);
  EXPECT_EQ(s.message(), "buffer of 524288 bytes exceeds the daemon's budget (786432 of 1048576 bytes in use)");
  EXPECT_EQ(reg_.AllocBuffer(s1, kBudget * 2, &info).code(), StatusCode::kResourceExhausted);
  // The budget is all sessions' together, and may be filled exactly.
  ASSERT_TRUE(reg_.AllocBuffer(s1, 256 << 10, &rest).ok());
  EXPECT_EQ(reg_.AllocBuffer(s1, 1, &info).code(), StatusCode::kResourceExhausted);
  RegistryStats stats = reg_.Stats();
  EXPECT_EQ(stats.sessions, 2u);
  EXPECT_EQ(stats.buffers, 2u);
  EXPECT_EQ(stats.buffer_bytes, kBudget);
  // Freeing gives the bytes back.
  ASSERT_TRUE(reg_.FreeBuffer(s0, big.buffer_id).ok());
  EXPECT_EQ(reg_.Stats().buffer_bytes, 256u << 10);
  EXPECT_TRUE(reg_.AllocBuffer(s1, 512 << 10, &info).ok());
  EXPECT_EQ(reg_.AllocBuffer(999999, 64, &info).code(), StatusCode::kNotFound);
}

TEST_F(RegistryTest, FreeingAnUnknownOrForeignBufferIsNotFound) {
  const uint64_t s0 = Attach(), s1 = Attach();
  BufferInfo mine{};
  ASSERT_TRUE(reg_.AllocBuffer(s0, 4096, &mine).ok());
  Status s = reg_.FreeBuffer(s0, 424242);
  EXPECT_EQ(s.code(), StatusCode::kNotFound);
  EXPECT_EQ(s.message(), "buffer 424242 not found in this session");
  s = reg_.FreeBuffer(s1, mine.buffer_id);  // another session's
  EXPECT_EQ(s.code(), StatusCode::kNotFound);
  EXPECT_EQ(s.message(), "buffer " + std::to_string(mine.buffer_id) + " not found in this session");
  EXPECT_EQ(reg_.Stats().buffers, 1u);  // still there
  s = reg_.FreeBuffer(999999, mine.buffer_id);
  EXPECT_EQ(s.code(), StatusCode::kNotFound);
  EXPECT_EQ(s.message(), "session 999999 not found");
  ASSERT_TRUE(reg_.FreeBuffer(s0, mine.buffer_id).ok());
  EXPECT_EQ(reg_.FreeBuffer(s0, mine.buffer_id).code(), StatusCode::kNotFound);  // twice
  EXPECT_EQ(reg_.Stats().buffers, 0u);
}

TEST_F(RegistryTest, FetchWindowServesOnlyWhatTheSessionMayMap) {
  const uint64_t s0 = Attach(), s1 = Attach(), outsider = Attach();
  BufferInfo b{};
  ASSERT_TRUE(reg_.AllocBuffer(s0, 4096, &b).ok());
  WindowFd w;
  ASSERT_TRUE(reg_.FetchWindow(s0, b.window_id, &w).ok());
  EXPECT_GE(w.fd, 0);
  EXPECT_EQ(w.size, b.window_bytes);
  EXPECT_FALSE(w.close_after_send);  // borrowed, kept open by `keep`
  EXPECT_NE(w.keep, nullptr);
  WindowFd other;
  Status s = reg_.FetchWindow(s1, b.window_id, &other);
  EXPECT_EQ(s.code(), StatusCode::kNotFound);
  EXPECT_EQ(s.message(), "window " + std::to_string(b.window_id) + " is not one this session may map");
  const uint64_t comm = Form({s0, s1}, "w");
  WindowFd seg;
  ASSERT_TRUE(reg_.FetchWindow(s1, comm, &seg).ok());  // a member maps the segment
  EXPECT_GT(seg.size, 0u);
  EXPECT_EQ(reg_.FetchWindow(outsider, comm, &other).code(), StatusCode::kNotFound);
  EXPECT_EQ(reg_.FetchWindow(999999, comm, &other).code(), StatusCode::kNotFound);
}

// The one-shot limit every poster of a host communicator reads from its
// segment: the configured one at two ranks client-executed, every size at
// two ranks daemon-executed, 2 KiB at more (ring::HostOneShotMaxBytes).
TEST_F(RegistryTest, HostCommunicatorsOfMoreThanTwoRanksLeaveOneShotEarly) {
  for (ExecutionMode mode : {ExecutionMode::kDefault, ExecutionMode::kDaemon}) {
    for (uint32_t n : {2u, 4u}) {
      std::vector<uint64_t> sessions;
      for (uint32_t r = 0; r < n; ++r) sessions.push_back(Attach());
      const uint64_t comm = Form(sessions, "one-shot-" + std::to_string(n) + ExecutionModeName(mode), mode);
      ring::SegmentParams params;
      ASSERT_NO_FATAL_FAILURE(SegmentParamsOf(reg_, sessions[0], comm, &params));
      const uint64_t two_ranks = mode == ExecutionMode::kDaemon ? UINT64_MAX : TestConfig().one_shot_max_bytes;
      EXPECT_EQ(params.one_shot_max_bytes, n == 2 ? two_ranks : ring::kHostWideOneShotMaxBytes)
          << n << " ranks, " << ExecutionModeName(mode);
      EXPECT_GT(TestConfig().one_shot_max_bytes, ring::kHostWideOneShotMaxBytes);  // else the check above proves nothing
      EXPECT_EQ(params.gpu_flags, 0u);  // the GPU fence options are off by default
    }
  }
}

TEST_F(RegistryTest, SessionCleanupFreesWhatItHeldAndAbortsItsCommunicators) {
  const uint64_t s0 = Attach(), s1 = Attach();
  BufferInfo b{};
  ASSERT_TRUE(reg_.AllocBuffer(s0, 64 << 10, &b).ok());
  ASSERT_TRUE(reg_.AllocBuffer(s0, 128 << 10, &b).ok());
  ASSERT_TRUE(reg_.AllocBuffer(s1, 4096, &b).ok());
  Form({s0, s1}, "c");
  ASSERT_TRUE(reg_.Detach(s0).ok());
  RegistryStats stats = reg_.Stats();
  EXPECT_EQ(stats.sessions, 1u);
  EXPECT_EQ(stats.buffers, 1u);
  EXPECT_EQ(stats.buffer_bytes, 4096u);
  ASSERT_EQ(stats.communicators.size(), 1u);
  const CommStats& c = stats.communicators[0];
  EXPECT_TRUE(c.aborted);  // rank 1 would wait for rank 0 forever
  EXPECT_EQ(c.abort_reason, "communicator aborted: rank 0 left: session " + std::to_string(s0) + " (pid " +
                                std::to_string(kPid) + ") detached");
  EXPECT_EQ(c.ranks[0].session_id, 0u);
  EXPECT_EQ(c.ranks[1].session_id, s1);
  Status again = reg_.Detach(s0);
  EXPECT_EQ(again.code(), StatusCode::kNotFound);
  EXPECT_EQ(again.message(), "session " + std::to_string(s0) + " not found");

  // The last member's connection closing ends the session and closes the communicator.
  reg_.ConnectionClosed(s1);
  stats = reg_.Stats();
  EXPECT_EQ(stats.sessions, 0u);
  EXPECT_EQ(stats.buffers, 0u);
  EXPECT_EQ(stats.buffer_bytes, 0u);
  EXPECT_TRUE(stats.communicators.empty());
  ASSERT_EQ(stats.recently_closed.size(), 1u);
  EXPECT_EQ(stats.recently_closed[0].key, "c");
  EXPECT_TRUE(stats.recently_closed[0].closed);
  EXPECT_EQ(reg_.session_count(), 0u);
  // The whole budget is free again.
  const uint64_t s2 = Attach();
  EXPECT_TRUE(reg_.AllocBuffer(s2, kBudget, &b).ok());
}

TEST_F(RegistryTest, RecentlyClosedKeepsTheLastSixteenNewestLast) {
  const uint64_t s0 = Attach();
  for (int i = 0; i < 18; ++i) {
    const uint64_t comm = Form({s0}, "k" + std::to_string(i));
    ASSERT_TRUE(reg_.DestroyCommunicator(s0, comm, 0).ok());
  }
  const RegistryStats stats = reg_.Stats();
  EXPECT_TRUE(stats.communicators.empty());
  ASSERT_EQ(stats.recently_closed.size(), 16u);
  EXPECT_EQ(stats.recently_closed.front().key, "k2");
  EXPECT_EQ(stats.recently_closed.back().key, "k17");
}

TEST_F(RegistryTest, CommunicatorCallsCheckMembership) {
  const uint64_t s0 = Attach(), s1 = Attach();
  const uint64_t comm = Form({s0, s1}, "m");
  Status s = reg_.DestroyCommunicator(s0, comm, 1);
  EXPECT_EQ(s.code(), StatusCode::kPermissionDenied);
  EXPECT_EQ(s.message(),
            "session " + std::to_string(s0) + " is not rank 1 of communicator " + std::to_string(comm));
  s = reg_.DestroyCommunicator(s0, comm + 1000, 0);
  EXPECT_EQ(s.code(), StatusCode::kNotFound);
  EXPECT_EQ(s.message(), "communicator " + std::to_string(comm + 1000) + " not found");
  AnswerPtr waiting = Join(Req(s0, "forming", 2, 0));
  const std::optional<CommStats> forming = Find("forming");
  ASSERT_TRUE(forming.has_value());
  s = reg_.DestroyCommunicator(s0, forming->comm_id, 0);
  EXPECT_EQ(s.code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(s.message(), "communicator " + std::to_string(forming->comm_id) + " is still forming");
  ASSERT_TRUE(reg_.DestroyCommunicator(s0, comm, 0).ok());
  EXPECT_EQ(reg_.DestroyCommunicator(s0, comm, 0).code(), StatusCode::kPermissionDenied);  // left already
}

TEST_F(RegistryTest, SubmitRunsDaemonExecutedOpsAndQueryOpReportsThem) {
  const uint64_t s0 = Attach(), s1 = Attach();
  const uint64_t comm = Form({s0, s1}, "d", ExecutionMode::kDaemon);
  constexpr uint64_t kCount = 256;
  BufferInfo b[2];
  for (uint32_t r = 0; r < 2; ++r) {
    ASSERT_TRUE(reg_.AllocBuffer(r == 0 ? s0 : s1, kCount * 4, &b[r]).ok());
    void* p = nullptr;  // the daemon's own mapping, as its executors see it
    ASSERT_TRUE(reg_.ResolveBuffer(comm, r, b[r].buffer_id, 0, kCount * 4, &p).ok());
    for (uint64_t i = 0; i < kCount; ++i) static_cast<float*>(p)[i] = static_cast<float>((r + 1) * i);
  }
  uint64_t index[2] = {99, 99};
  for (uint32_t r = 0; r < 2; ++r) {
    ring::OpDescriptor d{};
    d.kind = CollectiveKind::kAllReduce;
    d.dtype = DataType::kFloat32;
    d.reduce_op = ReduceOp::kSum;
    d.count = kCount;
    d.send_buffer_id = d.recv_buffer_id = b[r].buffer_id;
    ASSERT_TRUE(reg_.Submit(r == 0 ? s0 : s1, comm, r, d, &index[r]).ok());
    EXPECT_EQ(index[r], 0u);
  }
  for (uint32_t r = 0; r < 2; ++r) {
    bool done = false;
    Status op;
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (!done && std::chrono::steady_clock::now() < deadline) {
      ASSERT_TRUE(reg_.QueryOp(r == 0 ? s0 : s1, comm, r, 0, &done, &op).ok());
      if (!done) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    ASSERT_TRUE(done) << "rank " << r;
    EXPECT_TRUE(op.ok()) << op.ToString();
    void* p = nullptr;
    ASSERT_TRUE(reg_.ResolveBuffer(comm, r, b[r].buffer_id, 0, kCount * 4, &p).ok());
    for (uint64_t i = 0; i < kCount; ++i) ASSERT_EQ(static_cast<float*>(p)[i], 3.0f * i) << "rank " << r;
  }
  bool done = false;
  Status op;
  Status s = reg_.QueryOp(s0, comm, 0, 5, &done, &op);
  EXPECT_EQ(s.code(), StatusCode::kNotFound);
  EXPECT_EQ(s.message(), "op 5 was never posted (rank 0 posted 1)");
  const std::optional<CommStats> c = Find("d");
  ASSERT_TRUE(c.has_value());
  EXPECT_EQ(c->posted, 1u);
  EXPECT_EQ(c->completed, 1u);
  EXPECT_EQ(c->failed, 0u);

  // Refusals name the buffer or range.
  ring::OpDescriptor d{};
  d.kind = CollectiveKind::kAllReduce;
  d.dtype = DataType::kFloat32;
  d.reduce_op = ReduceOp::kSum;
  d.count = kCount;
  d.send_buffer_id = d.recv_buffer_id = 987654;
  uint64_t i = 0;
  s = reg_.Submit(s0, comm, 0, d, &i);
  EXPECT_EQ(s.code(), StatusCode::kNotFound);
  EXPECT_EQ(s.message(), "send buffer 987654 not found in this session");
  d.send_buffer_id = d.recv_buffer_id = b[0].buffer_id;
  d.count = kCount + 1;
  s = reg_.Submit(s0, comm, 0, d, &i);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(Contains(s.message(), "exceeds buffer " + std::to_string(b[0].buffer_id))) << s.ToString();
  void* p = nullptr;
  s = reg_.ResolveBuffer(comm, 0, b[0].buffer_id, 8, kCount * 4, &p);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  s = reg_.ResolveBuffer(comm, 0, b[1].buffer_id, 0, 4, &p);  // rank 1's, not rank 0's
  EXPECT_EQ(s.code(), StatusCode::kNotFound);

  const uint64_t client = Form({s0}, "c");
  s = reg_.Submit(s0, client, 0, d, &i);
  EXPECT_EQ(s.code(), StatusCode::kFailedPrecondition);
  EXPECT_TRUE(Contains(s.message(), "Submit needs a daemon-executed communicator")) << s.ToString();
}

TEST_F(RegistryTest, BindConnectionChecksTheTokenAndTheUid) {
  uint64_t id = 0, token = 0;
  ASSERT_TRUE(reg_.Attach("bind", kPid, Owner(), &id, &token).ok());
  EXPECT_EQ(reg_.BindConnection(id, token + 1, 1000).code(), StatusCode::kPermissionDenied);
  EXPECT_EQ(reg_.BindConnection(id + 1000, token, 1000).code(), StatusCode::kNotFound);
  EXPECT_EQ(reg_.BindConnection(id, token, 1001).code(), StatusCode::kPermissionDenied);  // the right token, another uid
  EXPECT_TRUE(reg_.BindConnection(id, token, 1000).ok());
  EXPECT_EQ(reg_.BindConnection(id, token, 1000).code(), StatusCode::kAlreadyExists);
}

// A call acts for a session only from its owner's uid with its token.
TEST_F(RegistryTest, AuthorizeNeedsTheOwnersUidAndToken) {
  uint64_t id = 0, token = 0;
  ASSERT_TRUE(reg_.Attach("auth", kPid, Owner(1000), &id, &token).ok());
  EXPECT_NE(token, 0u);
  EXPECT_TRUE(reg_.Authorize(id, token, Owner(1000)).ok());
  Status s = reg_.Authorize(id, token, Owner(1001));
  EXPECT_EQ(s.code(), StatusCode::kPermissionDenied);
  EXPECT_TRUE(Contains(s.message(), "belongs to uid 1000; this call comes from uid 1001")) << s.ToString();
  s = reg_.Authorize(id, token ^ 1, Owner(1000));
  EXPECT_EQ(s.code(), StatusCode::kPermissionDenied);
  EXPECT_TRUE(Contains(s.message(), "session token")) << s.ToString();
  EXPECT_EQ(reg_.Authorize(id, 0, Owner(1000)).code(), StatusCode::kPermissionDenied);  // no token sent
  EXPECT_EQ(reg_.Authorize(id + 1000, token, Owner(1000)).code(), StatusCode::kNotFound);
  // Two sessions never share a token.
  uint64_t id2 = 0, token2 = 0;
  ASSERT_TRUE(reg_.Attach("auth2", kPid, Owner(1000), &id2, &token2).ok());
  EXPECT_NE(token, token2);
  EXPECT_EQ(reg_.Authorize(id2, token, Owner(1000)).code(), StatusCode::kPermissionDenied);
}

// A key formed by one uid is refused to another, whose attempt leaves the
// forming communicator untouched; a shared group that holds both lets it in.
TEST(RegistryAccessTest, AKeyOfOneUidIsRefusedToAnotherUnlessASharedGroupHoldsBoth) {
  for (const bool shared : {false, true}) {
    AccessPolicy access(0);
    ASSERT_TRUE(AccessPolicy::Resolve(0, "", shared ? "0" : "", &access).ok());
    Registry reg(TestConfig(), access);
    uint64_t a = 0, b = 0, token = 0;
    ASSERT_TRUE(reg.Attach("a", kPid, Owner(1000, {0}), &a, &token).ok());
    ASSERT_TRUE(reg.Attach("b", kPid, Owner(2000, {0}), &b, &token).ok());
    auto first = std::make_shared<Answer>(), second = std::make_shared<Answer>();
    reg.Join(Req(a, "job", 2, 0), Into(first));
    EXPECT_EQ(first->calls, 0);  // waiting for rank 1
    reg.Join(Req(b, "job", 2, 1), Into(second));
    if (shared) {
      EXPECT_TRUE(second->status.ok()) << second->status.ToString();
      EXPECT_TRUE(first->status.ok()) << first->status.ToString();
      continue;
    }
    ASSERT_EQ(second->calls, 1);
    EXPECT_EQ(second->status.code(), StatusCode::kPermissionDenied);
    EXPECT_TRUE(Contains(second->status.message(), "uid 1000; uid 2000 may not join")) << second->status.ToString();
    // A refusal (cannot_join) from the other uid is refused too, and fails nobody.
    JoinRequest refuse = Req(b, "job", 2, 1);
    refuse.cannot_join = "spoiling";
    auto third = std::make_shared<Answer>();
    reg.Join(refuse, Into(third));
    EXPECT_EQ(third->status.code(), StatusCode::kPermissionDenied);
    EXPECT_EQ(first->calls, 0) << first->status.ToString();
    // The owner's own second rank still forms it.
    uint64_t a2 = 0;
    ASSERT_TRUE(reg.Attach("a2", kPid, Owner(1000), &a2, &token).ok());
    auto fourth = std::make_shared<Answer>();
    reg.Join(Req(a2, "job", 2, 1), Into(fourth));
    EXPECT_TRUE(fourth->status.ok()) << fourth->status.ToString();
    EXPECT_TRUE(first->status.ok()) << first->status.ToString();
  }
}

TEST(AccessPolicyTest, AdminsAndGroups) {
  AccessPolicy p(0);
  EXPECT_EQ(AccessPolicy::Resolve(0, "no-such-group-here", "", &p).message(),
            "--admin-group names group 'no-such-group-here', which does not exist");
  EXPECT_EQ(AccessPolicy::Resolve(0, "", "no-such-group-here", &p).code(), StatusCode::kInvalidArgument);
  ASSERT_TRUE(AccessPolicy::Resolve(/*daemon_uid=*/500, "0", "", &p).ok());
  EXPECT_TRUE(p.IsAdmin(Owner(0)));         // root
  EXPECT_TRUE(p.IsAdmin(Owner(500)));       // the daemon's own uid
  EXPECT_FALSE(p.IsAdmin(Owner(1000)));
  EXPECT_TRUE(p.IsAdmin(Owner(1000, {0})));  // in the admin group
  EXPECT_TRUE(p.MaySee(Owner(1000), 1000));
  EXPECT_FALSE(p.MaySee(Owner(1000), 2000));
  EXPECT_FALSE(p.MayShare(Owner(1000, {0}), Owner(2000, {0})));  // no shared group configured
}

bool FdOpen(int fd) { return fcntl(fd, F_GETFD) != -1; }

TEST_F(RegistryTest, DepositedFdsAreBoundedAndRegistrationNeedsAGpuCommunicator) {
  const uint64_t s0 = Attach();
  int fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
  ASSERT_GE(fd, 0);
  uint64_t deposit = 0;
  EXPECT_EQ(reg_.DepositFd(999999, fd, &deposit).code(), StatusCode::kNotFound);
  EXPECT_FALSE(FdOpen(fd));  // closed on refusal
  std::vector<int> held;
  for (int i = 0; i < 64; ++i) {
    held.push_back(open("/dev/null", O_RDONLY | O_CLOEXEC));
    ASSERT_TRUE(reg_.DepositFd(s0, held.back(), &deposit).ok()) << i;
  }
  fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
  Status s = reg_.DepositFd(s0, fd, &deposit);
  EXPECT_EQ(s.code(), StatusCode::kResourceExhausted);
  EXPECT_EQ(s.message(), "session holds 64 deposited fds no registration claimed");

  const uint64_t comm = Form({s0}, "host");
  GpuRegisterRequest req;
  req.session_id = s0;
  req.comm_id = comm;
  req.deposit_id = deposit;
  req.allocation_bytes = 4096;
  req.bytes = 4096;
  int calls = 0;
  Status answer;
  reg_.RegisterGpuBuffer(req, [&](const Status& st, const GpuRegisterResult&) {
    ++calls;
    answer = st;
  });
  EXPECT_EQ(calls, 1);
  EXPECT_EQ(answer.code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(answer.message(), "buffer registration needs a GPU communicator");
  s = reg_.DeregisterGpuBuffer(s0, comm, 0, 1);
  EXPECT_EQ(s.code(), StatusCode::kNotFound);
  EXPECT_EQ(s.message(), "registered buffer 1 is not registered by rank 0");

  // The session's end closes the fds it deposited.
  EXPECT_TRUE(FdOpen(held.back()));
  ASSERT_TRUE(reg_.Detach(s0).ok());
  for (int h : held) EXPECT_FALSE(FdOpen(h)) << h;
}

// Each cap: past it RESOURCE_EXHAUSTED naming the flag, and once something
// is freed the next request succeeds.
class RegistryCapsTest : public ::testing::Test {
 protected:
  void Start(const DaemonConfig& c) { reg_ = std::make_unique<Registry>(c); }
  uint64_t Attach() {
    uint64_t id = 0, token = 0;
    EXPECT_TRUE(reg_->Attach("caps", kPid, Owner(), &id, &token).ok());
    return id;
  }
  AnswerPtr Join(uint64_t session, const std::string& key, uint32_t world, uint32_t rank) {
    auto a = std::make_shared<Answer>();
    reg_->Join(Req(session, key, world, rank), Into(a));
    return a;
  }
  static void ExpectCap(const Status& s, const std::string& message) {
    EXPECT_EQ(s.code(), StatusCode::kResourceExhausted) << s.ToString();
    EXPECT_EQ(s.message(), message);
  }
  std::unique_ptr<Registry> reg_;
};

TEST_F(RegistryCapsTest, Sessions) {
  DaemonConfig c = TestConfig();
  c.max_sessions = 2;
  Start(c);
  const uint64_t s0 = Attach();
  Attach();
  uint64_t id = 0, token = 0;
  ExpectCap(reg_->Attach("third", kPid, Owner(), &id, &token), "--max-sessions (2) reached");
  ASSERT_TRUE(reg_->Detach(s0).ok());
  EXPECT_TRUE(reg_->Attach("third", kPid, Owner(), &id, &token).ok());
}

TEST_F(RegistryCapsTest, BuffersPerSessionAndInTotalWithDepositsCounted) {
  DaemonConfig c = TestConfig();
  c.max_buffers_per_session = 2;
  c.max_buffers = 3;
  Start(c);
  const uint64_t s0 = Attach(), s1 = Attach();
  BufferInfo b0, b;
  ASSERT_TRUE(reg_->AllocBuffer(s0, 64, &b0).ok());
  ASSERT_TRUE(reg_->AllocBuffer(s0, 64, &b).ok());
  ExpectCap(reg_->AllocBuffer(s0, 64, &b), "--max-buffers-per-session (2) reached");
  ASSERT_TRUE(reg_->AllocBuffer(s1, 64, &b).ok());
  ExpectCap(reg_->AllocBuffer(s1, 64, &b), "--max-buffers (3) reached");
  const int fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
  uint64_t deposit = 0;
  ExpectCap(reg_->DepositFd(s1, fd, &deposit), "--max-buffers (3) reached");
  EXPECT_EQ(fcntl(fd, F_GETFD), -1);  // a refused deposit's fd is closed
  ASSERT_TRUE(reg_->FreeBuffer(s0, b0.buffer_id).ok());
  EXPECT_TRUE(reg_->DepositFd(s1, open("/dev/null", O_RDONLY | O_CLOEXEC), &deposit).ok());
  ExpectCap(reg_->AllocBuffer(s1, 64, &b), "--max-buffers-per-session (2) reached");  // the deposit counts
}

TEST_F(RegistryCapsTest, CommunicatorsPerSessionAndInTotal) {
  DaemonConfig c = TestConfig();
  c.max_communicators_per_session = 2;
  c.max_communicators = 3;
  Start(c);
  const uint64_t s0 = Attach(), s1 = Attach(), s2 = Attach();
  auto a = Join(s0, "a", 1, 0);
  ASSERT_TRUE(a->status.ok()) << a->status.ToString();
  ASSERT_TRUE(Join(s0, "b", 1, 0)->status.ok());
  auto refused = Join(s0, "c", 1, 0);
  EXPECT_EQ(refused->calls, 1);
  ExpectCap(refused->status, "--max-communicators-per-session (2) reached");
  auto d = Join(s1, "d", 1, 0);
  ASSERT_TRUE(d->status.ok());
  ExpectCap(Join(s2, "e", 1, 0)->status, "--max-communicators (3) reached");
  ASSERT_TRUE(reg_->DestroyCommunicator(s0, a->result.comm_id, 0).ok());
  EXPECT_TRUE(Join(s2, "e", 1, 0)->status.ok());
  ASSERT_TRUE(reg_->DestroyCommunicator(s1, d->result.comm_id, 0).ok());
  EXPECT_TRUE(Join(s0, "c", 1, 0)->status.ok());  // room in the session again
}

TEST_F(RegistryCapsTest, PendingJoins) {
  DaemonConfig c = TestConfig();
  c.max_pending_joins = 2;
  Start(c);
  const uint64_t s0 = Attach(), s1 = Attach(), s2 = Attach();
  auto p0 = Join(s0, "p", 3, 0);
  auto p1 = Join(s1, "p", 3, 1);
  EXPECT_EQ(p0->calls + p1->calls, 0);  // both waiting
  auto q = Join(s2, "q", 2, 0);
  EXPECT_EQ(q->calls, 1);
  ExpectCap(q->status, "--max-pending-joins (2) reached");
  ASSERT_TRUE(reg_->Detach(s1).ok());  // withdraws its join
  EXPECT_EQ(p1->calls, 1);
  q = Join(s2, "q", 2, 0);
  EXPECT_EQ(q->calls, 0) << q->status.ToString();  // waiting, not refused
}

// --gpu-start-flag-release, --gpu-system-end-fence and --gpu-static-two-shot
// reach every member through the segment, each as its own bit
// (ring::kGpuStartFlagRelease, kGpuSystemEndFence, kGpuStaticTwoShot; all off
// by default: RegistryTest's one-shot test).
using RegistryConfigTest = RegistryCapsTest;
TEST_F(RegistryConfigTest, TheGpuFenceOptionsAreInTheSegment) {
  for (int option = 0; option < 4; ++option) {
    DaemonConfig c = TestConfig();
    c.gpu_start_flag_release = option != 1;
    c.gpu_system_end_fence = option != 0;
    c.gpu_static_two_shot = option >= 2;
    Start(c);
    const uint64_t s0 = Attach(), s1 = Attach();
    const std::string key = "fences-" + std::to_string(option);
    AnswerPtr a0 = Join(s0, key, 2, 0), a1 = Join(s1, key, 2, 1);
    ASSERT_TRUE(a0->status.ok() && a1->status.ok()) << a0->status.ToString() << " " << a1->status.ToString();
    ring::SegmentParams params;
    ASSERT_NO_FATAL_FAILURE(SegmentParamsOf(*reg_, s1, a0->result.comm_id, &params));
    const uint32_t want = (c.gpu_start_flag_release ? ring::kGpuStartFlagRelease : 0u) |
                          (c.gpu_system_end_fence ? ring::kGpuSystemEndFence : 0u) |
                          (c.gpu_static_two_shot ? ring::kGpuStaticTwoShot : 0u);
    EXPECT_EQ(params.gpu_flags, want) << "option " << option;
  }
}

}  // namespace
}  // namespace collectived::daemon
