// Forming a cluster under mpirun: one daemon per MPI rank (one per node, with
// --map-by ppr:1:node). MPI only exchanges what each daemon is (NodeInfo)
// and a cluster secret chosen by rank 0, then is finalized: no MPI call
// follows, so a daemon's death cannot reach the others through MPI. Run
// mpirun with --enable-recovery, or mpirun itself ends the job when one
// daemon dies (docs/multinode.md).
#ifndef COLLECTIVED_CLUSTER_MPI_BOOTSTRAP_H_
#define COLLECTIVED_CLUSTER_MPI_BOOTSTRAP_H_

#include <cstdint>
#include <vector>

#include "cluster/membership.h"
#include "collectived/status.h"

namespace collectived::cluster {

// `self` without its node id (the MPI rank becomes it). Out: every daemon's
// NodeInfo by node id, this daemon's id and the secret. Call before any
// thread starts.
Status MpiBootstrap(const NodeInfo& self, std::vector<NodeInfo>* nodes, uint32_t* self_id, uint64_t* secret);

}  // namespace collectived::cluster

#endif  // COLLECTIVED_CLUSTER_MPI_BOOTSTRAP_H_
