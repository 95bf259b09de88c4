#include "cluster/membership.h"

#include <gtest/gtest.h>

#include <map>

namespace collectived::cluster {
namespace {

std::vector<NodeInfo> Three() {
  std::vector<NodeInfo> n(3);
  for (uint32_t k = 0; k < 3; ++k) {
    n[k].node_id = k;
    n[k].epoch = 100 + k;
  }
  return n;
}

constexpr int64_t kSecond = 1'000'000'000;

TEST(MembershipTest, SilenceLosesANodeOnceAndHeartbeatsKeepItAlive) {
  std::map<uint32_t, std::string> lost;
  int calls = 0;
  Membership m(0, Three(), [&](uint32_t node, const std::string& why) {
    ++calls;
    lost[node] = why;
  });
  const int64_t start = 10 * kSecond;
  EXPECT_TRUE(m.Heartbeat(1, 101, start + kSecond));
  EXPECT_TRUE(m.Heartbeat(2, 102, start + kSecond));
  m.ExpireSilent(start + 3 * kSecond, start, 3 * kSecond);  // 2 s of silence each: alive
  EXPECT_EQ(calls, 0);
  EXPECT_TRUE(m.Heartbeat(1, 101, start + 3 * kSecond));
  m.ExpireSilent(start + 4500'000'000, start, 3 * kSecond);  // node 2 silent 3.5 s
  EXPECT_EQ(calls, 1);
  EXPECT_TRUE(m.Alive(1));
  EXPECT_FALSE(m.Alive(2));
  EXPECT_EQ(lost[2], "no heartbeat for 3500 ms");
  // Lost stays lost: a late heartbeat is refused, a second expiry says nothing.
  EXPECT_FALSE(m.Heartbeat(2, 102, start + 5 * kSecond));
  m.ExpireSilent(start + 9 * kSecond, start, 3 * kSecond);
  EXPECT_EQ(calls, 2);  // node 1 now, node 2 not again
  EXPECT_FALSE(m.Alive(1));
  EXPECT_TRUE(m.Alive(0));  // itself, never
}

TEST(MembershipTest, ForeignEpochsAndNodesAreRefused) {
  int calls = 0;
  Membership m(1, Three(), [&](uint32_t, const std::string&) { ++calls; });
  EXPECT_FALSE(m.Heartbeat(0, 999, 1));   // an old or new incarnation of node 0
  EXPECT_FALSE(m.Heartbeat(7, 107, 1));   // no such node
  EXPECT_FALSE(m.Heartbeat(1, 101, 1));   // itself
  EXPECT_TRUE(m.Heartbeat(0, 100, 1));
  m.MarkLost(2, "transport: Endpoint timeout", 5);
  m.MarkLost(2, "again", 6);
  EXPECT_EQ(calls, 1);
  const auto nodes = m.Nodes();
  EXPECT_EQ(nodes[2].state, NodeState::kLost);
  EXPECT_EQ(nodes[2].lost_reason, "transport: Endpoint timeout");
  EXPECT_STREQ(NodeStateName(nodes[0].state), "alive");
}

// A restarted daemon comes back as a new epoch; the old epoch's heartbeats
// are then refused.
TEST(MembershipTest, ARejoinIsANewEpoch) {
  Membership m(0, Three(), nullptr);
  m.MarkLost(1, "transport: Connection reset by remote peer", 5);
  NodeInfo again;
  again.node_id = 1;
  again.epoch = 101;  // the same incarnation: nothing changes
  EXPECT_FALSE(m.Rejoin(again, 10));
  EXPECT_FALSE(m.Alive(1));
  again.epoch = 201;
  again.pid = 4242;
  EXPECT_TRUE(m.Rejoin(again, 10));
  EXPECT_TRUE(m.Alive(1));
  const auto nodes = m.Nodes();
  EXPECT_EQ(nodes[1].info.pid, 4242);
  EXPECT_TRUE(nodes[1].lost_reason.empty());
  EXPECT_FALSE(m.Heartbeat(1, 101, 11));
  EXPECT_TRUE(m.Heartbeat(1, 201, 11));
  again.node_id = 0;
  EXPECT_FALSE(m.Rejoin(again, 12));  // never itself
}

TEST(MembershipTest, ARestartFasterThanItsLossLosesTheOldIncarnationFirst) {
  // cluster/model REJOIN_RACE: the coordinator's word of a new incarnation
  // came before this node saw the old one lost. The old one is lost first,
  // with its reason, while the node still has its old epoch, so what
  // spanned it fails at once.
  std::vector<std::string> lost;
  Membership* self = nullptr;
  bool alive_as_old_when_lost = true;
  Membership m(0, Three(), [&](uint32_t node, const std::string& why) {
    lost.push_back(std::to_string(node) + ": " + why);
    alive_as_old_when_lost = self->AliveAt(node, 101);
  });
  self = &m;
  ASSERT_TRUE(m.AliveAt(1, 101));
  NodeInfo again;
  again.node_id = 1;
  again.epoch = 201;
  EXPECT_TRUE(m.Rejoin(again, 10));
  ASSERT_EQ(lost.size(), 1u);
  EXPECT_NE(lost[0].find("1: restarted"), std::string::npos) << lost[0];
  EXPECT_FALSE(alive_as_old_when_lost);
  EXPECT_TRUE(m.AliveAt(1, 201));
  EXPECT_FALSE(m.AliveAt(1, 101));
  // Seen lost already: no second report.
  m.MarkLost(1, "transport: Connection reset by remote peer", 20);
  again.epoch = 301;
  EXPECT_TRUE(m.Rejoin(again, 30));
  EXPECT_EQ(lost.size(), 2u);  // the MarkLost above, not the rejoin
  EXPECT_EQ(m.SelfEpoch(), 100u);
  // The old endpoint's error, late: it names incarnation 201, not 301.
  m.MarkLost(1, "transport: Endpoint timeout", 40, 201);
  EXPECT_TRUE(m.AliveAt(1, 301));
  EXPECT_EQ(lost.size(), 2u);
  m.MarkLost(1, "transport: Endpoint timeout", 41, 301);
  EXPECT_FALSE(m.Alive(1));
  EXPECT_EQ(lost.size(), 3u);
}

}  // namespace
}  // namespace collectived::cluster
