// Daemons of one mpirun job on this machine (UCX over tcp on loopback, as
// docs/multinode.md runs them): they form one cluster and see each other
// alive; a killed daemon (the transport reports it) and a stopped one (only
// its silence does) are found lost within bounds, lost stays lost, and the
// survivors keep serving their clients.
#include <arpa/inet.h>
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

#include "collectived/v1/collectived.grpc.pb.h"
#include "tests/integration/daemon_harness.h"
#include "tests/multinode/mpirun_cluster.h"
#include "tests/support/exact_data.h"

namespace collectived {
namespace {

using testing::Cluster;
using testing::Process;
using testing::TempDir;

constexpr int kNodes = 3;
constexpr int kHeartbeatMs = 100, kTimeoutMs = 1500;

// Milliseconds until `observer` reports `node` lost (its reason in *why), or -1 past `limit_ms`.
int64_t MsUntilLost(const std::string& observer, uint32_t node, int limit_ms, std::string* why) {
  const auto t0 = std::chrono::steady_clock::now();
  for (;;) {
    bool ok = false;
    const auto r = Cluster(observer, &ok);
    const int64_t ms =
        std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - t0).count();
    if (ms > limit_ms) return -1;
    if (ok && static_cast<int>(node) < r.nodes_size() && r.nodes(node).state() == "lost") {
      *why = r.nodes(node).lost_reason();
      return ms;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
}

class ClusterTest : public ::testing::Test {
 protected:
  std::string Socket(int node) const { return dir_.path() + "/c" + std::to_string(node) + ".sock"; }
  void TearDown() override {
    for (pid_t p : pids_) kill(p, SIGCONT);
    for (pid_t p : pids_) kill(p, SIGKILL);  // none may outlive the test
  }
  TempDir dir_;
  std::vector<pid_t> pids_;
};

TEST(MpirunClusterTest, DaemonsFormAClusterAndFindLostNodes) {
  testing::MpirunCluster cluster(kNodes, {"--heartbeat-interval-ms", std::to_string(kHeartbeatMs),
                                          "--heartbeat-timeout-ms", std::to_string(kTimeoutMs)});
  ASSERT_TRUE(cluster.Ready()) << cluster.Output();
  auto Socket = [&](int k) { return cluster.Socket(k); };
  const std::vector<pid_t>& pids = cluster.pids();
  std::this_thread::sleep_for(std::chrono::milliseconds(5 * kHeartbeatMs));
  for (int k = 0; k < kNodes; ++k) {
    bool ok = false;
    const auto r = Cluster(Socket(k), &ok);
    ASSERT_TRUE(ok) << k;
    EXPECT_EQ(r.mode(), "mpi");
    EXPECT_EQ(r.self(), static_cast<uint32_t>(k));
    ASSERT_EQ(r.nodes_size(), kNodes) << cluster.Output();
    for (const auto& n : r.nodes()) {
      EXPECT_EQ(n.state(), "alive") << "node " << k << " sees node " << n.node_id() << ": " << n.lost_reason();
      if (n.node_id() != r.self()) {
        EXPECT_GE(n.last_heartbeat_ms_ago(), 0) << "node " << k << " never heard node " << n.node_id();
        EXPECT_LT(n.last_heartbeat_ms_ago(), kTimeoutMs);
      }
    }
    EXPECT_EQ(r.refused_messages(), 0u);
  }
  ASSERT_EQ(pids.size(), static_cast<size_t>(kNodes));

  // A killed daemon: the transport reports it; well inside 2 s.
  ASSERT_EQ(kill(pids[2], SIGKILL), 0);
  std::string why;
  const int64_t killed_ms = MsUntilLost(Socket(0), 2, 5000, &why);
  std::printf("node 2 killed: node 0 saw it lost after %lld ms (%s)\n", (long long)killed_ms, why.c_str());
  EXPECT_GE(killed_ms, 0);
  EXPECT_LT(killed_ms, 2000);
  std::string why1;
  EXPECT_GE(MsUntilLost(Socket(1), 2, 2000, &why1), 0);

  // A stopped daemon: only its silence tells; lost after the heartbeat timeout, not before.
  ASSERT_EQ(kill(pids[1], SIGSTOP), 0);
  const int64_t stopped_ms = MsUntilLost(Socket(0), 1, kTimeoutMs + 3000, &why);
  std::printf("node 1 stopped: node 0 saw it lost after %lld ms (%s)\n", (long long)stopped_ms, why.c_str());
  EXPECT_GE(stopped_ms, kTimeoutMs - 2 * kHeartbeatMs);
  EXPECT_LT(stopped_ms, kTimeoutMs + 1000);
  EXPECT_NE(why.find("no heartbeat"), std::string::npos) << why;
  // Lost stays lost, even once it runs again.
  ASSERT_EQ(kill(pids[1], SIGCONT), 0);
  std::this_thread::sleep_for(std::chrono::milliseconds(5 * kHeartbeatMs));
  bool ok = false;
  const auto after = Cluster(Socket(0), &ok);
  ASSERT_TRUE(ok);
  EXPECT_EQ(after.nodes(1).state(), "lost");
  EXPECT_EQ(after.nodes(0).state(), "alive");

  // The survivor still serves its clients: an exact all-reduce.
  std::unique_ptr<Client> c;
  ASSERT_TRUE(Client::Connect({.socket_path = Socket(0), .client_name = "survivor"}, &c).ok());
  CommunicatorOptions o = testing::CommOptions("after-losses", 1, 0);
  std::unique_ptr<Communicator> comm;
  ASSERT_TRUE(c->CreateCommunicator(o, &comm).ok());
  Buffer b;
  ASSERT_TRUE(c->AllocBuffer(256 * 4, &b).ok());
  testing::FillInput(DataType::kFloat32, ReduceOp::kSum, 0, 3, b.data(), 256);
  Handle h;
  ASSERT_TRUE(comm->AllReduce(b, b, 256, DataType::kFloat32, ReduceOp::kSum, &h).ok());
  ASSERT_TRUE(h.Wait().ok());
  EXPECT_EQ(testing::CountWrongAllReduce(DataType::kFloat32, ReduceOp::kSum, 1, 3, b.data(), 256), 0u);
}

// A TCP port nothing listens on now (bound, read, released).
int FreePort() {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(a);
  bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a));
  getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  close(fd);
  return ntohs(a.sin_port);
}

// Daemons started on their own (as systemd would) meet at node 0's address;
// a connection that is not one of them is refused and the cluster forms.
TEST_F(ClusterTest, DaemonsStartedOnTheirOwnMeetAtTheCoordinator) {
  setenv("UCX_TLS", "tcp,self", 1);
  setenv("UCX_NET_DEVICES", "lo", 1);
  setenv("UCX_WARN_UNUSED_ENV_VARS", "n", 1);
  const int port = FreePort();
  std::vector<std::unique_ptr<Process>> daemons(kNodes);  // by node id
  auto start = [&](int k) {
    if (daemons[k]) daemons[k]->Wait(5000);  // a restart: the killed one is reaped first
    daemons[k] = std::make_unique<Process>(
        std::vector<std::string>{testing::DaemonBin(), "--cluster", "coordinator", "--coordinator",
                                 "127.0.0.1:" + std::to_string(port), "--node-rank", std::to_string(k), "--nodes",
                                 std::to_string(kNodes), "--cluster-secret", "test-secret", "--socket",
                                 dir_.path() + "/c{node}.sock", "--backend", "host", "--heartbeat-interval-ms",
                                 std::to_string(kHeartbeatMs), "--heartbeat-timeout-ms", std::to_string(kTimeoutMs),
                                 "--cluster-timeout-ms", "30000"},
        dir_.path() + "/daemon" + std::to_string(k) + ".log");
    pids_.push_back(daemons[k]->pid());
  };
  start(0);
  // Not a daemon of this cluster: a hello with the wrong secret.
  int intruder = -1;
  for (int i = 0; i < 100 && intruder < 0; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    const int fd = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(static_cast<uint16_t>(port));
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) == 0) {
      intruder = fd;
    } else {
      close(fd);
    }
  }
  ASSERT_GE(intruder, 0) << daemons[0]->Output();
  const char junk[] = "\x20\x00\x00\x00CDHL-but-not-the-secret-at-all..";
  ASSERT_GT(send(intruder, junk, sizeof(junk) - 1, MSG_NOSIGNAL), 0);
  char c = 0;
  EXPECT_LE(recv(intruder, &c, 1, 0), 0) << "the coordinator kept a connection without the secret";
  close(intruder);
  start(2);
  start(1);
  bool ready = false;
  for (int i = 0; i < 300 && !ready; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    ready = true;
    for (int k = 0; k < kNodes; ++k) ready &= std::filesystem::exists(Socket(k) + ".fds");
  }
  ASSERT_TRUE(ready) << daemons[0]->Output();
  std::this_thread::sleep_for(std::chrono::milliseconds(5 * kHeartbeatMs));
  for (int k = 0; k < kNodes; ++k) {
    bool ok = false;
    const auto r = Cluster(Socket(k), &ok);
    ASSERT_TRUE(ok) << k;
    EXPECT_EQ(r.mode(), "coordinator");
    EXPECT_EQ(r.self(), static_cast<uint32_t>(k));
    ASSERT_EQ(r.nodes_size(), kNodes);
    for (const auto& n : r.nodes()) EXPECT_EQ(n.state(), "alive") << k << " sees " << n.node_id();
  }
  EXPECT_NE(daemons[0]->Output().find("refused a connection"), std::string::npos) << daemons[0]->Output();
  // A communicator across the three: exact now, failed for good once node 2 is lost.
  auto socket_of = [&](int k) { return Socket(k); };
  auto exact = [](std::vector<testing::Rank>& ranks, StatusCode want) {
    testing::OnEveryRank(ranks, [&](testing::Rank& k) {
      if (k.client == nullptr || !k.joined.ok()) return;
      Buffer b;
      if (!k.client->AllocBuffer(1000 * 4, &b).ok()) return;  // node 2's daemon is gone
      testing::FillInput(DataType::kInt32, ReduceOp::kSum, k.rank, 9, b.data(), 1000);
      Handle h;
      Status s = k.comm->AllReduce(b, b, 1000, DataType::kInt32, ReduceOp::kSum, &h);
      if (s.ok()) s = h.Wait(5000);
      EXPECT_EQ(s.code(), want) << "rank " << k.rank << ": " << s.ToString();
      if (want == StatusCode::kOk) {
        EXPECT_EQ(testing::CountWrongAllReduce(DataType::kInt32, ReduceOp::kSum, 3, 9, b.data(), 1000), 0u);
      }
    });
  };
  std::vector<testing::Rank> before = testing::JoinAll(socket_of, "before", {0, 1, 2});
  for (const auto& k : before) ASSERT_TRUE(k.joined.ok()) << k.joined.ToString();
  exact(before, StatusCode::kOk);
  daemons[2]->Kill(SIGKILL);
  std::string why;
  const int64_t ms = MsUntilLost(Socket(0), 2, 5000, &why);
  std::printf("coordinator mode, node 2 killed: node 0 saw it lost after %lld ms (%s)\n", (long long)ms, why.c_str());
  EXPECT_GE(ms, 0);
  EXPECT_LT(ms, 2000);

  // Restarted as it was started, node 2 rejoins as a new epoch: every node
  // sees it alive again and hears its heartbeats.
  bool ok = false;
  const uint64_t old_epoch = Cluster(Socket(0), &ok).nodes(2).epoch();
  ASSERT_TRUE(ok);
  std::filesystem::remove(Socket(2) + ".fds");
  const auto t0 = std::chrono::steady_clock::now();
  start(2);
  bool back = false;
  while (!back && std::chrono::steady_clock::now() - t0 < std::chrono::seconds(10)) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    back = std::filesystem::exists(Socket(2) + ".fds");
    for (int k = 0; k < kNodes && back; ++k) {
      const auto r = Cluster(Socket(k), &ok);
      back = ok && r.nodes_size() == kNodes;
      for (const auto& n : r.nodes()) back = back && n.state() == "alive" && (n.node_id() == r.self() || n.last_heartbeat_ms_ago() >= 0);
    }
  }
  const int64_t rejoin_ms =
      std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - t0).count();
  std::printf("node 2 restarted: every node saw it alive again after %lld ms\n", (long long)rejoin_ms);
  ASSERT_TRUE(back) << daemons[0]->Output() << daemons[2]->Output();
  const auto r0 = Cluster(Socket(0), &ok);
  const auto r1 = Cluster(Socket(1), &ok);
  EXPECT_NE(r0.nodes(2).epoch(), old_epoch);
  EXPECT_EQ(r1.nodes(2).epoch(), r0.nodes(2).epoch());  // node 1 heard of the new epoch from node 0
  EXPECT_EQ(r0.nodes(2).pid(), daemons[2]->pid());
  // Old communicators stay failed; new ones span the restarted node again.
  before.pop_back();  // node 2's rank: its daemon died
  exact(before, StatusCode::kUnavailable);
  std::vector<testing::Rank> after = testing::JoinAll(socket_of, "after", {2, 0, 1});
  for (const auto& k : after) ASSERT_TRUE(k.joined.ok()) << k.joined.ToString();
  exact(after, StatusCode::kOk);
  for (auto& d : daemons) d->Kill(SIGTERM);
}

// A cluster that cannot form says who is missing, within its timeout.
TEST(ClusterFormTest, ACoordinatorWhoseNodesNeverComeNamesThem) {
  TempDir dir;
  const int port = FreePort();
  Process d({testing::DaemonBin(), "--cluster", "coordinator", "--coordinator", "127.0.0.1:" + std::to_string(port),
             "--node-rank", "0", "--nodes", "3", "--cluster-secret", "s", "--socket", dir.path() + "/c.sock",
             "--backend", "host", "--cluster-timeout-ms", "500"},
            dir.path() + "/daemon.log");
  EXPECT_EQ(d.Wait(10000), 1) << d.Output();
  EXPECT_NE(d.Output().find("cluster did not form: nodes 1,2 never reached the coordinator"), std::string::npos)
      << d.Output();
}

}  // namespace
}  // namespace collectived
