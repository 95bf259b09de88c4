// Forming a cluster without mpirun (daemons as systemd services): node 0 is
// the coordinator. It listens on the coordinator address; every other daemon
// connects (retrying until the coordinator is up), sends its record with the
// cluster secret and the node count, and gets every node's record back once
// all of them arrived. A connection with a wrong secret, node count or a
// node rank already taken is closed and logged; the cluster still forms.
#ifndef COLLECTIVED_CLUSTER_TCP_BOOTSTRAP_H_
#define COLLECTIVED_CLUSTER_TCP_BOOTSTRAP_H_

#include <cstdint>
#include <string>
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
// node id. DEADLINE_EXCEEDED naming the missing nodes past the timeout.
Status CoordinatorBootstrap(const NodeInfo& self, const CoordinatorOptions& options, std::vector<NodeInfo>* nodes);

// The secret of a configured string (64-bit FNV-1a): what heartbeats carry.
uint64_t SecretOf(const std::string& text);

}  // namespace collectived::cluster

#endif  // COLLECTIVED_CLUSTER_TCP_BOOTSTRAP_H_
