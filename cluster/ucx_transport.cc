#include "cluster/ucx_transport.h"

#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <sys/eventfd.h>
#include <unistd.h>
#include <spdlog/spdlog.h>
#include <ucp/api/ucp.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <set>
#include <string>

#include "cluster/node_record.h"
#include "ring/wait.h"

namespace collectived::cluster {
namespace {

constexpr unsigned kHeartbeatAm = 1;
constexpr unsigned kNodeUpdateAm = 2;  // node 0 tells the others a node rejoined
constexpr unsigned kControlAm = 3;     // forming communicators across nodes
constexpr uint64_t kControlMagic = 0x314d434443ULL;  // "CDCM1"
constexpr uint64_t kHeartbeatMagic = 0x3142484443ULL;  // "CDHB1"
constexpr uint64_t kNodeUpdateMagic = 0x3155484443ULL;  // "CDHU1"

// The heartbeat, as its active message header (no payload).
struct Heartbeat {
  uint64_t magic;
  uint64_t secret;
  uint64_t epoch;
  uint64_t seq;
  uint32_t node;
  uint32_t reserved;
};

Status UcxStatus(ucs_status_t s, const char* what) {
  return Status::Unavailable(std::string(what) + ": " + ucs_status_string(s));
}

}  // namespace

struct UcxTransport::ControlMessage {
  uint32_t node = 0;
  Heartbeat header{};
  std::string payload;
  void* request = nullptr;
};

struct UcxTransport::Announcement {
  Heartbeat header;
  std::string record;
};

struct UcxTransport::Peer {
  UcxTransport* transport = nullptr;
  uint32_t node = 0;
  uint64_t epoch = 0;  // the incarnation its endpoint reaches
  ucp_ep_h ep = nullptr;
  std::atomic<bool> failed{false};
  std::atomic<bool> retired{false};  // replaced by a rejoin or closed as lost: its endpoint's errors mean nothing
  // The heartbeat in flight to this peer and its header, which must stay
  // valid until the send completes; a slow peer is not sent another before.
  void* request = nullptr;
  Heartbeat header{};
};

Status UcxTransport::Create(std::unique_ptr<UcxTransport>* out) {
  std::unique_ptr<UcxTransport> t(new UcxTransport());
  // UCX's tcp transport moves 8 KiB segments by default; 256 KiB ones moved
  // 64 MiB both ways 1.3-2x faster on the H200 machine's loopback (bench/RESULTS.md).
  // Only tcp reads these; a value the operator set wins. Before any thread starts.
  setenv("UCX_TCP_TX_SEG_SIZE", "256k", 0);
  setenv("UCX_TCP_RX_SEG_SIZE", "256k", 0);
  ucp_config_t* config = nullptr;
  ucs_status_t s = ucp_config_read(nullptr, nullptr, &config);
  if (s != UCS_OK) return UcxStatus(s, "ucp_config_read");
  ucp_params_t params{};
  params.field_mask = UCP_PARAM_FIELD_FEATURES;
  // Wake-up: the loop sleeps on the worker's fd. Tags: data between nodes.
  params.features = UCP_FEATURE_AM | UCP_FEATURE_TAG | UCP_FEATURE_WAKEUP;
  ucp_context_h context = nullptr;
  s = ucp_init(&params, config, &context);
  ucp_config_release(config);
  if (s != UCS_OK) return UcxStatus(s, "ucp_init");
  t->context_ = context;
  ucp_context_attr_t attr{};
  attr.field_mask = UCP_ATTR_FIELD_MEMORY_TYPES;
  if (ucp_context_query(context, &attr) == UCS_OK) {
    t->cuda_aware_ = (attr.memory_types & UCS_BIT(UCS_MEMORY_TYPE_CUDA)) != 0;
  }
  ucp_worker_params_t wp{};
  wp.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE;
  // Executors post and progress data on it too (UCX serializes them).
  wp.thread_mode = UCS_THREAD_MODE_MULTI;
  ucp_worker_h worker = nullptr;
  s = ucp_worker_create(context, &wp, &worker);
  if (s != UCS_OK) return UcxStatus(s, "ucp_worker_create");
  t->worker_ = worker;
  ucp_address_t* address = nullptr;
  size_t length = 0;
  s = ucp_worker_get_address(worker, &address, &length);
  if (s != UCS_OK) return UcxStatus(s, "ucp_worker_get_address");
  t->address_.assign(reinterpret_cast<const char*>(address), length);
  ucp_worker_release_address(worker, address);
  s = ucp_worker_get_efd(worker, &t->event_fd_);
  if (s != UCS_OK) return UcxStatus(s, "ucp_worker_get_efd");
  ucp_am_handler_param_t hp{};
  hp.field_mask = UCP_AM_HANDLER_PARAM_FIELD_ID | UCP_AM_HANDLER_PARAM_FIELD_CB | UCP_AM_HANDLER_PARAM_FIELD_ARG;
  hp.id = kHeartbeatAm;
  hp.arg = t.get();
  hp.cb = [](void* arg, const void* header, size_t header_length, void*, size_t length,
             const ucp_am_recv_param_t*) -> ucs_status_t {
    auto* self = static_cast<UcxTransport*>(arg);
    if (length != 0) {
      self->refused_.fetch_add(1);
      return UCS_OK;
    }
    self->OnHeartbeat(header, header_length);
    return UCS_OK;
  };
  s = ucp_worker_set_am_recv_handler(worker, &hp);
  if (s != UCS_OK) return UcxStatus(s, "ucp_worker_set_am_recv_handler");
  COLLECTIVED_RETURN_IF_ERROR(t->HandleEager<&UcxTransport::OnNodeUpdate>(kNodeUpdateAm));
  COLLECTIVED_RETURN_IF_ERROR(t->HandleEager<&UcxTransport::OnControl>(kControlAm));
  t->wake_fd_ = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (t->wake_fd_ < 0) return Status::Internal("eventfd failed");
  *out = std::move(t);
  return Status::Ok();
}

template <void (UcxTransport::*handler)(const void*, size_t, const void*, size_t)>
Status UcxTransport::HandleEager(unsigned id) {
  ucp_am_handler_param_t hp{};
  hp.field_mask = UCP_AM_HANDLER_PARAM_FIELD_ID | UCP_AM_HANDLER_PARAM_FIELD_CB | UCP_AM_HANDLER_PARAM_FIELD_ARG;
  hp.id = id;
  hp.arg = this;
  hp.cb = [](void* arg, const void* header, size_t header_length, void* data, size_t length,
             const ucp_am_recv_param_t* param) -> ucs_status_t {
    auto* self = static_cast<UcxTransport*>(arg);
    if ((param->recv_attr & UCP_AM_RECV_ATTR_FLAG_RNDV) != 0) {
      self->refused_.fetch_add(1);
      return UCS_OK;
    }
    (self->*handler)(header, header_length, data, length);
    return UCS_OK;
  };
  ucs_status_t s = ucp_worker_set_am_recv_handler(static_cast<ucp_worker_h>(worker_), &hp);
  if (s != UCS_OK) return UcxStatus(s, "ucp_worker_set_am_recv_handler");
  return Status::Ok();
}

UcxTransport::~UcxTransport() {
  Stop();
  auto worker = static_cast<ucp_worker_h>(worker_);
  for (auto& p : peers_) {
    if (p->ep == nullptr) continue;
    ucp_request_param_t rp{};
    rp.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
    rp.flags = UCP_EP_CLOSE_FLAG_FORCE;  // no goodbye handshake: a peer may be gone
    ucs_status_ptr_t r = ucp_ep_close_nbx(p->ep, &rp);
    for (int i = 0; UCS_PTR_IS_PTR(r) && i < 1000 && ucp_request_check_status(r) == UCS_INPROGRESS; ++i) {
      ucp_worker_progress(worker);
    }
    if (UCS_PTR_IS_PTR(r)) ucp_request_free(r);
  }
  for (auto& p : peers_) {
    if (p->request != nullptr) ucp_request_free(p->request);
  }
  for (void* r : closing_) ucp_request_free(r);
  for (auto& m : sending_) {
    if (m.request != nullptr) ucp_request_free(m.request);
  }
  {
    MutexLock lock(&orphan_mu_);
    for (auto& [t, keep] : orphans_) {
      if (t->request != nullptr) ucp_request_free(t->request);
    }
  }
  if (wake_fd_ >= 0) close(wake_fd_);
  if (worker != nullptr) ucp_worker_destroy(worker);
  if (context_ != nullptr) ucp_cleanup(static_cast<ucp_context_h>(context_));
}

void UcxTransport::OnEndpointError(void* arg, void*, int status) {
  auto* peer = static_cast<Peer*>(arg);
  if (peer->retired || peer->failed.exchange(true)) return;
  // Only that incarnation: a rejoin may have taken the node's new one while
  // this endpoint's error was on its way (before the peer was retired).
  peer->transport->membership_->MarkLost(
      peer->node, std::string("transport: ") + ucs_status_string(static_cast<ucs_status_t>(status)), ring::NowNs(),
      peer->epoch);
}

Status UcxTransport::Start(Membership* membership, const Options& options) {
  membership_ = membership;
  options_ = options;
  const std::vector<NodeStatus> nodes = membership->Nodes();
  for (const NodeStatus& n : nodes) {
    auto peer = std::make_unique<Peer>();
    peer->transport = this;
    peer->node = n.info.node_id;
    if (n.info.node_id != membership->self()) COLLECTIVED_RETURN_IF_ERROR(Connect(peer.get(), n.info));
    peers_.push_back(std::move(peer));
  }
  start_ns_ = ring::NowNs();
  thread_ = std::thread([this] { Loop(); });
  return Status::Ok();
}

Status UcxTransport::Connect(Peer* peer, const NodeInfo& info) {
  ucp_ep_params_t ep{};
  ep.field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS | UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE |
                  UCP_EP_PARAM_FIELD_ERR_HANDLER;
  ep.address = reinterpret_cast<const ucp_address_t*>(info.worker_address.data());
  ep.err_mode = UCP_ERR_HANDLING_MODE_PEER;
  ep.err_handler.cb = [](void* arg, ucp_ep_h e, ucs_status_t s) { OnEndpointError(arg, e, s); };
  ep.err_handler.arg = peer;
  peer->epoch = info.epoch;
  ucs_status_t s = ucp_ep_create(static_cast<ucp_worker_h>(worker_), &ep, &peer->ep);
  if (s != UCS_OK) return UcxStatus(s, ("endpoint to node " + std::to_string(info.node_id)).c_str());
  return Status::Ok();
}

void UcxTransport::Rejoined(const NodeInfo& info) {
  MutexLock lock(&rejoin_mu_);
  rejoins_.push_back(info);
}

void UcxTransport::OnNodeUpdate(const void* header, size_t header_length, const void* data, size_t length) {
  Heartbeat h{};
  NodeInfo info;
  if (header_length != sizeof(h) || length > kMaxNodeRecord) {
    refused_.fetch_add(1);
    return;
  }
  std::memcpy(&h, header, sizeof(h));
  // Only node 0 (the coordinator) announces rejoins.
  if (h.magic != kNodeUpdateMagic || h.secret != options_.secret || h.node != 0 || membership_->self() == 0 ||
      !DecodeNode(std::string(static_cast<const char*>(data), length), &info).ok() ||
      info.node_id >= peers_.size()) {
    refused_.fetch_add(1);
    return;
  }
  MutexLock lock(&rejoin_mu_);
  rejoins_.push_back(std::move(info));
}

void UcxTransport::ApplyRejoins() {
  std::vector<NodeInfo> rejoins;
  {
    MutexLock lock(&rejoin_mu_);
    rejoins.swap(rejoins_);
  }
  const uint32_t self = membership_->self();
  for (const NodeInfo& info : rejoins) {
    if (info.node_id >= peers_.size() || info.node_id == self || !membership_->Rejoin(info, ring::NowNs())) continue;
    // A new endpoint to the new incarnation; the old one is closed by force.
    std::unique_ptr<Peer>& slot = peers_[info.node_id];
    auto fresh = std::make_unique<Peer>();
    fresh->transport = this;
    fresh->node = info.node_id;
    Status c = Connect(fresh.get(), info);
    if (slot->ep != nullptr) {
      ucp_request_param_t rp{};
      rp.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
      rp.flags = UCP_EP_CLOSE_FLAG_FORCE;
      slot->retired = true;
      ucs_status_ptr_t r = ucp_ep_close_nbx(slot->ep, &rp);
      if (UCS_PTR_IS_PTR(r)) closing_.push_back(r);
      if (slot->request != nullptr) closing_.push_back(slot->request);
    }
    {
      MutexLock lock(&peer_mu_);
      retired_.push_back(std::move(slot));
      slot = std::move(fresh);
    }
    if (!c.ok()) {
      membership_->MarkLost(info.node_id, "rejoined, but " + c.message(), ring::NowNs());
      continue;
    }
    spdlog::info("cluster: node {} rejoined as epoch {} (pid {})", info.node_id, info.epoch, info.pid);
    if (self != 0) continue;
    // The coordinator tells every other node.
    announcements_.push_back(Announcement{Heartbeat{kNodeUpdateMagic, options_.secret, 0, 0, self, 0}, EncodeNode(info)});
    Announcement& a = announcements_.back();
    for (auto& p : peers_) {
      if (p->ep == nullptr || p->failed.load() || p->node == info.node_id || !membership_->Alive(p->node)) continue;
      ucp_request_param_t rp{};
      rp.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
      rp.flags = UCP_AM_SEND_FLAG_EAGER;
      ucs_status_ptr_t r =
          ucp_am_send_nbx(p->ep, kNodeUpdateAm, &a.header, sizeof(a.header), a.record.data(), a.record.size(), &rp);
      if (UCS_PTR_IS_PTR(r)) closing_.push_back(r);
    }
  }
}

void UcxTransport::Wake() {
  const uint64_t one = 1;
  if (write(wake_fd_, &one, sizeof(one)) < 0) {
    // Full (it never is: the loop drains it) or closed at exit: nothing to wake.
  }
}

uint64_t UcxTransport::control_queued(uint32_t node) const {
  MutexLock lock(&control_mu_);
  auto it = control_queued_.find(node);
  return it == control_queued_.end() ? 0 : it->second;
}

void UcxTransport::SendControl(uint32_t node, std::string payload) {
  {
    MutexLock lock(&control_mu_);
    ++control_queued_[node];
    ControlMessage m;
    m.node = node;
    m.payload = std::move(payload);
    outbox_.push_back(std::move(m));
  }
  Wake();
}

void UcxTransport::OnControl(const void* header, size_t header_length, const void* data, size_t length) {
  Heartbeat h{};
  if (header_length != sizeof(h) || length > kMaxControlBytes) {
    refused_.fetch_add(1);
    return;
  }
  std::memcpy(&h, header, sizeof(h));
  // A control message is also a sign of life: it must come from the node's current epoch.
  if (h.magic != kControlMagic || h.secret != options_.secret || h.node == membership_->self() ||
      !membership_->Heartbeat(h.node, h.epoch, ring::NowNs())) {
    refused_.fetch_add(1);
    return;
  }
  {
    MutexLock lock(&control_mu_);
    inbox_.emplace_back(h.node, std::string(static_cast<const char*>(data), length));
  }
  Wake();  // it may have arrived on an executor's progress call
}

void UcxTransport::PumpControl() {
  std::deque<ControlMessage> out;
  std::deque<std::pair<uint32_t, std::string>> in;
  {
    MutexLock lock(&control_mu_);
    out.swap(outbox_);
    in.swap(inbox_);
  }
  const std::vector<NodeStatus> nodes = membership_->Nodes();
  const uint32_t self = membership_->self();
  for (ControlMessage& m : out) {
    if (m.node >= peers_.size() || m.node == self || nodes[m.node].state != NodeState::kAlive ||
        peers_[m.node]->ep == nullptr || m.payload.size() > kMaxControlBytes) {
      continue;  // a lost node learns nothing more; its communicators fail on their own
    }
    sending_.push_back(std::move(m));
    ControlMessage& s = sending_.back();
    s.header = Heartbeat{kControlMagic, options_.secret, nodes[self].info.epoch, ++seq_, self, 0};
    ucp_request_param_t rp{};
    rp.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
    rp.flags = UCP_AM_SEND_FLAG_EAGER;
    ucs_status_ptr_t r = ucp_am_send_nbx(peers_[s.node]->ep, kControlAm, &s.header, sizeof(s.header),
                                         s.payload.data(), s.payload.size(), &rp);
    if (UCS_PTR_IS_PTR(r)) {
      s.request = r;
    } else {
      sending_.pop_back();  // sent already, or failed (the endpoint's error handler reports the node)
    }
  }
  while (!sending_.empty() && (sending_.front().request == nullptr ||
                               ucp_request_check_status(sending_.front().request) != UCS_INPROGRESS)) {
    if (sending_.front().request != nullptr) ucp_request_free(sending_.front().request);
    sending_.pop_front();
  }
  for (auto& [node, payload] : in) {
    if (control_handler_) control_handler_(node, payload);
  }
}

void UcxTransport::CloseLostPeers() {
  for (auto& p : peers_) {
    if (p->ep == nullptr || membership_->Alive(p->node)) continue;
    ucp_ep_h ep = nullptr;
    {
      MutexLock lock(&peer_mu_);
      ep = p->ep;
      p->ep = nullptr;
      p->retired = true;  // its endpoint's errors from now on mean nothing
    }
    ucp_request_param_t rp{};
    rp.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
    rp.flags = UCP_EP_CLOSE_FLAG_FORCE;
    ucs_status_ptr_t r = ucp_ep_close_nbx(ep, &rp);
    if (UCS_PTR_IS_PTR(r)) closing_.push_back(r);
    if (p->request != nullptr) {
      closing_.push_back(p->request);
      p->request = nullptr;
    }
  }
}

namespace {

void OnSendDone(void*, ucs_status_t status, void* user) {
  auto* t = static_cast<Transfer*>(user);
  t->status = status;
  t->done.store(true, std::memory_order_release);
}

void OnRecvDone(void*, ucs_status_t status, const ucp_tag_recv_info_t* info, void* user) {
  auto* t = static_cast<Transfer*>(user);
  t->status = status;
  t->length = status == UCS_OK && info != nullptr ? info->length : 0;
  t->done.store(true, std::memory_order_release);
}

}  // namespace

Status UcxTransport::PostSend(uint32_t node, uint64_t tag, const void* data, size_t bytes, Transfer* out) {
  out->node = node;
  out->receive = false;
  ucp_request_param_t rp{};
  rp.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA | UCP_OP_ATTR_FLAG_NO_IMM_CMPL;
  rp.cb.send = OnSendDone;
  rp.user_data = out;
  MutexLock lock(&peer_mu_);  // the progress thread replaces and closes endpoints
  if (node >= peers_.size() || peers_[node]->ep == nullptr || peers_[node]->failed.load()) {
    return Status::Unavailable("node " + std::to_string(node) + " is not reachable (lost)");
  }
  ucs_status_ptr_t r = ucp_tag_send_nbx(peers_[node]->ep, data, bytes, tag, &rp);
  if (UCS_PTR_IS_ERR(r)) return UcxStatus(UCS_PTR_STATUS(r), ("send to node " + std::to_string(node)).c_str());
  out->request = UCS_PTR_IS_PTR(r) ? r : nullptr;
  if (out->request == nullptr) out->done.store(true);
  return Status::Ok();
}

Status UcxTransport::PostRecv(uint32_t node, uint64_t tag, void* data, size_t bytes, Transfer* out) {
  out->node = node;
  out->receive = true;
  out->expected = bytes;
  ucp_request_param_t rp{};
  rp.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA | UCP_OP_ATTR_FLAG_NO_IMM_CMPL;
  rp.cb.recv = OnRecvDone;
  rp.user_data = out;
  ucs_status_ptr_t r =
      ucp_tag_recv_nbx(static_cast<ucp_worker_h>(worker_), data, bytes, tag, ~ucp_tag_t{0}, &rp);
  if (UCS_PTR_IS_ERR(r)) return UcxStatus(UCS_PTR_STATUS(r), ("receive from node " + std::to_string(node)).c_str());
  out->request = UCS_PTR_IS_PTR(r) ? r : nullptr;
  if (out->request == nullptr) {
    out->length = bytes;
    out->done.store(true);
  }
  return Status::Ok();
}

Status UcxTransport::WaitAll(std::vector<std::unique_ptr<Transfer>>* transfers, const ring::WaitContext& ctx,
                             std::shared_ptr<void> keep) {
  return WaitAll(transfers, ctx, std::move(keep), nullptr);
}

Status UcxTransport::WaitAll(std::vector<std::unique_ptr<Transfer>>* transfers, const ring::WaitContext& ctx,
                             std::shared_ptr<void> keep, const std::function<Status(size_t)>& on_done) {
  auto worker = static_cast<ucp_worker_h>(worker_);
  data_waiters_.fetch_add(1, std::memory_order_acq_rel);
  struct Leave {
    std::atomic<int>* n;
    ~Leave() { n->fetch_sub(1, std::memory_order_acq_rel); }
  } leave{&data_waiters_};
  std::vector<bool> seen(transfers->size(), false);
  size_t left = transfers->size();
  Status failed;
  int idle = 0;
  while (left > 0 && failed.ok()) {
    if (ucp_worker_progress(worker) != 0) idle = 0;
    for (size_t i = 0; i < transfers->size() && failed.ok(); ++i) {
      Transfer& t = *(*transfers)[i];
      if (seen[i] || !t.done.load(std::memory_order_acquire)) continue;
      seen[i] = true;
      --left;
      idle = 0;
      const std::string peer = "node " + std::to_string(t.node);
      if (t.status != UCS_OK) {
        failed = Status::Unavailable((t.receive ? "receiving from " : "sending to ") + peer + ": " +
                                     ucs_status_string(static_cast<ucs_status_t>(t.status)));
      } else if (t.receive && t.length != t.expected) {
        failed = Status::Internal(peer + " sent " + std::to_string(t.length) + " bytes where " +
                                  std::to_string(t.expected) + " were expected (its op differs)");
      } else if (on_done) {
        failed = on_done(i);
      }
    }
    if (left == 0 || !failed.ok()) break;
    if (ctx.segment != nullptr && ctx.segment->aborted()) {
      failed = ctx.segment->AbortStatus();
    } else if (ctx.stop != nullptr && ctx.stop->load(std::memory_order_acquire)) {
      failed = Status::Aborted("stopped while waiting for another node");
    } else if (ctx.deadline_ns != 0 && ring::NowNs() >= ctx.deadline_ns) {
      std::set<uint32_t> nodes;  // each once, however many of its transfers are left
      for (size_t i = 0; i < transfers->size(); ++i) {
        if (!seen[i]) nodes.insert((*transfers)[i]->node);
      }
      std::string waiting;
      for (uint32_t node : nodes) waiting += (waiting.empty() ? "" : ", ") + std::to_string(node);
      failed = Status::DeadlineExceeded("deadline passed waiting for node(s) " + waiting);
    } else if (++idle > 64 && ucp_worker_arm(worker) == UCS_OK) {
      // Nothing moved: sleep until the network has something (the kernel
      // moving the bytes needs the cores more than a spinning waiter does),
      // at most 1 ms, to check the abort word, stop and deadline again.
      pollfd pfd{event_fd_, POLLIN, 0};
      poll(&pfd, 1, 1);
    }
  }
  if (failed.ok()) {
    for (auto& t : *transfers) {
      if (t->request != nullptr) ucp_request_free(t->request);
      t->request = nullptr;
    }
    return Status::Ok();
  }
  // Cancel what is left; what does not end soon is kept with its buffers.
  for (auto& t : *transfers) {
    if (!t->done.load(std::memory_order_acquire) && t->request != nullptr) ucp_request_cancel(worker, t->request);
  }
  const int64_t until = ring::NowNs() + 50'000'000;
  for (;;) {
    bool all = true;
    for (auto& t : *transfers) all = all && t->done.load(std::memory_order_acquire);
    if (all || ring::NowNs() >= until) break;
    ucp_worker_progress(worker);
  }
  MutexLock lock(&orphan_mu_);
  for (auto& t : *transfers) {
    if (t->done.load(std::memory_order_acquire)) {
      if (t->request != nullptr) ucp_request_free(t->request);
      t->request = nullptr;
    } else {
      orphans_.emplace_back(std::move(t), keep);
    }
  }
  transfers->clear();
  return failed;
}

void UcxTransport::FreeEndedOrphans() {
  MutexLock lock(&orphan_mu_);
  orphans_.erase(std::remove_if(orphans_.begin(), orphans_.end(),
                                [](auto& o) {
                                  if (!o.first->done.load(std::memory_order_acquire)) return false;
                                  if (o.first->request != nullptr) ucp_request_free(o.first->request);
                                  return true;
                                }),
                 orphans_.end());
}

void UcxTransport::Stop() {
  if (stop_.exchange(true)) return;
  if (thread_.joinable()) thread_.join();
}

void UcxTransport::OnHeartbeat(const void* header, size_t length) {
  Heartbeat h{};
  if (length != sizeof(h)) {
    refused_.fetch_add(1);
    return;
  }
  std::memcpy(&h, header, sizeof(h));  // the header may be unaligned
  if (h.magic != kHeartbeatMagic || h.secret != options_.secret ||
      !membership_->Heartbeat(h.node, h.epoch, ring::NowNs())) {
    refused_.fetch_add(1);
  }
}

void UcxTransport::SendHeartbeats() {
  const std::vector<NodeStatus> nodes = membership_->Nodes();
  const uint32_t self = membership_->self();
  ++seq_;
  for (auto& p : peers_) {
    if (p->ep == nullptr || p->failed.load() || nodes[p->node].state != NodeState::kAlive) continue;
    if (p->request != nullptr) continue;  // the last one is still on its way
    p->header = Heartbeat{kHeartbeatMagic, options_.secret, nodes[self].info.epoch, seq_, self, 0};
    ucp_request_param_t rp{};
    rp.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
    rp.flags = UCP_AM_SEND_FLAG_EAGER;
    ucs_status_ptr_t r = ucp_am_send_nbx(p->ep, kHeartbeatAm, &p->header, sizeof(p->header), nullptr, 0, &rp);
    if (UCS_PTR_IS_PTR(r)) {
      p->request = r;
    } else if (UCS_PTR_STATUS(r) != UCS_OK && !p->failed.exchange(true)) {
      membership_->MarkLost(p->node, std::string("transport: ") + ucs_status_string(UCS_PTR_STATUS(r)),
                            ring::NowNs());
    }
  }
}

void UcxTransport::Loop() {
  pthread_setname_np(pthread_self(), "cd-cluster");
  auto worker = static_cast<ucp_worker_h>(worker_);
  int64_t next_heartbeat = ring::NowNs();
  while (!stop_.load()) {
    // While an executor waits on transfers it progresses the worker itself:
    // this thread then keeps off it (two threads progressing one worker
    // contend for its lock, and on few cores that halved the bandwidth).
    const bool executor_progressing = data_waiters_.load(std::memory_order_acquire) > 0;
    while (!executor_progressing && ucp_worker_progress(worker) != 0) {
    }
    for (auto& p : peers_) {
      if (p->request != nullptr && ucp_request_check_status(p->request) != UCS_INPROGRESS) {
        ucp_request_free(p->request);
        p->request = nullptr;
      }
    }
    ApplyRejoins();
    CloseLostPeers();
    PumpControl();
    FreeEndedOrphans();
    closing_.erase(std::remove_if(closing_.begin(), closing_.end(),
                                  [](void* r) {
                                    if (ucp_request_check_status(r) == UCS_INPROGRESS) return false;
                                    ucp_request_free(r);
                                    return true;
                                  }),
                   closing_.end());
    if (closing_.empty()) {
      retired_.clear();
      announcements_.clear();
    }
    const int64_t now = ring::NowNs();
    if (now >= next_heartbeat) {
      SendHeartbeats();
      next_heartbeat = now + options_.heartbeat_interval_ns;
      continue;  // progress what was just sent
    }
    membership_->ExpireSilent(now, start_ns_, options_.heartbeat_timeout_ns);
    // Sleep until the next heartbeat is due or the network has something
    // (at most 100 ms, so Stop() is noticed; 10 ms while an executor
    // progresses, to take over soon after it is done).
    if (!executor_progressing && ucp_worker_arm(worker) == UCS_ERR_BUSY) continue;
    const int wait_ms = static_cast<int>(
        std::min<int64_t>((next_heartbeat - now) / 1000000 + 1, executor_progressing ? 10 : 100));
    pollfd pfd[2] = {{wake_fd_, POLLIN, 0}, {event_fd_, POLLIN, 0}};
    poll(pfd, executor_progressing ? 1 : 2, wait_ms);
    if (pfd[0].revents & POLLIN) {
      uint64_t n = 0;
      if (read(wake_fd_, &n, sizeof(n)) < 0) {
        // EAGAIN: another read took it
      }
    }
  }
}

}  // namespace collectived::cluster
