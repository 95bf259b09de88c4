// Forming communicators across nodes (spanning.cc) in-process: this registry
// is node 0 of a cluster whose other nodes are played by the test, which
// hands it their control messages (announcements, plans) as the transport
// would. The transport is real but never started: what node 0 sends stays
// queued. Covers what a multi-daemon test cannot order at will: a plan that
// arrives after its nodes changed, and an announcement that arrives after
// the plan that used it (cluster/model SLOW_PLAN, FORMED_AFTER_LOSS, REUSE).
#include <gtest/gtest.h>

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "cluster/comm_messages.h"
#include "cluster/membership.h"
#include "cluster/ucx_transport.h"
#include "daemon/registry.h"

namespace collectived::daemon {
namespace {

constexpr uint32_t kOpTimeoutMs = 2000;

struct Answer {
  int calls = 0;
  Status status;
  uint64_t session = 0;
  uint64_t comm_id = 0;
};
using AnswerPtr = std::shared_ptr<Answer>;

bool Contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

class SpanningPlanTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(cluster::UcxTransport::Create(&transport_).ok());
    std::vector<cluster::NodeInfo> nodes(3);
    for (uint32_t k = 0; k < 3; ++k) {
      nodes[k].node_id = k;
      nodes[k].epoch = 100 + k;
    }
    membership_ = std::make_unique<cluster::Membership>(
        0, nodes, [this](uint32_t node, const std::string& why) { reg_->OnNodeLost(node, why); });
    DaemonConfig c;
    c.backend = Backend::kHost;
    c.max_message_bytes = 64 << 10;
    c.ring_depth = 8;
    c.op_timeout_ms = kOpTimeoutMs;
    c.join_timeout_ms = 5000;
    c.max_buffer_bytes = 1 << 20;
    reg_ = std::make_unique<Registry>(c);
    reg_->AttachCluster(transport_.get(), membership_.get());
  }
  void TearDown() override { reg_.reset(); }  // before the membership and transport it uses

  AnswerPtr Join(const std::string& key, uint32_t world, uint32_t rank) {
    uint64_t session = 0, token = 0;
    ipc::PeerCredentials owner;
    owner.uid = 1000;
    owner.gid = 100;
    owner.pid = 4321;
    EXPECT_TRUE(reg_->Attach("test", 4321, owner, &session, &token).ok());
    JoinRequest r;
    r.session_id = session;
    r.key = key;
    r.world_size = world;
    r.rank = rank;
    r.op_timeout_ms = kOpTimeoutMs;
    auto a = std::make_shared<Answer>();
    a->session = session;
    reg_->Join(r, [a](const Status& s, const JoinResult& result) {
      ++a->calls;
      a->status = s;
      a->comm_id = result.comm_id;
    });
    return a;
  }

  // What node `node` would send: its ranks of `key`, with its receive id and epoch.
  void Announce(uint32_t node, const std::string& key, uint32_t world, std::vector<uint32_t> ranks, uint32_t recv_id,
                uint64_t epoch) {
    cluster::ControlMessage m;
    m.kind = cluster::ControlMessage::Kind::kAnnounce;
    m.announce.key = key;
    m.announce.world = world;
    m.announce.op_timeout_ms = kOpTimeoutMs;
    m.announce.recv_id = recv_id;
    m.announce.epoch = epoch;
    m.announce.ranks = std::move(ranks);
    reg_->OnClusterMessage(node, cluster::EncodeControl(m));
  }

  // Node `from` decided: `key` forms with `plan`.
  void Plan(uint32_t from, const std::string& key, cluster::SpanningPlan plan) {
    cluster::ControlMessage m;
    m.kind = cluster::ControlMessage::Kind::kForm;
    m.form.key = key;
    m.form.mode = static_cast<uint32_t>(ExecutionMode::kDaemon);
    m.form.plan = std::move(plan);
    m.form.plan.comm_tag = 77;
    reg_->OnClusterMessage(from, cluster::EncodeControl(m));
  }

  // This node's receive id for `key` (forming or formed).
  uint32_t RecvId(const std::string& key) {
    for (const auto& c : reg_->Stats().communicators) {
      if (c.key == key) return c.recv_id;
    }
    return 0;
  }

  std::unique_ptr<cluster::UcxTransport> transport_;
  std::unique_ptr<cluster::Membership> membership_;
  std::unique_ptr<Registry> reg_;
};

// Rank 0 here decides from node 1's announcement and forms; a late copy of
// that announcement must not be taken for the key's next use, which waits
// for node 1's new announcement (the old daemon formed at once from the
// stale one, and node 1 then failed the plan: its id was a finished Comm's).
TEST_F(SpanningPlanTest, ALateAnnouncementIsNotTakenForTheKeysNextUse) {
  AnswerPtr a = Join("k", 2, 0);
  EXPECT_EQ(a->calls, 0);
  Announce(1, "k", 2, {1}, 7, 101);
  ASSERT_EQ(a->calls, 1);
  ASSERT_TRUE(a->status.ok()) << a->status.ToString();
  EXPECT_NE(RecvId("k"), 0u);

  Announce(1, "k", 2, {1}, 7, 101);  // the same announcement, later than the plan
  AnswerPtr again = Join("k", 2, 0);
  EXPECT_EQ(again->calls, 0) << again->status.ToString();  // not formed from the stale copy
  Announce(1, "k", 2, {1}, 8, 101);                        // node 1's members of the new use
  ASSERT_EQ(again->calls, 1);
  EXPECT_TRUE(again->status.ok()) << again->status.ToString();
}

// Node 1 decides (rank 0 is there); this node holds rank 1 and checks the
// plan against what it knows when the plan arrives.
TEST_F(SpanningPlanTest, APlanIsCheckedAgainstTheNodesAsTheyAreWhenItArrives) {
  auto plan = [](uint32_t our_id, uint64_t our_epoch, uint64_t node1_epoch) {
    cluster::SpanningPlan p;
    p.world = 2;
    p.nodes = {0, 1};
    p.ranks = {{1}, {0}};
    p.recv_ids = {our_id, 7};
    p.epochs = {our_epoch, node1_epoch};
    return p;
  };
  // Decided from node 1's previous incarnation (SLOW_PLAN: it restarted since).
  AnswerPtr a = Join("restarted", 2, 1);
  Plan(1, "restarted", plan(RecvId("restarted"), 100, 99));
  ASSERT_EQ(a->calls, 1);
  EXPECT_EQ(a->status.code(), StatusCode::kUnavailable) << a->status.ToString();
  EXPECT_TRUE(Contains(a->status.message(), "node 1 of the plan of 'restarted'")) << a->status.ToString();

  // Decided from an earlier use of the key here (another Comm's id).
  AnswerPtr b = Join("reused", 2, 1);
  const uint32_t id = RecvId("reused");
  ASSERT_NE(id, 0u);
  Plan(1, "reused", plan(id == 1 ? 2 : id - 1, 100, 101));
  ASSERT_EQ(b->calls, 1);
  EXPECT_EQ(b->status.code(), StatusCode::kAborted) << b->status.ToString();
  EXPECT_TRUE(Contains(b->status.message(), "earlier announcement of node 0")) << b->status.ToString();

  // Decided from this node's previous incarnation.
  AnswerPtr c = Join("ours", 2, 1);
  Plan(1, "ours", plan(RecvId("ours"), 42, 101));
  ASSERT_EQ(c->calls, 1);
  EXPECT_EQ(c->status.code(), StatusCode::kAborted) << c->status.ToString();

  // The plan as it should be: formed.
  AnswerPtr d = Join("good", 2, 1);
  Plan(1, "good", plan(RecvId("good"), 100, 101));
  ASSERT_EQ(d->calls, 1);
  EXPECT_TRUE(d->status.ok()) << d->status.ToString();

  // Naming a node this one saw lost (FORMED_AFTER_LOSS): fails at once, not
  // at its first op's deadline.
  AnswerPtr e = Join("lost", 3, 1);
  const uint32_t lost_id = RecvId("lost");
  membership_->MarkLost(2, "transport: Connection reset by remote peer", 1);
  cluster::SpanningPlan p;
  p.world = 3;
  p.nodes = {0, 1, 2};
  p.ranks = {{1}, {0}, {2}};
  p.recv_ids = {lost_id, 7, 9};
  p.epochs = {100, 101, 102};
  Plan(1, "lost", p);
  ASSERT_EQ(e->calls, 1);
  EXPECT_EQ(e->status.code(), StatusCode::kUnavailable) << e->status.ToString();
  EXPECT_TRUE(Contains(e->status.message(), "node 2 of the plan of 'lost'")) << e->status.ToString();
}

// A failure of a key's communicator from another node withdraws this node's
// members still forming under the key (the plan may not have arrived yet);
// one passed on by a third node does not: those members may be a later try.
TEST_F(SpanningPlanTest, OnlyAFailureFromItsSourceWithdrawsMembersStillForming) {
  auto fail = [&](uint32_t from, const std::string& key, bool relayed) {
    cluster::ControlMessage m;
    m.kind = cluster::ControlMessage::Kind::kFailure;
    m.failure.key = key;
    m.failure.comm_tag = 77;
    m.failure.code = static_cast<uint32_t>(StatusCode::kUnavailable);
    m.failure.reason = "node 2 lost";
    m.failure.relayed = relayed;
    reg_->OnClusterMessage(from, cluster::EncodeControl(m));
  };
  AnswerPtr a = Join("retry", 2, 1);
  fail(1, "retry", /*relayed=*/true);
  EXPECT_EQ(a->calls, 0) << a->status.ToString();
  fail(1, "retry", /*relayed=*/false);
  ASSERT_EQ(a->calls, 1);
  EXPECT_EQ(a->status.code(), StatusCode::kUnavailable) << a->status.ToString();
  EXPECT_TRUE(Contains(a->status.message(), "from node 1")) << a->status.ToString();
}

// The communicator ended here (its member left cleanly) and the key is
// tried again; a failure of the old one from another node, late, leaves the
// new try alone.
TEST_F(SpanningPlanTest, ALateFailureOfAnEndedCommunicatorLeavesTheNextTryAlone) {
  AnswerPtr a = Join("again", 2, 1);
  cluster::SpanningPlan p;
  p.comm_tag = 77;
  p.world = 2;
  p.nodes = {0, 1};
  p.ranks = {{1}, {0}};
  p.recv_ids = {RecvId("again"), 7};
  p.epochs = {100, 101};
  Plan(1, "again", p);
  ASSERT_EQ(a->calls, 1);
  ASSERT_TRUE(a->status.ok()) << a->status.ToString();
  ASSERT_TRUE(reg_->DestroyCommunicator(a->session, a->comm_id, 0).ok());
  AnswerPtr next = Join("again", 2, 1);  // a later try of the key
  cluster::ControlMessage m;
  m.kind = cluster::ControlMessage::Kind::kFailure;
  m.failure.key = "again";
  m.failure.comm_tag = 77;
  m.failure.code = static_cast<uint32_t>(StatusCode::kAborted);
  m.failure.reason = "rank 0 left: client disconnected";
  reg_->OnClusterMessage(1, cluster::EncodeControl(m));
  EXPECT_EQ(next->calls, 0) << next->status.ToString();
}

// Node 2 failed the communicator (say, a plan naming a node it had not yet
// heard was back: cluster/model RANK0_ON_0) and may not reach node 1: this
// node passes the failure on to node 1, once, and not back to node 2; a
// failure that was itself passed on is not passed on again.
TEST_F(SpanningPlanTest, AFailureFromOneNodeIsPassedOnOnceToTheOthers) {
  auto form = [&](const std::string& key, uint32_t id1, uint32_t id2) {  // the other nodes' receive ids
    AnswerPtr a = Join(key, 3, 0);
    Announce(1, key, 3, {1}, id1, 101);
    Announce(2, key, 3, {2}, id2, 102);
    EXPECT_EQ(a->calls, 1);
    EXPECT_TRUE(a->status.ok()) << a->status.ToString();
    for (const auto& c : reg_->Stats().communicators) {
      if (c.key == key && !c.closed) return c.comm_tag;
    }
    return 0u;
  };
  auto fail = [&](uint32_t from, const std::string& key, uint32_t comm_tag, bool relayed) {
    cluster::ControlMessage m;
    m.kind = cluster::ControlMessage::Kind::kFailure;
    m.failure.key = key;
    m.failure.comm_tag = comm_tag;
    m.failure.code = static_cast<uint32_t>(StatusCode::kUnavailable);
    m.failure.reason = "the plan names node 1 at an epoch node 2 has not heard of";
    m.failure.relayed = relayed;
    reg_->OnClusterMessage(from, cluster::EncodeControl(m));
  };
  auto aborted = [&](const std::string& key) {
    for (const auto& c : reg_->Stats().communicators) {
      if (c.key == key && !c.closed) return c.aborted;
    }
    return false;
  };
  const uint32_t tag = form("three", 7, 9);
  ASSERT_NE(tag, 0u);
  uint64_t to1 = transport_->control_queued(1), to2 = transport_->control_queued(2);
  fail(2, "three", tag, /*relayed=*/false);
  EXPECT_TRUE(aborted("three"));
  EXPECT_EQ(transport_->control_queued(1), to1 + 1);  // passed on to node 1
  EXPECT_EQ(transport_->control_queued(2), to2);      // not back to node 2
  fail(2, "three", tag, /*relayed=*/false);           // again: aborted already, nothing passed on
  EXPECT_EQ(transport_->control_queued(1), to1 + 1);

  const uint32_t tag2 = form("three-again", 8, 10);
  ASSERT_NE(tag2, 0u);
  to1 = transport_->control_queued(1);
  to2 = transport_->control_queued(2);
  fail(1, "three-again", tag2, /*relayed=*/true);
  EXPECT_TRUE(aborted("three-again"));
  EXPECT_EQ(transport_->control_queued(1), to1);
  EXPECT_EQ(transport_->control_queued(2), to2);
}

}  // namespace
}  // namespace collectived::daemon
