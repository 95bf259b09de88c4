#include "cluster/ucx_transport.h"

#include <poll.h>
#include <pthread.h>
#include <spdlog/spdlog.h>
#include <ucp/api/ucp.h>

#include <algorithm>
#include <cstring>

#include "cluster/node_record.h"
#include "ring/wait.h"

namespace collectived::cluster {
namespace {

constexpr unsigned kHeartbeatAm = 1;
constexpr unsigned kNodeUpdateAm = 2;  // node 0 tells the others a node rejoined
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

struct UcxTransport::Announcement {
  Heartbeat header;
  std::string record;
};

struct UcxTransport::Peer {
  UcxTransport* transport = nullptr;
  uint32_t node = 0;
  ucp_ep_h ep = nullptr;
  std::atomic<bool> failed{false};
  bool retired = false;  // replaced by a rejoin: its endpoint's errors mean nothing
  // The heartbeat in flight to this peer and its header, which must stay
  // valid until the send completes; a slow peer is not sent another before.
  void* request = nullptr;
  Heartbeat header{};
};

Status UcxTransport::Create(std::unique_ptr<UcxTransport>* out) {
  std::unique_ptr<UcxTransport> t(new UcxTransport());
  ucp_config_t* config = nullptr;
  ucs_status_t s = ucp_config_read(nullptr, nullptr, &config);
  if (s != UCS_OK) return UcxStatus(s, "ucp_config_read");
  ucp_params_t params{};
  params.field_mask = UCP_PARAM_FIELD_FEATURES;
  params.features = UCP_FEATURE_AM | UCP_FEATURE_WAKEUP;  // wake-up: the loop sleeps on the worker's fd
  ucp_context_h context = nullptr;
  s = ucp_init(&params, config, &context);
  ucp_config_release(config);
  if (s != UCS_OK) return UcxStatus(s, "ucp_init");
  t->context_ = context;
  ucp_worker_params_t wp{};
  wp.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE;
  wp.thread_mode = UCS_THREAD_MODE_SINGLE;  // only the progress thread touches it after Start
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
  hp.id = kNodeUpdateAm;
  hp.cb = [](void* arg, const void* header, size_t header_length, void* data, size_t length,
             const ucp_am_recv_param_t* param) -> ucs_status_t {
    auto* self = static_cast<UcxTransport*>(arg);
    if ((param->recv_attr & UCP_AM_RECV_ATTR_FLAG_RNDV) != 0) {  // a record is small: never rendezvous
      self->refused_.fetch_add(1);
      return UCS_OK;
    }
    self->OnNodeUpdate(header, header_length, data, length);
    return UCS_OK;
  };
  s = ucp_worker_set_am_recv_handler(worker, &hp);
  if (s != UCS_OK) return UcxStatus(s, "ucp_worker_set_am_recv_handler");
  *out = std::move(t);
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
  if (worker != nullptr) ucp_worker_destroy(worker);
  if (context_ != nullptr) ucp_cleanup(static_cast<ucp_context_h>(context_));
}

void UcxTransport::OnEndpointError(void* arg, void*, int status) {
  auto* peer = static_cast<Peer*>(arg);
  if (peer->retired || peer->failed.exchange(true)) return;
  peer->transport->membership_->MarkLost(
      peer->node, std::string("transport: ") + ucs_status_string(static_cast<ucs_status_t>(status)), ring::NowNs());
}

Status UcxTransport::Start(Membership* membership, const Options& options) {
  membership_ = membership;
  options_ = options;
  const std::vector<NodeStatus> nodes = membership->Nodes();
  auto worker = static_cast<ucp_worker_h>(worker_);
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
    retired_.push_back(std::move(slot));
    slot = std::move(fresh);
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
    while (ucp_worker_progress(worker) != 0) {
    }
    for (auto& p : peers_) {
      if (p->request != nullptr && ucp_request_check_status(p->request) != UCS_INPROGRESS) {
        ucp_request_free(p->request);
        p->request = nullptr;
      }
    }
    ApplyRejoins();
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
    // (at most 100 ms, so Stop() is noticed).
    if (ucp_worker_arm(worker) == UCS_ERR_BUSY) continue;
    const int wait_ms = static_cast<int>(std::min<int64_t>((next_heartbeat - now) / 1000000 + 1, 100));
    pollfd pfd{event_fd_, POLLIN, 0};
    poll(&pfd, 1, wait_ms);
  }
}

}  // namespace collectived::cluster
