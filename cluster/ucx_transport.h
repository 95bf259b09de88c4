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
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "base/mutex.h"
#include "base/thread_annotations.h"
#include "cluster/membership.h"
#include "collectived/status.h"

namespace collectived::cluster {

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
  // Connects to every other node of `membership` (which must outlive this)
  // and serves heartbeats until Stop().
  Status Start(Membership* membership, const Options& options);
  void Stop();

  // Heartbeats refused (bad size, magic, secret, node or epoch) so far.
  uint64_t refused() const { return refused_.load(); }

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
  void OnNodeUpdate(const void* header, size_t header_length, const void* data, size_t length);
  // The progress thread's: takes each queued rejoin (membership, endpoint;
  // node 0 also announces it).
  void ApplyRejoins() COLLECTIVED_EXCLUDES(rejoin_mu_);
  Status Connect(Peer* peer, const NodeInfo& info);
  static void OnEndpointError(void* arg, void* ep, int status);

  void* context_ = nullptr;  // ucp_context_h
  void* worker_ = nullptr;   // ucp_worker_h
  int event_fd_ = -1;
  std::string address_;
  Membership* membership_ = nullptr;
  Options options_;
  std::vector<std::unique_ptr<Peer>> peers_;  // by node id; the loop thread's after Start
  // Peers replaced by a rejoin, kept until their endpoints closed.
  std::vector<std::unique_ptr<Peer>> retired_;
  std::vector<void*> closing_;                 // ep close and announcement requests in flight
  struct Announcement;
  std::deque<Announcement> announcements_;     // header and record of each, alive until sent
  Mutex rejoin_mu_;
  std::vector<NodeInfo> rejoins_ COLLECTIVED_GUARDED_BY(rejoin_mu_);
  uint64_t seq_ = 0;
  int64_t start_ns_ = 0;
  std::atomic<uint64_t> refused_{0};
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

}  // namespace collectived::cluster

#endif  // COLLECTIVED_CLUSTER_UCX_TRANSPORT_H_
