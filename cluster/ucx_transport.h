// The daemons' network: UCX UCP (docs/multinode.md). One worker per daemon,
// driven by one progress thread; an endpoint to every other node with peer
// error handling (a dead peer is reported in about a millisecond); active
// messages carry heartbeats, so a stopped or partitioned peer, which no
// transport reports, is found by its silence. Messages from other daemons
// are checked like client input: a wrong size, magic, cluster secret or
// epoch is dropped and counted, never trusted.
#ifndef COLLECTIVED_CLUSTER_UCX_TRANSPORT_H_
#define COLLECTIVED_CLUSTER_UCX_TRANSPORT_H_

#include <atomic>
#include <deque>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "base/mutex.h"
#include "base/thread_annotations.h"
#include "cluster/membership.h"
#include "collectived/status.h"
#include "ring/wait.h"

namespace collectived::cluster {

// One tagged send or receive between nodes (UcxTransport::PostSend/PostRecv).
struct Transfer {
  std::atomic<bool> done{false};
  int status = 0;        // ucs_status_t once done
  size_t length = 0;     // a receive: bytes that arrived
  size_t expected = 0;   // a receive: bytes it must be
  uint32_t node = 0;     // the peer
  bool receive = false;
  void* request = nullptr;  // UCX's, freed once done
};

class UcxTransport {
 public:
  struct Options {
    uint64_t secret = 0;  // shared by the daemons of one cluster; heartbeats without it are dropped
    int64_t heartbeat_interval_ns = 250'000'000;
    int64_t heartbeat_timeout_ns = 3'000'000'000;
  };

  // The context and worker, before the bootstrap (which carries address()).
  static Status Create(std::unique_ptr<UcxTransport>* out);
  ~UcxTransport();  // Stop()

  const std::string& address() const { return address_; }
  // Whether this UCX moves CUDA device memory itself (Debian's does not).
  // GPU communicators across nodes stage through pinned host memory either
  // way for now: the exchange reduces on the host.
  bool cuda_aware() const { return cuda_aware_; }
  // Connects to every other node of `membership` (which must outlive this)
  // and serves heartbeats until Stop().
  Status Start(Membership* membership, const Options& options);
  void Stop();

  // Heartbeats and control messages refused (bad size, magic, secret, node
  // or epoch) so far.
  uint64_t refused() const { return refused_.load(); }

  // Control messages between daemons (forming communicators across nodes):
  // small, checked like heartbeats, delivered in order per sender on the
  // progress thread. Set the handler before Start.
  using ControlHandler = std::function<void(uint32_t from_node, const std::string& payload)>;
  void SetControlHandler(ControlHandler handler) { control_handler_ = std::move(handler); }
  // Queues `payload` (at most kMaxControlBytes) for `node`; sent by the
  // progress thread. Never blocks on the network: callable under any lock.
  void SendControl(uint32_t node, std::string payload) COLLECTIVED_EXCLUDES(control_mu_);
  // Control messages queued by SendControl so far, per destination node.
  uint64_t control_queued(uint32_t node) const COLLECTIVED_EXCLUDES(control_mu_);
  static constexpr size_t kMaxControlBytes = 64 * 1024;

  // Data between nodes: tagged messages, posted and waited for by any thread
  // (the worker is thread-safe). The tag names (communicator, op, channel):
  // ops are matched by it, never by arrival order; a receive of another
  // length fails. `data` must stay valid until WaitAll returns.
  Status PostSend(uint32_t node, uint64_t tag, const void* data, size_t bytes, Transfer* out)
      COLLECTIVED_EXCLUDES(peer_mu_);
  Status PostRecv(uint32_t node, uint64_t tag, void* data, size_t bytes, Transfer* out);
  // Progresses the network until every transfer is done, ctx's segment
  // aborts, its stop is raised or its deadline passes. A transfer that
  // failed, or a receive of the wrong length, fails the wait naming the node.
  // On failure the transfers still in flight are cancelled; any UCX cannot
  // end at once is kept, with `keep` (what their buffers belong to), until it ends.
  Status WaitAll(std::vector<std::unique_ptr<Transfer>>* transfers, const ring::WaitContext& ctx,
                 std::shared_ptr<void> keep) COLLECTIVED_EXCLUDES(orphan_mu_);
  // Calls `progress` (reducing what arrived) whenever a transfer completes,
  // in the same loop; WaitAll with a callback.
  Status WaitAll(std::vector<std::unique_ptr<Transfer>>* transfers, const ring::WaitContext& ctx,
                 std::shared_ptr<void> keep, const std::function<Status(size_t done_index)>& on_done)
      COLLECTIVED_EXCLUDES(orphan_mu_);

  // A restarted daemon rejoined (told by the coordinator's RejoinService, on
  // node 0): this daemon takes it back and, on node 0, tells every other
  // node. Thread-safe: the progress thread applies it.
  void Rejoined(const NodeInfo& info) COLLECTIVED_EXCLUDES(rejoin_mu_);

 private:
  struct Peer;
  UcxTransport() = default;
  void Loop();
  void SendHeartbeats();
  void OnHeartbeat(const void* header, size_t length);
  void OnControl(const void* header, size_t header_length, const void* data, size_t length)
      COLLECTIVED_EXCLUDES(control_mu_);
  // The progress thread's: sends queued control messages, delivers arrived ones.
  void PumpControl() COLLECTIVED_EXCLUDES(control_mu_);
  // The progress thread's: closes by force the endpoint of every lost node,
  // so transfers to it end (a stopped peer never answers them).
  void CloseLostPeers() COLLECTIVED_EXCLUDES(peer_mu_);
  void FreeEndedOrphans() COLLECTIVED_EXCLUDES(orphan_mu_);
  void Wake();
  void OnNodeUpdate(const void* header, size_t header_length, const void* data, size_t length);
  // The progress thread's: takes each queued rejoin (membership, endpoint;
  // node 0 also announces it).
  void ApplyRejoins() COLLECTIVED_EXCLUDES(rejoin_mu_);
  Status Connect(Peer* peer, const NodeInfo& info);
  static void OnEndpointError(void* arg, void* ep, int status);
  // Registers `handler` (a member taking header and payload) for active
  // message `id`; a rendezvous one (control traffic is small) is refused.
  template <void (UcxTransport::*handler)(const void*, size_t, const void*, size_t)>
  Status HandleEager(unsigned id);

  void* context_ = nullptr;  // ucp_context_h
  void* worker_ = nullptr;   // ucp_worker_h
  int event_fd_ = -1;
  int wake_fd_ = -1;
  bool cuda_aware_ = false;  // an eventfd: wakes the progress thread for control messages
  std::string address_;
  Membership* membership_ = nullptr;
  Options options_;
  std::vector<std::unique_ptr<Peer>> peers_;  // by node id; the loop thread's after Start
  // Peers replaced by a rejoin, kept until their endpoints closed.
  std::vector<std::unique_ptr<Peer>> retired_;
  std::vector<void*> closing_;                 // ep close and announcement requests in flight
  struct Announcement;
  std::deque<Announcement> announcements_;     // header and record of each, alive until sent
  // Endpoints are read by threads posting data and replaced (rejoin) or
  // closed (lost) by the progress thread.
  Mutex peer_mu_;
  mutable Mutex control_mu_;
  struct ControlMessage;
  std::deque<ControlMessage> outbox_ COLLECTIVED_GUARDED_BY(control_mu_);
  std::map<uint32_t, uint64_t> control_queued_ COLLECTIVED_GUARDED_BY(control_mu_);
  std::deque<std::pair<uint32_t, std::string>> inbox_ COLLECTIVED_GUARDED_BY(control_mu_);
  std::deque<ControlMessage> sending_;  // the progress thread's: in flight
  ControlHandler control_handler_;
  // Transfers a failed wait could not end, with what their buffers belong to.
  Mutex orphan_mu_;
  std::vector<std::pair<std::unique_ptr<Transfer>, std::shared_ptr<void>>> orphans_ COLLECTIVED_GUARDED_BY(orphan_mu_);
  Mutex rejoin_mu_;
  std::vector<NodeInfo> rejoins_ COLLECTIVED_GUARDED_BY(rejoin_mu_);
  uint64_t seq_ = 0;
  int64_t start_ns_ = 0;
  std::atomic<uint64_t> refused_{0};
  std::atomic<bool> stop_{false};
  std::atomic<int> data_waiters_{0};  // threads inside WaitAll (they progress the worker)
  std::thread thread_;
};

}  // namespace collectived::cluster

#endif  // COLLECTIVED_CLUSTER_UCX_TRANSPORT_H_
