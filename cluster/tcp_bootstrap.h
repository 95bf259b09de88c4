// Forming a cluster without mpirun (daemons as systemd services): node 0 is
// the coordinator. It listens on the coordinator address; every other daemon
// connects (retrying until the coordinator is up), sends its record with the
// cluster secret and the node count, and gets every node's record back once
// all of them arrived. A connection with a wrong secret, node count or a
// node rank already taken is closed and logged; the cluster still forms.
#ifndef COLLECTIVED_CLUSTER_TCP_BOOTSTRAP_H_
#define COLLECTIVED_CLUSTER_TCP_BOOTSTRAP_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "cluster/membership.h"
#include "collectived/status.h"

namespace collectived::cluster {

struct CoordinatorOptions {
  std::string address;  // HOST:PORT of node 0
  uint32_t node_rank = 0;
  uint32_t nodes = 1;
  uint64_t secret = 0;
  int64_t timeout_ns = 60'000'000'000;  // for the whole cluster to form
};

// `self` with its node id = options.node_rank. Out: every node's NodeInfo by
// node id; on node 0, *listen_fd: the coordinator's socket, still open for
// RejoinService (elsewhere -1). DEADLINE_EXCEEDED naming the missing nodes
// past the timeout. A restarted daemon calls it again as it was started: it
// rejoins (as a new epoch) once node 0 sees its old incarnation lost.
Status CoordinatorBootstrap(const NodeInfo& self, const CoordinatorOptions& options, std::vector<NodeInfo>* nodes,
                            int* listen_fd);

// Node 0 after the cluster formed: keeps the coordinator's socket and lets a
// restarted daemon rejoin. Its hello is checked as at formation; a node
// whose current incarnation is alive is refused. A rejoining daemon gets the
// current table, and `rejoined` runs with its record (to tell the others).
class RejoinService {
 public:
  RejoinService(int listen_fd, CoordinatorOptions options, std::vector<NodeInfo> table,
                std::function<bool(uint32_t)> is_lost, std::function<void(const NodeInfo&)> rejoined);
  ~RejoinService();  // stops and closes the socket
  void Start();

 private:
  void Loop();
  const int listen_fd_;
  const CoordinatorOptions options_;
  std::vector<NodeInfo> table_;  // the loop thread's
  const std::function<bool(uint32_t)> is_lost_;
  const std::function<void(const NodeInfo&)> rejoined_;
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

// The secret of a configured string (64-bit FNV-1a): what heartbeats carry.
uint64_t SecretOf(const std::string& text);

}  // namespace collectived::cluster

#endif  // COLLECTIVED_CLUSTER_TCP_BOOTSTRAP_H_
