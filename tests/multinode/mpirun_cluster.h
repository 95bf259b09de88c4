// N daemons of one mpirun job on this machine (UCX over tcp on loopback, as
// docs/multinode.md runs them), each with its own socket in a temp dir:
// stand-ins for N nodes. Every daemon is gone when the object is. And the
// ranks of a communicator across them, joined from this process (JoinAll).
#ifndef COLLECTIVED_TESTS_MULTINODE_MPIRUN_CLUSTER_H_
#define COLLECTIVED_TESTS_MULTINODE_MPIRUN_CLUSTER_H_

#include <grpcpp/grpcpp.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "collectived/client.h"
#include "collectived/v1/collectived.grpc.pb.h"
#include "tests/integration/daemon_harness.h"

namespace collectived::testing {

// The daemon's view of the cluster (GetCluster); *ok false when it did not answer.
inline v1::GetClusterResponse Cluster(const std::string& socket, bool* ok) {
  auto stub = v1::CollectiveService::NewStub(grpc::CreateChannel("unix:" + socket, grpc::InsecureChannelCredentials()));
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(2));
  v1::GetClusterResponse r;
  *ok = stub->GetCluster(&ctx, v1::GetClusterRequest(), &r).ok();
  return r;
}

class MpirunCluster {
 public:
  // Starts `nodes` daemons on `backend` with `extra` flags; Ready() says
  // whether every one serves and sees every other, with its pid in pids().
  MpirunCluster(int nodes, const std::vector<std::string>& extra, const std::string& backend = "host")
      : nodes_(nodes) {
    std::vector<std::string> argv = {MPIEXEC_BIN, "-np", std::to_string(nodes), "--oversubscribe", "--bind-to",
                                     "none", "--enable-recovery", "--mca", "btl", "self,tcp", "-x", "UCX_TLS=tcp,self",
                                     "-x", "UCX_NET_DEVICES=lo", "-x", "UCX_WARN_UNUSED_ENV_VARS=n"};
    if (geteuid() == 0) argv.insert(argv.begin() + 1, "--allow-run-as-root");
    for (const std::string& a : {DaemonBin(), std::string("--cluster"), std::string("mpi"), std::string("--socket"),
                                 dir_.path() + "/c{node}.sock", std::string("--backend"), backend,
                                 std::string("--log-level"), std::string("info")}) {
      argv.push_back(a);
    }
    argv.insert(argv.end(), extra.begin(), extra.end());
    // Tests that do not time a silent node's loss get a heartbeat timeout of
    // 10 s, not the daemon's 3 s: four daemons under TSan on 2 cores moving
    // 64 MiB starved heartbeats past 3 s once in CI and a node was "lost".
    if (std::find(extra.begin(), extra.end(), "--heartbeat-timeout-ms") == extra.end()) {
      argv.insert(argv.end(), {"--heartbeat-timeout-ms", "10000"});
    }
    mpirun_ = std::make_unique<Process>(argv, dir_.path() + "/mpirun.log");
    for (int i = 0; i < 300 && !ready_; ++i) {  // up to 30 s: several daemons start on 2 cores
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
      if (mpirun_->Wait(0) != -1) return;
      bool up = true;
      for (int k = 0; k < nodes; ++k) up = up && std::filesystem::exists(Socket(k) + ".fds");
      if (!up) continue;
      bool ok = false;
      const auto r = Cluster(Socket(0), &ok);
      if (!ok || r.nodes_size() != nodes) continue;
      pids_.clear();
      bool all_heard = true;
      for (const auto& n : r.nodes()) {
        pids_.push_back(n.pid());
        all_heard = all_heard && n.state() == "alive" && (n.node_id() == r.self() || n.last_heartbeat_ms_ago() >= 0);
      }
      ready_ = all_heard;
    }
  }
  ~MpirunCluster() {
    for (pid_t p : pids_) kill(p, SIGCONT);
    mpirun_->Kill(SIGTERM);  // mpirun passes it on to every daemon
    if (mpirun_->Wait(10000) == -1) mpirun_->Kill(SIGKILL);
    for (pid_t p : pids_) kill(p, SIGKILL);  // none may outlive the test
  }
  bool Ready() const { return ready_; }
  int nodes() const { return nodes_; }
  std::string Socket(int node) const { return dir_.path() + "/c" + std::to_string(node) + ".sock"; }
  const std::vector<pid_t>& pids() const { return pids_; }
  std::string Output() const { return mpirun_->Output(); }
  const std::string& dir() const { return dir_.path(); }

 private:
  int nodes_;
  TempDir dir_;
  std::unique_ptr<Process> mpirun_;
  std::vector<pid_t> pids_;
  bool ready_ = false;
};

// One rank: its client on its node's daemon and its communicator.
struct Rank {
  uint32_t rank = 0;
  std::unique_ptr<Client> client;
  std::unique_ptr<Communicator> comm;
  Status joined;
};

// Joins `key` with rank r on daemon node_of[r], every rank on its own thread
// (a join returns once every rank joined somewhere).
inline std::vector<Rank> JoinAll(const std::function<std::string(int)>& socket_of, const std::string& key,
                                 const std::vector<int>& node_of, ExecutionMode mode = ExecutionMode::kDefault,
                                 uint32_t op_timeout_ms = 0) {
  const uint32_t world = static_cast<uint32_t>(node_of.size());
  std::vector<Rank> ranks(world);
  std::vector<std::thread> threads;
  for (uint32_t r = 0; r < world; ++r) {
    threads.emplace_back([&, r] {
      Rank& k = ranks[r];
      k.rank = r;
      k.joined = Client::Connect({.socket_path = socket_of(node_of[r]), .client_name = key}, &k.client);
      if (!k.joined.ok()) return;
      CommunicatorOptions o = testing::CommOptions(key, world, r, mode);
      o.op_timeout_ms = op_timeout_ms;
      o.join_timeout_ms = 30000;
      k.joined = k.client->CreateCommunicator(o, &k.comm);
    });
  }
  for (auto& t : threads) t.join();
  return ranks;
}

// Runs `body` for every rank at once (the ops are collective).
inline void OnEveryRank(std::vector<Rank>& ranks, const std::function<void(Rank&)>& body) {
  std::vector<std::thread> threads;
  for (Rank& k : ranks) threads.emplace_back([&] { body(k); });
  for (auto& t : threads) t.join();
}

inline std::vector<Rank> JoinAll(const MpirunCluster& cluster, const std::string& key, const std::vector<int>& node_of,
                                 ExecutionMode mode = ExecutionMode::kDefault, uint32_t op_timeout_ms = 0) {
  return JoinAll([&](int k) { return cluster.Socket(k); }, key, node_of, mode, op_timeout_ms);
}

}  // namespace collectived::testing

#endif  // COLLECTIVED_TESTS_MULTINODE_MPIRUN_CLUSTER_H_
