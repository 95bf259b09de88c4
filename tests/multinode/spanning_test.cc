// Communicators across daemons (docs/multinode.md): clients on several
// daemons of one mpirun job join one key; every dtype and op, in and out of
// place, 1 element to 64 MiB, exact; the faults (a killed node, a stopped
// node, a node killed while a communicator forms) fail exactly the
// communicators that span them, within bounds, and nothing else; members
// that disagree get a status, never mixed data.
#include <gtest/gtest.h>
#include <signal.h>

#include <chrono>
#include <cstdio>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "collectived/client.h"
#include "tests/integration/daemon_harness.h"
#include "tests/multinode/mpirun_cluster.h"
#include "tests/support/exact_data.h"

namespace collectived {
namespace {

using testing::JoinAll;
using testing::MpirunCluster;
using testing::OnEveryRank;
using testing::Rank;

constexpr DataType kTypes[] = {DataType::kFloat32, DataType::kFloat64, DataType::kFloat16, DataType::kBFloat16,
                               DataType::kInt32,   DataType::kInt64,   DataType::kUint32};
constexpr ReduceOp kOps[] = {ReduceOp::kSum, ReduceOp::kProd, ReduceOp::kMin, ReduceOp::kMax, ReduceOp::kAvg};

int64_t MsSince(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - t0).count();
}

// Every valid (dtype, op) at `counts`, out of place and in place, then
// all-gather of every dtype: each rank checks every element of its output.
void ExactEverywhere(Rank& k, uint32_t world, const std::vector<uint64_t>& counts, bool every_op) {
  uint64_t seed = 11;
  for (uint64_t count : counts) {
    for (DataType t : kTypes) {
      const size_t es = DataTypeSize(t);
      Buffer in, out;
      ASSERT_TRUE(k.client->AllocBuffer(count * es, &in).ok());
      ASSERT_TRUE(k.client->AllocBuffer(count * es * world, &out).ok());
      for (ReduceOp op : kOps) {
        if (!IsValidReduction(t, op) || (!every_op && op != ReduceOp::kSum && op != ReduceOp::kMax)) continue;
        ++seed;
        testing::FillInput(t, op, k.rank, seed, in.data(), count);
        testing::Poison(t, out.data(), count);
        Handle h;
        ASSERT_TRUE(k.comm->AllReduce(in, out, count, t, op, &h).ok());
        Status s = h.Wait();
        ASSERT_TRUE(s.ok()) << s.ToString();
        EXPECT_EQ(testing::CountWrongAllReduce(t, op, world, seed, out.data(), count), 0u)
            << "rank " << k.rank << " " << DataTypeName(t) << " " << ReduceOpName(op) << " x " << count;
        // In place.
        testing::FillInput(t, op, k.rank, seed, out.data(), count);
        ASSERT_TRUE(k.comm->AllReduce(out, out, count, t, op, &h).ok());
        ASSERT_TRUE(h.Wait().ok());
        EXPECT_EQ(testing::CountWrongAllReduce(t, op, world, seed, out.data(), count), 0u)
            << "in place: rank " << k.rank << " " << DataTypeName(t) << " " << ReduceOpName(op) << " x " << count;
      }
      ++seed;
      testing::FillInput(t, ReduceOp::kUnspecified, k.rank, seed, in.data(), count);
      testing::Poison(t, out.data(), count * world);
      Handle h;
      ASSERT_TRUE(k.comm->AllGather(in, out, count, t, &h).ok());
      ASSERT_TRUE(h.Wait().ok());
      EXPECT_EQ(testing::CountWrongAllGather(t, world, seed, out.data(), count), 0u)
          << "all-gather: rank " << k.rank << " " << DataTypeName(t) << " x " << count;
    }
  }
}

TEST(SpanningTest, TwoNodesEveryTypeAndOpExact) {
  MpirunCluster cluster(2, {});
  ASSERT_TRUE(cluster.Ready()) << cluster.Output();
  std::vector<Rank> ranks = JoinAll(cluster, "two", {0, 1, 1, 0});
  for (const Rank& k : ranks) ASSERT_TRUE(k.joined.ok()) << k.rank << ": " << k.joined.ToString();
  for (const Rank& k : ranks) {
    EXPECT_EQ(k.comm->world_size(), 4u);
    EXPECT_EQ(k.comm->rank(), k.rank);
  }
  OnEveryRank(ranks, [](Rank& k) { ExactEverywhere(k, 4, {1, 4099}, true); });
  // Large: pieces of 1 MiB, reduced as they arrive.
  OnEveryRank(ranks, [](Rank& k) { ExactEverywhere(k, 4, {300001}, false); });
}

// Ranks spread unevenly and out of order over three nodes; above 256 KiB
// the nodes run the ring (reduce-scatter, all-gather) between them.
TEST(SpanningTest, ThreeNodesUnevenRanksExact) {
  MpirunCluster cluster(3, {});
  ASSERT_TRUE(cluster.Ready()) << cluster.Output();
  std::vector<Rank> ranks = JoinAll(cluster, "three", {2, 0, 1, 2, 0});
  for (const Rank& k : ranks) ASSERT_TRUE(k.joined.ok()) << k.rank << ": " << k.joined.ToString();
  OnEveryRank(ranks, [](Rank& k) { ExactEverywhere(k, 5, {7, 200003}, false); });
  OnEveryRank(ranks, [](Rank& k) { ExactEverywhere(k, 5, {1000}, true); });
}

// Four nodes, one rank each, 16 KiB to 64 MiB (float32 sum), timed.
TEST(SpanningTest, FourNodesUpTo64MiBExact) {
  MpirunCluster cluster(4, {"--max-message-bytes", std::to_string(64 << 20)});
  ASSERT_TRUE(cluster.Ready()) << cluster.Output();
  std::vector<Rank> ranks = JoinAll(cluster, "four", {0, 1, 2, 3});
  for (const Rank& k : ranks) ASSERT_TRUE(k.joined.ok()) << k.rank << ": " << k.joined.ToString();
  for (uint64_t bytes : {uint64_t{16} << 10, uint64_t{1} << 20, uint64_t{64} << 20}) {
    const uint64_t count = bytes / 4;
    std::vector<int64_t> ms(ranks.size());
    OnEveryRank(ranks, [&](Rank& k) {
      Buffer b;
      ASSERT_TRUE(k.client->AllocBuffer(bytes, &b).ok());
      testing::FillInput(DataType::kFloat32, ReduceOp::kSum, k.rank, bytes, b.data(), count);
      const auto t0 = std::chrono::steady_clock::now();
      Handle h;
      ASSERT_TRUE(k.comm->AllReduce(b, b, count, DataType::kFloat32, ReduceOp::kSum, &h).ok());
      const Status s = h.Wait();
      ASSERT_TRUE(s.ok()) << bytes << " bytes, rank " << k.rank << ": " << s.ToString();
      ms[k.rank] = MsSince(t0);
      EXPECT_EQ(testing::CountWrongAllReduce(DataType::kFloat32, ReduceOp::kSum, 4, bytes, b.data(), count), 0u)
          << bytes << " bytes, rank " << k.rank;
    });
    std::printf("4 nodes, all-reduce of %llu bytes in place: %lld ms (first op of its size)\n",
                (unsigned long long)bytes, (long long)ms[0]);
  }
  OnEveryRank(ranks, [](Rank& k) { ExactEverywhere(k, 4, {1 << 20}, false); });
}

// A killed node fails the communicators spanning it within 2 s, UNAVAILABLE
// naming it; so does a node killed while a communicator forms; a stopped
// node within the heartbeat timeout; the other communicators and every
// survivor's session keep working.
TEST(SpanningTest, LostNodesFailOnlyWhatSpansThem) {
  constexpr int kTimeoutMs = 1500;
  MpirunCluster cluster(3, {"--heartbeat-interval-ms", "100", "--heartbeat-timeout-ms", std::to_string(kTimeoutMs)});
  ASSERT_TRUE(cluster.Ready()) << cluster.Output();
  std::vector<Rank> all = JoinAll(cluster, "all", {0, 1, 2});        // spans node 2
  std::vector<Rank> pair = JoinAll(cluster, "pair", {0, 1});         // spans nodes 0, 1
  std::vector<Rank> local = JoinAll(cluster, "local", {0, 0});       // node 0 alone
  for (auto* set : {&all, &pair, &local}) {
    for (const Rank& k : *set) ASSERT_TRUE(k.joined.ok()) << k.rank << ": " << k.joined.ToString();
  }
  auto exact = [](std::vector<Rank>& ranks) {
    const uint32_t world = static_cast<uint32_t>(ranks.size());
    OnEveryRank(ranks, [&](Rank& k) {
      Buffer b;
      ASSERT_TRUE(k.client->AllocBuffer(4096 * 4, &b).ok());
      testing::FillInput(DataType::kInt32, ReduceOp::kSum, k.rank, 5, b.data(), 4096);
      Handle h;
      ASSERT_TRUE(k.comm->AllReduce(b, b, 4096, DataType::kInt32, ReduceOp::kSum, &h).ok());
      Status s = h.Wait();
      ASSERT_TRUE(s.ok()) << s.ToString();
      EXPECT_EQ(testing::CountWrongAllReduce(DataType::kInt32, ReduceOp::kSum, world, 5, b.data(), 4096), 0u);
    });
  };
  exact(all);
  exact(pair);
  exact(local);

  // A communicator forming with a rank on node 2 (rank 1 never comes).
  Status forming_status;
  int64_t forming_ms = -1;
  auto forming_t0 = std::chrono::steady_clock::now();
  std::thread forming([&] {
    std::unique_ptr<Client> c;
    ASSERT_TRUE(Client::Connect({.socket_path = cluster.Socket(0), .client_name = "forming"}, &c).ok());
    CommunicatorOptions o = testing::CommOptions("forming", 3, 0);
    o.join_timeout_ms = 30000;
    std::unique_ptr<Communicator> comm;
    forming_status = c->CreateCommunicator(o, &comm);
    forming_ms = MsSince(forming_t0);
  });
  std::unique_ptr<Client> c2;
  ASSERT_TRUE(Client::Connect({.socket_path = cluster.Socket(2), .client_name = "forming2"}, &c2).ok());
  std::thread forming2([&] {
    CommunicatorOptions o = testing::CommOptions("forming", 3, 2);
    o.join_timeout_ms = 30000;
    std::unique_ptr<Communicator> comm;
    c2->CreateCommunicator(o, &comm);  // its daemon dies under it
  });

  // Ranks 0 and 1 of "all" post an op and wait; rank 2 (node 2) never posts.
  std::vector<Status> in_flight(2);
  std::vector<int64_t> failed_after(2, -1);
  auto t0 = std::chrono::steady_clock::now();
  std::vector<std::thread> waiters;
  for (int r = 0; r < 2; ++r) {
    waiters.emplace_back([&, r] {
      Buffer b;
      ASSERT_TRUE(all[r].client->AllocBuffer(1024, &b).ok());
      Handle h;
      in_flight[r] = all[r].comm->AllReduce(b, b, 256, DataType::kFloat32, ReduceOp::kSum, &h);
      if (in_flight[r].ok()) in_flight[r] = h.Wait();
      failed_after[r] = MsSince(t0);
    });
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  t0 = std::chrono::steady_clock::now();
  forming_t0 = t0;
  ASSERT_EQ(kill(cluster.pids()[2], SIGKILL), 0);
  for (auto& w : waiters) w.join();
  forming.join();
  forming2.join();
  for (int r = 0; r < 2; ++r) {
    std::printf("node 2 killed: rank %d's op on 'all' failed after %lld ms: %s\n", r, (long long)failed_after[r],
                in_flight[r].ToString().c_str());
    EXPECT_EQ(in_flight[r].code(), StatusCode::kUnavailable) << in_flight[r].ToString();
    EXPECT_NE(in_flight[r].message().find("node 2"), std::string::npos) << in_flight[r].ToString();
    EXPECT_LT(failed_after[r], 2000);
  }
  std::printf("node 2 killed: the join of 'forming' failed after %lld ms: %s\n", (long long)forming_ms,
              forming_status.ToString().c_str());
  EXPECT_EQ(forming_status.code(), StatusCode::kUnavailable) << forming_status.ToString();
  EXPECT_NE(forming_status.message().find("node 2"), std::string::npos) << forming_status.ToString();
  EXPECT_LT(forming_ms, 2000);
  // What does not span node 2 keeps working, and so do the survivors' sessions.
  exact(pair);
  exact(local);
  std::vector<Rank> again = JoinAll(cluster, "again", {1, 0});
  for (const Rank& k : again) ASSERT_TRUE(k.joined.ok()) << k.joined.ToString();
  exact(again);

  // A stopped node: only its silence tells, within the heartbeat timeout.
  std::vector<Status> stopped(2);
  std::vector<int64_t> stopped_after(2, -1);
  ASSERT_EQ(kill(cluster.pids()[1], SIGSTOP), 0);
  t0 = std::chrono::steady_clock::now();
  OnEveryRank(pair, [&](Rank& k) {
    if (k.rank == 1) return;  // its daemon is stopped: its client would wait for it
    Buffer b;
    ASSERT_TRUE(k.client->AllocBuffer(1024, &b).ok());
    Handle h;
    stopped[k.rank] = k.comm->AllReduce(b, b, 256, DataType::kFloat32, ReduceOp::kSum, &h);
    if (stopped[k.rank].ok()) stopped[k.rank] = h.Wait();
    stopped_after[k.rank] = MsSince(t0);
  });
  std::printf("node 1 stopped: rank 0's op on 'pair' failed after %lld ms: %s\n", (long long)stopped_after[0],
              stopped[0].ToString().c_str());
  EXPECT_EQ(stopped[0].code(), StatusCode::kUnavailable) << stopped[0].ToString();
  EXPECT_NE(stopped[0].message().find("node 1"), std::string::npos) << stopped[0].ToString();
  EXPECT_LT(stopped_after[0], kTimeoutMs + 1000);
  exact(local);
  kill(cluster.pids()[1], SIGCONT);
}

// A member that dies (its process killed) fails its peers on the other nodes
// at once, naming it, instead of leaving them to their op deadline.
TEST(SpanningTest, AMemberThatDiesFailsItsPeersOnOtherNodes) {
  MpirunCluster cluster(2, {});
  ASSERT_TRUE(cluster.Ready()) << cluster.Output();
  testing::Process member({testing::TestClientBin(), "--socket", cluster.Socket(1), "--key", "dies", "--world", "2",
                           "--rank", "1", "--mode", "daemon", "--scenario", "join-and-sleep"},
                          cluster.dir() + "/member.log");
  std::unique_ptr<Client> c;
  ASSERT_TRUE(Client::Connect({.socket_path = cluster.Socket(0), .client_name = "survivor"}, &c).ok());
  CommunicatorOptions o = testing::CommOptions("dies", 2, 0);
  o.join_timeout_ms = 20000;  // the op timeout is the daemon's 30 s: the failure below is not the deadline
  std::unique_ptr<Communicator> comm;
  Status joined = c->CreateCommunicator(o, &comm);
  ASSERT_TRUE(joined.ok()) << joined.ToString() << member.Output();
  Buffer b;
  ASSERT_TRUE(c->AllocBuffer(1024, &b).ok());
  Handle h;
  ASSERT_TRUE(comm->AllReduce(b, b, 256, DataType::kFloat32, ReduceOp::kSum, &h).ok());
  std::this_thread::sleep_for(std::chrono::milliseconds(300));  // rank 0 waits in the exchange
  const auto t0 = std::chrono::steady_clock::now();
  member.Kill(SIGKILL);
  Status s = h.Wait();
  const int64_t ms = MsSince(t0);
  std::printf("rank 1 killed on node 1: rank 0's op on node 0 failed after %lld ms: %s\n", (long long)ms,
              s.ToString().c_str());
  EXPECT_EQ(s.code(), StatusCode::kAborted) << s.ToString();
  EXPECT_NE(s.message().find("rank 1 left"), std::string::npos) << s.ToString();
  EXPECT_LT(ms, 2000);
}

// An abort on one node (Communicator::Abort writes the segment's abort word,
// which the daemon does not hear of at once) ends the other nodes' ops
// within the daemon's housekeeping tick, not at their op deadline (30 s).
TEST(SpanningTest, AnAbortOnOneNodeEndsThePeersOpsOnOthers) {
  MpirunCluster cluster(2, {});
  ASSERT_TRUE(cluster.Ready()) << cluster.Output();
  std::vector<Rank> ranks = JoinAll(cluster, "aborts", {0, 1});
  for (const Rank& k : ranks) ASSERT_TRUE(k.joined.ok()) << k.joined.ToString();
  Buffer b;
  ASSERT_TRUE(ranks[1].client->AllocBuffer(1024, &b).ok());
  Handle h;
  ASSERT_TRUE(ranks[1].comm->AllReduce(b, b, 256, DataType::kFloat32, ReduceOp::kSum, &h).ok());
  std::this_thread::sleep_for(std::chrono::milliseconds(300));  // rank 1's node waits in the exchange
  const auto t0 = std::chrono::steady_clock::now();
  ASSERT_TRUE(ranks[0].comm->Abort("the test aborts on node 0").ok());
  Status s = h.Wait();
  const int64_t ms = MsSince(t0);
  std::printf("rank 0 aborted on node 0: rank 1's op on node 1 failed after %lld ms: %s\n", (long long)ms,
              s.ToString().c_str());
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find("the test aborts on node 0"), std::string::npos) << s.ToString();
  EXPECT_LT(ms, 3000);
}

// Members that disagree get a status naming the disagreement, on every node.
TEST(SpanningTest, DisagreementsAreStatusesNotData) {
  MpirunCluster cluster(2, {});
  ASSERT_TRUE(cluster.Ready()) << cluster.Output();
  // Rank 1 joined on both nodes.
  {
    std::vector<std::thread> threads;
    std::vector<Status> got(3);
    const std::vector<std::pair<int, uint32_t>> members = {{0, 0}, {0, 1}, {1, 1}};
    for (size_t i = 0; i < members.size(); ++i) {
      threads.emplace_back([&, i] {
        std::unique_ptr<Client> c;
        ASSERT_TRUE(Client::Connect({.socket_path = cluster.Socket(members[i].first), .client_name = "x"}, &c).ok());
        CommunicatorOptions o = testing::CommOptions("dup", 3, members[i].second);
        o.join_timeout_ms = 10000;
        std::unique_ptr<Communicator> comm;
        got[i] = c->CreateCommunicator(o, &comm);
      });
    }
    for (auto& t : threads) t.join();
    // Rank 2 never joins: the conflict is what ends every join, not the timeout.
    for (const Status& s : got) {
      EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s.ToString();
      EXPECT_NE(s.message().find("rank 1 joined on node"), std::string::npos) << s.ToString();
    }
  }
  // Client execution asked for by name: refused, with what to do instead.
  std::vector<Rank> client = JoinAll(cluster, "client-mode", {0, 1}, ExecutionMode::kClient);
  for (const Rank& k : client) {
    EXPECT_EQ(k.joined.code(), StatusCode::kFailedPrecondition) << k.joined.ToString();
    EXPECT_NE(k.joined.message().find("kDaemon"), std::string::npos) << k.joined.ToString();
  }
  // Ops that differ between nodes (a count): both fail, neither gets data.
  std::vector<Rank> ranks = JoinAll(cluster, "differ", {0, 1}, ExecutionMode::kDefault, 1500);
  for (const Rank& k : ranks) ASSERT_TRUE(k.joined.ok()) << k.joined.ToString();
  std::vector<Status> got(2);
  OnEveryRank(ranks, [&](Rank& k) {
    const uint64_t count = k.rank == 0 ? 100 : 200;
    Buffer b;
    ASSERT_TRUE(k.client->AllocBuffer(count * 4, &b).ok());
    Handle h;
    got[k.rank] = k.comm->AllReduce(b, b, count, DataType::kFloat32, ReduceOp::kSum, &h);
    if (got[k.rank].ok()) got[k.rank] = h.Wait();
  });
  for (const Status& s : got) {
    EXPECT_FALSE(s.ok());
    std::printf("ops differing between nodes: %s\n", s.ToString().c_str());
  }
  // The same bytes, another type: 2 float64 against 8 bfloat16, a pair the
  // old 8-bit descriptor hash gave the same tag, so both succeeded with the
  // other's bits reduced as their own. Now every (kind, type, op) has its
  // own code in the tag: both fail.
  std::vector<Rank> typed = JoinAll(cluster, "differ-type", {0, 1}, ExecutionMode::kDefault, 1500);
  for (const Rank& k : typed) ASSERT_TRUE(k.joined.ok()) << k.joined.ToString();
  OnEveryRank(typed, [&](Rank& k) {
    const DataType t = k.rank == 0 ? DataType::kFloat64 : DataType::kBFloat16;
    const uint64_t count = k.rank == 0 ? 2 : 8;
    Buffer b;
    ASSERT_TRUE(k.client->AllocBuffer(16, &b).ok());
    testing::FillInput(t, ReduceOp::kSum, k.rank, 5, b.data(), count);
    Handle h;
    got[k.rank] = k.comm->AllReduce(b, b, count, t, ReduceOp::kSum, &h);
    if (got[k.rank].ok()) got[k.rank] = h.Wait();
  });
  for (const Status& s : got) {
    EXPECT_FALSE(s.ok());
    std::printf("types differing between nodes, same bytes: %s\n", s.ToString().c_str());
  }
  // Counts that differ by whole pieces: the shorter op's pieces all have a
  // match of the same length in the longer one (2 MiB against 3 MiB, both
  // direct; 4 MiB direct against 8 MiB by ring, whose step 1 the direct
  // receive took for the other node's part). Before the last piece was
  // marked and the algorithm named in the tag, the shorter op succeeded
  // with the other node's bits; now both fail.
  for (const auto& sizes : {std::pair<uint64_t, uint64_t>{512 << 10, 768 << 10}, {1 << 20, 2 << 20}}) {
    const uint64_t small = sizes.first, large = sizes.second;  // a lambda may not capture a structured binding (C++17)
    std::vector<Rank> counted = JoinAll(cluster, "differ-count-" + std::to_string(small), {0, 1},
                                        ExecutionMode::kDefault, 1500);
    for (const Rank& k : counted) ASSERT_TRUE(k.joined.ok()) << k.joined.ToString();
    OnEveryRank(counted, [&](Rank& k) {
      const uint64_t count = k.rank == 0 ? small : large;
      Buffer b;
      ASSERT_TRUE(k.client->AllocBuffer(count * 4, &b).ok());
      testing::FillInput(DataType::kFloat32, ReduceOp::kSum, k.rank, 9, b.data(), count);
      Handle h;
      got[k.rank] = k.comm->AllReduce(b, b, count, DataType::kFloat32, ReduceOp::kSum, &h);
      if (got[k.rank].ok()) got[k.rank] = h.Wait();
    });
    for (const Status& s : got) {
      EXPECT_FALSE(s.ok()) << small * 4 << " against " << large * 4 << " bytes";
      std::printf("counts differing by whole pieces (%llu, %llu floats): %s\n", (unsigned long long)small,
                  (unsigned long long)large, s.ToString().c_str());
    }
  }
}

// A key used again at once with its ranks on other nodes, rank 0 elsewhere
// each time, forms and runs exactly: no node decides from the announcements
// of the key's earlier use (found by cluster/model, variant REUSE: node 2
// kept nodes 0's and 1's of the first use, and the second use failed
// INVALID_ARGUMENT "rank 0 joined on node 2 and on node 0").
TEST(SpanningTest, AKeyUsedAgainWithRankZeroElsewhereFormsExact) {
  MpirunCluster cluster(3, {});
  ASSERT_TRUE(cluster.Ready()) << cluster.Output();
  for (const std::vector<int>& nodes : {std::vector<int>{0, 1}, std::vector<int>{2, 0}, std::vector<int>{1, 2}}) {
    std::vector<Rank> ranks = JoinAll(cluster, "again", nodes);
    for (const Rank& k : ranks) ASSERT_TRUE(k.joined.ok()) << "nodes " << nodes[0] << "," << nodes[1] << ": rank "
                                                           << k.rank << ": " << k.joined.ToString();
    OnEveryRank(ranks, [](Rank& k) {
      Buffer b;
      ASSERT_TRUE(k.client->AllocBuffer(4000, &b).ok());
      testing::FillInput(DataType::kInt32, ReduceOp::kSum, k.rank, 9, b.data(), 1000);
      Handle h;
      ASSERT_TRUE(k.comm->AllReduce(b, b, 1000, DataType::kInt32, ReduceOp::kSum, &h).ok());
      ASSERT_TRUE(h.Wait().ok());
      EXPECT_EQ(testing::CountWrongAllReduce(DataType::kInt32, ReduceOp::kSum, 2, 9, b.data(), 1000), 0u);
    });
    for (Rank& k : ranks) EXPECT_TRUE(k.comm->Destroy().ok());
  }
}

}  // namespace
}  // namespace collectived
