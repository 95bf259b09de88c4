#include "cluster/membership.h"

#include <utility>

namespace collectived::cluster {

const char* NodeStateName(NodeState s) { return s == NodeState::kAlive ? "alive" : "lost"; }

Membership::Membership(uint32_t self, std::vector<NodeInfo> nodes,
                       std::function<void(uint32_t, const std::string&)> on_lost)
    : self_(self), size_(nodes.size()), on_lost_(std::move(on_lost)) {
  for (NodeInfo& n : nodes) {
    NodeStatus s;
    s.info = std::move(n);
    nodes_.push_back(std::move(s));
  }
}

std::vector<NodeStatus> Membership::Nodes() const {
  MutexLock lock(&mu_);
  return nodes_;
}

bool Membership::Alive(uint32_t node) const {
  MutexLock lock(&mu_);
  return node < nodes_.size() && nodes_[node].state == NodeState::kAlive;
}

bool Membership::AliveAt(uint32_t node, uint64_t epoch) const {
  MutexLock lock(&mu_);
  return node < nodes_.size() && nodes_[node].state == NodeState::kAlive && nodes_[node].info.epoch == epoch;
}

uint64_t Membership::SelfEpoch() const {
  MutexLock lock(&mu_);
  return nodes_[self_].info.epoch;
}

bool Membership::Heartbeat(uint32_t node, uint64_t epoch, int64_t now_ns) {
  MutexLock lock(&mu_);
  if (node >= nodes_.size() || node == self_) return false;
  NodeStatus& n = nodes_[node];
  if (n.info.epoch != epoch || n.state != NodeState::kAlive) return false;
  n.last_heartbeat_ns = now_ns;
  return true;
}

void Membership::MarkLost(uint32_t node, const std::string& reason, int64_t now_ns, uint64_t epoch) {
  {
    MutexLock lock(&mu_);
    if (node >= nodes_.size() || node == self_ || nodes_[node].state == NodeState::kLost) return;
    if (epoch != 0 && nodes_[node].info.epoch != epoch) return;
    nodes_[node].state = NodeState::kLost;
    nodes_[node].lost_ns = now_ns;
    nodes_[node].lost_reason = reason;
  }
  if (on_lost_) on_lost_(node, reason);
}

bool Membership::Rejoin(const NodeInfo& info, int64_t now_ns) {
  {
    MutexLock lock(&mu_);
    if (info.node_id >= nodes_.size() || info.node_id == self_ || nodes_[info.node_id].info.epoch == info.epoch) {
      return false;
    }
  }
  // The old incarnation first (nothing happens if it was seen lost already):
  // cluster/model REJOIN_RACE, where it never was and a communicator over it
  // waited out its deadline.
  MarkLost(info.node_id, "restarted (a new incarnation) before it was seen lost", now_ns);
  MutexLock lock(&mu_);
  NodeStatus& n = nodes_[info.node_id];
  if (n.info.epoch == info.epoch) return false;  // another Rejoin took it meanwhile
  n.info = info;
  n.state = NodeState::kAlive;
  n.last_heartbeat_ns = now_ns;
  n.lost_ns = 0;
  n.lost_reason.clear();
  return true;
}

void Membership::ExpireSilent(int64_t now_ns, int64_t start_ns, int64_t timeout_ns) {
  std::vector<std::pair<uint32_t, std::string>> lost;
  {
    MutexLock lock(&mu_);
    for (uint32_t k = 0; k < nodes_.size(); ++k) {
      NodeStatus& n = nodes_[k];
      if (k == self_ || n.state == NodeState::kLost) continue;
      const int64_t since = n.last_heartbeat_ns != 0 ? n.last_heartbeat_ns : start_ns;
      if (now_ns - since <= timeout_ns) continue;
      n.state = NodeState::kLost;
      n.lost_ns = now_ns;
      n.lost_reason = "no heartbeat for " + std::to_string((now_ns - since) / 1000000) + " ms";
      lost.push_back({k, n.lost_reason});
    }
  }
  for (const auto& [k, why] : lost) {
    if (on_lost_) on_lost_(k, why);
  }
}

}  // namespace collectived::cluster
