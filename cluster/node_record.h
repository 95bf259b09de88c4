// A daemon's NodeInfo as the bootstraps carry it: fixed fields, then the host
// name and the transport address. Decoding checks every length against what
// arrived: the bytes come from another process, maybe not a daemon.
#ifndef COLLECTIVED_CLUSTER_NODE_RECORD_H_
#define COLLECTIVED_CLUSTER_NODE_RECORD_H_

#include <cstddef>
#include <string>

#include "cluster/membership.h"
#include "collectived/status.h"

namespace collectived::cluster {

constexpr size_t kMaxNodeRecord = 64 * 1024;  // a UCX worker address is a few hundred bytes

std::string EncodeNode(const NodeInfo& node);
// INVALID_ARGUMENT when `bytes` is not exactly one record.
Status DecodeNode(const std::string& bytes, NodeInfo* out);

}  // namespace collectived::cluster

#endif  // COLLECTIVED_CLUSTER_NODE_RECORD_H_
