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
#include <cstdint>
#include <memory>
#include <string>
#include <thread>
#include <vector>

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

 private:
  struct Peer;
  UcxTransport() = default;
  void Loop();
  void SendHeartbeats();
  void OnHeartbeat(const void* header, size_t length);
  static void OnEndpointError(void* arg, void* ep, int status);

  void* context_ = nullptr;  // ucp_context_h
  void* worker_ = nullptr;   // ucp_worker_h
  int event_fd_ = -1;
  std::string address_;
  Membership* membership_ = nullptr;
  Options options_;
  std::vector<std::unique_ptr<Peer>> peers_;  // by node id; the loop thread's after Start
  uint64_t seq_ = 0;
  int64_t start_ns_ = 0;
  std::atomic<uint64_t> refused_{0};
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

}  // namespace collectived::cluster

#endif  // COLLECTIVED_CLUSTER_UCX_TRANSPORT_H_
