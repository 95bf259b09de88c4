// Communicators across nodes (docs/multinode.md): the members of one key
// join on several daemons. Each daemon tells the others which ranks joined
// it (an announcement, again whenever that changes); the daemon holding
// rank 0 decides once every rank joined somewhere, exactly once, and sends
// the plan (who holds which ranks, the communicator's tag) to every node
// involved, which then forms its part: a segment of its own ranks, run by
// its executors, with a SpanningExchange for the part that crosses nodes.
// A node lost fails every communicator spanning it; a conflict (a rank
// joined twice, members that disagree) fails the key everywhere.
#include <spdlog/spdlog.h>

#include <algorithm>
#include <random>

#include "daemon/registry.h"
#include "daemon/registry_state.h"
#include "ring/wait.h"

namespace collectived::daemon {
namespace {

std::string RankList(const std::vector<uint32_t>& ranks) {
  std::string out;
  for (uint32_t r : ranks) out += (out.empty() ? "" : ",") + std::to_string(r);
  return out;
}

// The announcement of `comm`'s members here (forming: indexed by global rank).
cluster::JoinAnnounce AnnouncementOf(const Comm& comm) {
  cluster::JoinAnnounce a;
  a.key = comm.key;
  a.world = comm.world_size;
  // Client execution by name, or not (the default resolves to client on one node only).
  a.mode = static_cast<uint32_t>(comm.client_mode_asked            ? ExecutionMode::kClient
                                 : comm.mode == ExecutionMode::kDaemon ? ExecutionMode::kDaemon
                                                                       : ExecutionMode::kDefault);
  a.op_timeout_ms = comm.op_timeout_ms;
  a.gpu = comm.gpu;
  a.gpu_heap_bytes = comm.gpu_heap_bytes;
  for (uint32_t r = 0; r < comm.world_size; ++r) {
    if (comm.members[r] != 0) a.ranks.push_back(r);
  }
  return a;
}

// What every node's members must agree on; empty when they do.
std::string Disagreement(const cluster::JoinAnnounce& a, const cluster::JoinAnnounce& b, uint32_t node) {
  auto differs = [&](const char* what, uint64_t x, uint64_t y) {
    return std::string(what) + " " + std::to_string(y) + " on node " + std::to_string(node) + " differs from " +
           std::to_string(x);
  };
  if (a.world != b.world) return differs("world_size", a.world, b.world);
  if (a.op_timeout_ms != b.op_timeout_ms) return differs("op_timeout_ms", a.op_timeout_ms, b.op_timeout_ms);
  if (a.gpu != b.gpu) return differs("GPU (1) or host (0) ranks:", a.gpu, b.gpu);
  if (a.gpu_heap_bytes != b.gpu_heap_bytes) return differs("gpu_heap_bytes", a.gpu_heap_bytes, b.gpu_heap_bytes);
  return "";
}

}  // namespace

void Registry::AttachCluster(cluster::UcxTransport* transport, cluster::Membership* membership) {
  MutexLock lock(&mu_);
  transport_ = transport;
  membership_ = membership;
  // A restarted daemon's ids start elsewhere (its transport's queue is new;
  // a plan decided from its old incarnation fails on the epoch).
  comm_tag_counter_ = static_cast<uint32_t>(std::random_device{}());
  recv_id_counter_ = static_cast<uint32_t>(std::random_device{}());
}

bool Registry::ClusterActiveLocked() const { return transport_ != nullptr && membership_->size() > 1; }

void Registry::AnnounceLocked(Comm& comm) {
  if (!ClusterActiveLocked()) return;
  comm.announced = true;
  cluster::ControlMessage m;
  m.kind = cluster::ControlMessage::Kind::kAnnounce;
  m.announce = AnnouncementOf(comm);
  m.announce.recv_id = RecvIdLocked(comm);
  m.announce.epoch = membership_->SelfEpoch();
  if (comm.formed) m.announce.ranks.clear();  // formed here alone: nothing to wait for
  const std::string payload = cluster::EncodeControl(m);
  for (uint32_t node = 0; node < membership_->size(); ++node) {
    if (node != membership_->self()) transport_->SendControl(node, payload);
  }
}

uint32_t Registry::NextCommTagLocked() {
  // Node id in the high 8 bits: nodes never hand out the same tag. Skip the
  // tags of this node's communicators still alive.
  const uint32_t self = membership_->self() & 0xff;
  for (;;) {
    const uint32_t tag = self << 12 | (comm_tag_counter_++ & 0xfff);
    bool used = false;
    for (const auto& [id, c] : comms_) used = used || (c->exchange && c->exchange->plan().comm_tag == tag);
    if (!used) return tag;
  }
}

uint32_t Registry::RecvIdLocked(Comm& comm) {
  if (comm.recv_id != 0) return comm.recv_id;
  constexpr uint32_t kMask = (1u << cluster::kRecvIdBits) - 1;
  for (;;) {
    const uint32_t id = recv_id_counter_++ & kMask;
    bool used = id == 0;
    for (const auto& [cid, c] : comms_) used = used || c->recv_id == id;
    if (!used) return comm.recv_id = id;
  }
}

void Registry::TryDecideLocked(const std::string& key, Deferred* after) {
  auto kit = comm_by_key_.find(key);
  if (kit == comm_by_key_.end()) return;
  Comm& comm = *comms_.at(kit->second);
  if (comm.formed || comm.members[0] == 0) return;  // only rank 0's node decides
  auto ait = announced_.find(key);
  if (ait == announced_.end()) return;
  const uint32_t self = membership_->self();
  const cluster::JoinAnnounce mine = AnnouncementOf(comm);
  std::map<uint32_t, std::vector<uint32_t>> by_node{{self, mine.ranks}};
  std::map<uint32_t, std::pair<uint32_t, uint64_t>> id_epoch{{self, {RecvIdLocked(comm), membership_->SelfEpoch()}}};
  std::vector<uint32_t> owner(comm.world_size, UINT32_MAX);
  for (uint32_t r : mine.ranks) owner[r] = self;
  std::vector<uint32_t> involved{self};
  bool client_asked = comm.client_mode_asked;
  std::string conflict;
  for (const auto& [node, a] : ait->second) {
    involved.push_back(node);
    if (conflict.empty()) conflict = Disagreement(mine, a.announce, node);
    client_asked = client_asked || a.announce.mode == static_cast<uint32_t>(ExecutionMode::kClient);
    for (uint32_t r : a.announce.ranks) {
      if (r >= comm.world_size) continue;  // Disagreement names the world size
      if (owner[r] != UINT32_MAX && conflict.empty()) {
        conflict = "rank " + std::to_string(r) + " joined on node " + std::to_string(owner[r]) + " and on node " +
                   std::to_string(node);
      }
      owner[r] = node;
    }
    by_node[node] = a.announce.ranks;
    id_epoch[node] = {a.announce.recv_id, a.announce.epoch};
  }
  if (!conflict.empty()) {
    for (const auto& [node, a] : ait->second) {
      used_announcements_[{node, a.announce.epoch, a.announce.recv_id}] = ring::NowNs();
    }
    FailKeyLocked(key, Status::InvalidArgument("communicator '" + key + "' across nodes: " + conflict), involved, 0,
                  after);
    return;
  }
  for (uint32_t o : owner) {
    if (o == UINT32_MAX) return;  // not every rank joined yet
  }
  if (client_asked) {
    for (const auto& [node, a] : ait->second) {
      used_announcements_[{node, a.announce.epoch, a.announce.recv_id}] = ring::NowNs();
    }
    FailKeyLocked(key, Status::FailedPrecondition("communicator '" + key + "' spans nodes, and communicators across "
                                                  "nodes are daemon-executed: ask for ExecutionMode::kDaemon (or "
                                                  "leave the default)"),
                  involved, 0, after);
    return;
  }
  cluster::FormDecision form;
  form.key = key;
  form.mode = static_cast<uint32_t>(ExecutionMode::kDaemon);
  form.plan.comm_tag = NextCommTagLocked();
  form.plan.world = comm.world_size;
  for (auto& [node, ranks] : by_node) {  // std::map: ascending node ids
    std::sort(ranks.begin(), ranks.end());
    form.plan.nodes.push_back(node);
    form.plan.ranks.push_back(ranks);
    form.plan.recv_ids.push_back(id_epoch[node].first);
    form.plan.epochs.push_back(id_epoch[node].second);
  }
  announced_.erase(ait);
  cluster::ControlMessage m;
  m.kind = cluster::ControlMessage::Kind::kForm;
  m.form = form;
  const std::string payload = cluster::EncodeControl(m);
  for (uint32_t node : form.plan.nodes) {
    if (node != self) transport_->SendControl(node, payload);
  }
  ApplyFormLocked(form, after);
}

void Registry::ForgetKeyLocked(const std::string& key, const std::vector<uint32_t>& involved) {
  announced_.erase(key);
  cluster::ControlMessage m;
  m.kind = cluster::ControlMessage::Kind::kAnnounce;
  m.announce.key = key;
  m.announce.world = 1;  // no ranks: a withdrawal
  const std::string payload = cluster::EncodeControl(m);
  for (uint32_t node = 0; node < membership_->size(); ++node) {
    if (node != membership_->self() && std::find(involved.begin(), involved.end(), node) == involved.end()) {
      transport_->SendControl(node, payload);
    }
  }
}

void Registry::ApplyFormLocked(const cluster::FormDecision& form, Deferred* after) {
  const uint32_t self = membership_->self();
  // Every node of the plan forgets the key's announcements, not only the
  // decider: a later use of the key with rank 0 here must not decide from
  // them (cluster/model REUSE: a correct job failed "rank 0 joined twice").
  ForgetKeyLocked(form.key, form.plan.nodes);
  for (size_t i = 0; i < form.plan.nodes.size() && i < form.plan.recv_ids.size() && i < form.plan.epochs.size(); ++i) {
    if (form.plan.nodes[i] != self) {
      used_announcements_[{form.plan.nodes[i], form.plan.epochs[i], form.plan.recv_ids[i]}] = ring::NowNs();
    }
  }
  auto kit = comm_by_key_.find(form.key);
  const auto pos = std::find(form.plan.nodes.begin(), form.plan.nodes.end(), self);
  Status bad = cluster::CheckPlan(form.plan, self);
  std::vector<uint32_t> mine;
  if (bad.ok()) mine = form.plan.ranks[pos - form.plan.nodes.begin()];
  if (bad.ok() && kit == comm_by_key_.end()) {
    bad = Status::Aborted("node " + std::to_string(self) + " has no members of '" + form.key + "' waiting any more");
  }
  Comm* comm = bad.ok() ? comms_.at(kit->second).get() : nullptr;
  if (bad.ok() && (comm->world_size != form.plan.world || AnnouncementOf(*comm).ranks != mine)) {
    bad = Status::Aborted("ranks " + RankList(mine) + " of '" + form.key + "' were to form on node " +
                          std::to_string(self) + ", which has ranks " + RankList(AnnouncementOf(*comm).ranks) +
                          " waiting now (a member left meanwhile)");
  }
  if (bad.ok()) {
    // A plan decided from an announcement of another Comm than this one (a
    // member left and the key was joined again) or of another incarnation
    // (cluster/model SLOW_PLAN, FORMED_AFTER_LOSS) fails here, at once,
    // rather than at its first op's deadline.
    const size_t at = pos - form.plan.nodes.begin();
    if (form.plan.recv_ids[at] != RecvIdLocked(*comm) || form.plan.epochs[at] != membership_->SelfEpoch()) {
      bad = Status::Aborted("the plan of '" + form.key + "' was decided from an earlier announcement of node " +
                            std::to_string(self) + " (its members left and joined again, or it restarted)");
    }
    for (size_t i = 0; bad.ok() && i < form.plan.nodes.size(); ++i) {
      if (i != at && !membership_->AliveAt(form.plan.nodes[i], form.plan.epochs[i])) {
        bad = Status::Unavailable("node " + std::to_string(form.plan.nodes[i]) + " of the plan of '" + form.key +
                                  "' was lost or restarted before the communicator formed");
      }
    }
  }
  std::unique_ptr<cluster::SpanningExchange> exchange;
  if (bad.ok()) {
    bad = cluster::SpanningExchange::Create(transport_, self, form.plan, config_.max_message_bytes, &exchange);
  }
  if (!bad.ok()) {
    spdlog::warn("communicator '{}' across nodes not formed: {}", form.key, bad.ToString());
    FailKeyLocked(form.key, bad, form.plan.nodes, form.plan.comm_tag, after);
    return;
  }
  // This node's part: a segment of its ranks alone, members by segment rank.
  const uint32_t local = static_cast<uint32_t>(mine.size());
  ring::SegmentParams params = comm->seg.params();
  params.world_size = local;
  params.mode = ExecutionMode::kDaemon;
  ring::SegmentLayout layout;
  std::unique_ptr<ipc::ShmWindow> window;
  Status s = ring::SegmentLayout::Compute(params, &layout);
  if (s.ok()) s = ipc::ShmWindow::Create("collectived-comm-" + std::to_string(comm->id), layout.total_bytes, &window);
  ring::CommSegment seg;
  if (s.ok()) s = ring::CommSegment::Initialize(window->data(), window->size(), params, &seg);
  if (!s.ok()) {
    FailKeyLocked(form.key, s, form.plan.nodes, form.plan.comm_tag, after);
    return;
  }
  std::vector<uint64_t> members(local);
  std::vector<JoinDone> pending(local);
  std::vector<int64_t> deadlines(local);
  std::vector<std::string> devices(local);
  for (uint32_t i = 0; i < local; ++i) {
    const uint32_t g = mine[i];
    members[i] = comm->members[g];
    pending[i] = std::move(comm->pending[g]);
    deadlines[i] = comm->join_deadline_ns[g];
    devices[i] = comm->device_uuids[g];
    Session& session = *sessions_.at(members[i]);
    session.memberships.erase({comm->id, g});
    session.memberships.insert({comm->id, i});
  }
  comm->members = std::move(members);
  comm->pending = std::move(pending);
  comm->join_deadline_ns = std::move(deadlines);
  comm->device_uuids = std::move(devices);
  comm->captured_plans.assign(local, 0);
  comm->registrations_made.assign(local, 0);
  comm->world_size = local;
  comm->global_world = form.plan.world;
  comm->mode = ExecutionMode::kDaemon;
  comm->window = std::move(window);
  comm->seg = seg;
  comm->exchange = std::move(exchange);
  comm->announced = false;
  FormLocked(*comm, after);
}

void Registry::FailKeyLocked(const std::string& key, const Status& status, const std::vector<uint32_t>& nodes,
                             uint32_t comm_tag, Deferred* after) {
  const uint32_t self = membership_->self();
  cluster::ControlMessage m;
  m.kind = cluster::ControlMessage::Kind::kFailure;
  m.failure.key = key;
  m.failure.comm_tag = comm_tag;
  m.failure.code = static_cast<uint32_t>(status.code());
  m.failure.reason = status.message();
  m.failure.withdrew = true;  // below: this node's members of the key still forming
  const std::string payload = cluster::EncodeControl(m);
  for (uint32_t node : nodes) {
    if (node != self && node < membership_->size()) transport_->SendControl(node, payload);
  }
  ForgetKeyLocked(key, nodes);
  auto kit = comm_by_key_.find(key);
  if (kit == comm_by_key_.end()) return;
  const uint64_t id = kit->second;
  const uint32_t world = comms_.at(id)->world_size;
  comms_.at(id)->announced = false;  // the others know already
  for (uint32_t r = 0; r < world; ++r) {
    auto cit = comms_.find(id);
    if (cit == comms_.end()) break;
    if (cit->second->members[r] != 0) WithdrawJoinLocked(*cit->second, r, status, after);
  }
}

bool Registry::AbortSpanningLocked(const std::function<bool(const Comm&)>& pred, StatusCode code,
                                   const std::string& why, std::vector<Comm*>* newly) {
  bool matched = false;
  for (auto& [id, c] : comms_) {
    if (!c->formed || !c->exchange || !pred(*c)) continue;
    matched = true;
    if (!c->seg.aborted()) {
      spdlog::error("communicator {} '{}' fails: {}", c->id, c->key, why);
      if (newly != nullptr) newly->push_back(c.get());
    }
    c->peers_told = true;  // the word came from another node (or its loss): relayed, if at all, by the caller
    c->seg.Abort(code, why.c_str());
    ring::WakeWaiters(c->exchange->exchange_done());
  }
  return matched;
}

void Registry::TellSpannedNodesLocked(const Comm& comm, const Status& status, bool relayed, uint32_t from) {
  const uint32_t self = membership_->self();
  cluster::ControlMessage m;
  m.kind = cluster::ControlMessage::Kind::kFailure;
  m.failure.key = comm.key;
  m.failure.comm_tag = comm.exchange->plan().comm_tag;
  m.failure.code = static_cast<uint32_t>(status.code());
  // The receiver aborts with it, which says "communicator aborted" again.
  const std::string prefix = "communicator aborted: ";
  m.failure.reason = status.message().rfind(prefix, 0) == 0 ? status.message().substr(prefix.size()) : status.message();
  m.failure.relayed = relayed;
  const std::string payload = cluster::EncodeControl(m);
  for (uint32_t node : comm.exchange->plan().nodes) {
    if (node != self && node != from) transport_->SendControl(node, payload);
  }
}

void Registry::OnClusterMessage(uint32_t node, const std::string& payload) {
  cluster::ControlMessage m;
  Status decoded = cluster::DecodeControl(payload, &m);
  Deferred after;
  {
    MutexLock lock(&mu_);
    if (!decoded.ok()) {
      ++refused_control_;
      spdlog::warn("cluster: from node {}: {}", node, decoded.message());
      return;
    }
    switch (m.kind) {
      case cluster::ControlMessage::Kind::kAnnounce: {
        const std::string key = m.announce.key;
        if (m.announce.ranks.empty()) {
          auto ait = announced_.find(key);
          if (ait != announced_.end()) {
            ait->second.erase(node);
            if (ait->second.empty()) announced_.erase(ait);
          }
          break;
        }
        if (used_announcements_.count({node, m.announce.epoch, m.announce.recv_id})) {
          spdlog::debug("cluster: node {}'s announcement of '{}' arrived after a plan used it; dropped", node, key);
          break;
        }
        if (!announced_.count(key) && announced_.size() >= config_.max_pending_joins) {
          ++refused_control_;
          spdlog::warn("cluster: node {} announced '{}' beyond --max-pending-joins keys; ignored", node, key);
          break;
        }
        announced_[key][node] = Announced{m.announce, ring::NowNs()};
        TryDecideLocked(key, &after);
        break;
      }
      case cluster::ControlMessage::Kind::kForm:
        if (std::find(m.form.plan.nodes.begin(), m.form.plan.nodes.end(), node) == m.form.plan.nodes.end()) {
          ++refused_control_;  // only a node holding ranks (rank 0's) decides
          break;
        }
        ApplyFormLocked(m.form, &after);
        break;
      case cluster::ControlMessage::Kind::kFailure: {
        const Status status(static_cast<StatusCode>(m.failure.code),
                            m.failure.reason + " (from node " + std::to_string(node) + ")");
        if (m.failure.withdrew) {
          // What it announced of the key came before (in order per sender)
          // and is gone there: deciding from it would fail the next try.
          auto ait = announced_.find(m.failure.key);
          if (ait != announced_.end()) {
            ait->second.erase(node);
            if (ait->second.empty()) announced_.erase(ait);
          }
        }
        // A communicator formed here under that tag fails; if none did, the
        // members still forming under the key were that communicator (its
        // plan may not have arrived yet) and are withdrawn. A newer
        // communicator of the same key is never touched: it forms only after
        // the one of that tag formed here.
        std::vector<Comm*> newly;
        const bool formed = m.failure.comm_tag != 0 && AbortSpanningLocked(
                                                           [&](const Comm& c) {
                                                             return c.key == m.failure.key &&
                                                                    c.exchange->plan().comm_tag == m.failure.comm_tag &&
                                                                    c.exchange->Spans(node);
                                                           },
                                                           status.code(), status.message(), &newly);
        // Passed on once to the plan's other nodes: the sender may not reach
        // them all (cluster/model RANK0_ON_0: it failed a plan naming a
        // restarted node it still saw lost, and sends that node nothing).
        if (!m.failure.relayed) {
          for (Comm* c : newly) TellSpannedNodesLocked(*c, status, /*relayed=*/true, node);
        }
        // A relayed failure ends only what formed: members forming under the
        // key here may already be a later try of it; so may they after the
        // communicator of that tag ended here.
        const bool ended_here = ended_spanning_.count({m.failure.key, m.failure.comm_tag}) != 0;
        if (!formed && !m.failure.relayed && !ended_here) FailKeyLocked(m.failure.key, status, {}, 0, &after);
        break;
      }
    }
  }
  for (auto& f : after) f();
}

void Registry::OnNodeLost(uint32_t node, const std::string& why) {
  Deferred after;
  {
    MutexLock lock(&mu_);
    if (transport_ == nullptr) return;
    const std::string reason = "node " + std::to_string(node) + " lost: " + why;
    const std::string where = "node " + std::to_string(node) + ", where ranks ";
    AbortSpanningLocked([node](const Comm& c) { return c.exchange->Spans(node); }, StatusCode::kUnavailable, reason);
    // Keys whose ranks had joined there cannot form any more.
    std::vector<std::string> keys;
    for (const auto& [key, nodes] : announced_) {
      if (nodes.count(node)) keys.push_back(key);
    }
    for (const std::string& key : keys) {
      const std::string ranks = RankList(announced_[key][node].announce.ranks);
      FailKeyLocked(key, Status::Unavailable(where + ranks + " of '" + key + "' had joined, was lost: " + why), {}, 0,
                    &after);
    }
  }
  for (auto& f : after) f();
}

}  // namespace collectived::daemon
