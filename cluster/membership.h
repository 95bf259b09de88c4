// The daemons of one job: who they are, and whether each is alive. A node is
// lost when its transport reports the peer gone (UCX error handling, ~1 ms
// after a process dies) or when no heartbeat came for the heartbeat timeout
// (a stopped or partitioned daemon, which no transport reports). A lost node
// stays lost: its communicators are failed, and a restarted daemon joins as
// a new epoch.
#ifndef COLLECTIVED_CLUSTER_MEMBERSHIP_H_
#define COLLECTIVED_CLUSTER_MEMBERSHIP_H_

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "base/mutex.h"
#include "base/thread_annotations.h"

namespace collectived::cluster {

// What a daemon tells the others at start-up (the bootstrap carries it).
struct NodeInfo {
  uint32_t node_id = 0;
  uint64_t epoch = 0;  // this incarnation of the daemon: unique per start
  int32_t pid = 0;
  std::string host;
  std::string worker_address;  // the transport's (UCX worker address bytes)
};

enum class NodeState { kAlive, kLost };
const char* NodeStateName(NodeState s);

struct NodeStatus {
  NodeInfo info;
  NodeState state = NodeState::kAlive;
  int64_t last_heartbeat_ns = 0;  // CLOCK_MONOTONIC; 0: none yet
  int64_t lost_ns = 0;
  std::string lost_reason;
};

// Thread-safe.
class Membership {
 public:
  // `nodes[self]` is this daemon. `on_lost` runs (outside the lock) once per
  // node that is lost, with the reason.
  Membership(uint32_t self, std::vector<NodeInfo> nodes, std::function<void(uint32_t, const std::string&)> on_lost);

  uint32_t self() const { return self_; }
  size_t size() const { return size_; }
  std::vector<NodeStatus> Nodes() const COLLECTIVED_EXCLUDES(mu_);
  bool Alive(uint32_t node) const COLLECTIVED_EXCLUDES(mu_);
  // Alive as incarnation `epoch` (this node: its own epoch).
  bool AliveAt(uint32_t node, uint64_t epoch) const COLLECTIVED_EXCLUDES(mu_);
  uint64_t SelfEpoch() const COLLECTIVED_EXCLUDES(mu_);

  // A heartbeat from `node` of `epoch` arrived: false (and ignored) for an
  // unknown node, another epoch, or a node already lost.
  bool Heartbeat(uint32_t node, uint64_t epoch, int64_t now_ns) COLLECTIVED_EXCLUDES(mu_);
  // `epoch` (non-zero): only if the node is still that incarnation (an
  // error of an endpoint to an old one says nothing of its successor).
  void MarkLost(uint32_t node, const std::string& reason, int64_t now_ns, uint64_t epoch = 0) COLLECTIVED_EXCLUDES(mu_);
  // A restarted daemon took `info.node_id` back as a new epoch: alive again,
  // heard from now. False (nothing changed) for this node itself, an unknown
  // node or the epoch it already has. The old incarnation, if not yet seen
  // lost (a restart faster than the transport's report or the heartbeat
  // timeout), is lost first: `on_lost` runs for it before the new epoch is
  // taken, so what spanned it fails at once instead of waiting out a
  // deadline.
  bool Rejoin(const NodeInfo& info, int64_t now_ns) COLLECTIVED_EXCLUDES(mu_);
  // Marks lost every node silent for longer than `timeout_ns` (counting from
  // `start_ns` for one never heard from).
  void ExpireSilent(int64_t now_ns, int64_t start_ns, int64_t timeout_ns) COLLECTIVED_EXCLUDES(mu_);

 private:
  const uint32_t self_;
  const size_t size_;
  const std::function<void(uint32_t, const std::string&)> on_lost_;
  mutable Mutex mu_;
  std::vector<NodeStatus> nodes_ COLLECTIVED_GUARDED_BY(mu_);
};

}  // namespace collectived::cluster

#endif  // COLLECTIVED_CLUSTER_MEMBERSHIP_H_
