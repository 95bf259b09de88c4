// collectived.v1.CollectiveService on gRPC's callback API. Handlers translate
// to Registry calls; those that wait (CreateCommunicator, RegisterGpuBuffer, WaitOp) finish
// their reactors later instead of blocking a gRPC thread.
#ifndef COLLECTIVED_DAEMON_SERVICE_H_
#define COLLECTIVED_DAEMON_SERVICE_H_

#include <condition_variable>
#include <functional>
#include <list>
#include <mutex>
#include <string>
#include <thread>

#include "collectived/v1/collectived.grpc.pb.h"
#include "cluster/membership.h"
#include "cluster/ucx_transport.h"
#include "daemon/registry.h"

namespace collectived::daemon {

class CollectiveServiceImpl final : public v1::CollectiveService::CallbackService {
 public:
  // `who`: the credentials of the connection a call came on, by the call's
  // peer() (GrpcAcceptor::Lookup); false when unknown (the call is refused).
  using PeerLookup = std::function<bool(const std::string& peer, ipc::PeerCredentials* out)>;
  CollectiveServiceImpl(Registry* registry, std::string fd_socket_path, PeerLookup who,
                        std::function<void()> on_drain);
  ~CollectiveServiceImpl() override;

  grpc::ServerUnaryReactor* GetVersion(grpc::CallbackServerContext* ctx, const v1::GetVersionRequest* req,
                                       v1::GetVersionResponse* resp) override;
  grpc::ServerUnaryReactor* Attach(grpc::CallbackServerContext* ctx, const v1::AttachRequest* req,
                                   v1::AttachResponse* resp) override;
  grpc::ServerUnaryReactor* Detach(grpc::CallbackServerContext* ctx, const v1::DetachRequest* req,
                                   v1::DetachResponse* resp) override;
  grpc::ServerUnaryReactor* AllocBuffer(grpc::CallbackServerContext* ctx, const v1::AllocBufferRequest* req,
                                        v1::AllocBufferResponse* resp) override;
  grpc::ServerUnaryReactor* FreeBuffer(grpc::CallbackServerContext* ctx, const v1::FreeBufferRequest* req,
                                       v1::FreeBufferResponse* resp) override;
  grpc::ServerUnaryReactor* CreateCommunicator(grpc::CallbackServerContext* ctx,
                                               const v1::CreateCommunicatorRequest* req,
                                               v1::CreateCommunicatorResponse* resp) override;
  grpc::ServerUnaryReactor* DestroyCommunicator(grpc::CallbackServerContext* ctx,
                                                const v1::DestroyCommunicatorRequest* req,
                                                v1::DestroyCommunicatorResponse* resp) override;
  grpc::ServerUnaryReactor* RegisterPlan(grpc::CallbackServerContext* ctx, const v1::RegisterPlanRequest* req,
                                         v1::RegisterPlanResponse* resp) override;
  grpc::ServerUnaryReactor* Submit(grpc::CallbackServerContext* ctx, const v1::SubmitRequest* req,
                                   v1::SubmitResponse* resp) override;
  grpc::ServerUnaryReactor* WaitOp(grpc::CallbackServerContext* ctx, const v1::WaitOpRequest* req,
                                   v1::WaitOpResponse* resp) override;
  grpc::ServerUnaryReactor* RegisterGpuBuffer(grpc::CallbackServerContext* ctx,
                                              const v1::RegisterGpuBufferRequest* req,
                                              v1::RegisterGpuBufferResponse* resp) override;
  grpc::ServerUnaryReactor* DeregisterGpuBuffer(grpc::CallbackServerContext* ctx,
                                                const v1::DeregisterGpuBufferRequest* req,
                                                v1::DeregisterGpuBufferResponse* resp) override;
  grpc::ServerUnaryReactor* GetStats(grpc::CallbackServerContext* ctx, const v1::GetStatsRequest* req,
                                     v1::GetStatsResponse* resp) override;
  grpc::ServerUnaryReactor* Drain(grpc::CallbackServerContext* ctx, const v1::DrainRequest* req,
                                  v1::DrainResponse* resp) override;
  grpc::ServerUnaryReactor* GetCluster(grpc::CallbackServerContext* ctx, const v1::GetClusterRequest* req,
                                       v1::GetClusterResponse* resp) override;

  // The cluster this daemon is part of (before the server starts; both
  // outlive the service). Without it GetCluster answers this daemon alone.
  void SetCluster(const char* mode, const cluster::Membership* membership, const cluster::UcxTransport* transport) {
    cluster_mode_ = mode;
    membership_ = membership;
    transport_ = transport;
  }

 private:
  struct PendingWait {
    int64_t started_ns;
    int64_t deadline_ns;
    uint64_t session_id, comm_id, index;
    uint32_t rank;
    grpc::ServerUnaryReactor* reactor;
    v1::WaitOpResponse* resp;
  };
  // The caller's credentials; PERMISSION_DENIED when its connection is unknown.
  Status Caller(grpc::CallbackServerContext* ctx, ipc::PeerCredentials* out) const;
  // May this call act for `session_id`: its uid and token (Registry::Authorize).
  Status Authorize(grpc::CallbackServerContext* ctx, uint64_t session_id) const;
  void WaiterLoop();
  // True when the op's state is final (done, or an error to report).
  bool PollWait(const PendingWait& w, bool expired);

  Registry* registry_;
  std::string fd_socket_path_;
  PeerLookup who_;
  const char* cluster_mode_ = "none";
  const cluster::Membership* membership_ = nullptr;
  const cluster::UcxTransport* transport_ = nullptr;
  std::function<void()> on_drain_;
  std::mutex wait_mu_;
  std::condition_variable wait_cv_;
  std::list<PendingWait> waits_;
  bool stop_ = false;
  std::thread waiter_;
};

}  // namespace collectived::daemon

#endif  // COLLECTIVED_DAEMON_SERVICE_H_
