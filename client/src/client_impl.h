// Private: the client library's connection to one daemon.
#ifndef COLLECTIVED_CLIENT_SRC_CLIENT_IMPL_H_
#define COLLECTIVED_CLIENT_SRC_CLIENT_IMPL_H_

#include <grpcpp/grpcpp.h>

#include <functional>
#include <memory>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "collectived/client.h"
#include "collectived/v1/collectived.grpc.pb.h"
#include "ipc/shm_window.h"
#include "executor/host_executor.h"
#include "ring/segment_layout.h"

namespace collectived {

struct GpuCommSetup;  // client/src/gpu_communicator.h

struct BufferState {
  std::weak_ptr<ClientImpl> client;
  uint64_t id = 0;
  std::shared_ptr<ipc::ShmWindow> window;  // host buffers
  uint64_t offset = 0;  // of the buffer inside its window
  // GPU communicators' heap buffers: the device pointer, what keeps it
  // mapped, and what gives its range back.
  void* device_ptr = nullptr;
  std::shared_ptr<void> device_keep;
  std::function<Status()> release;
  uint64_t bytes = 0;
  bool freed = false;
};

class ClientImpl : public std::enable_shared_from_this<ClientImpl> {
 public:
  explicit ClientImpl(ClientOptions options) : options_(std::move(options)) {}
  ~ClientImpl();

  Status Connect();
  Status GetVersion(VersionInfo* out);
  Status AllocBuffer(uint64_t bytes, Buffer* out);
  Status FreeBuffer(BufferState* state);
  Status CreateCommunicator(const CommunicatorOptions& options, std::unique_ptr<Communicator>* out);
  Status DestroyCommunicator(uint64_t comm_id, uint32_t rank);
  Status Submit(uint64_t comm_id, uint32_t rank, const v1::OpRequest& op, uint64_t* index);
  Status RegisterPlan(uint64_t comm_id, uint32_t rank, const v1::OpRequest& op);
  // Sends `fd` (not taken) over the fd socket; *deposit_id names it for a registration.
  Status DepositFd(int fd, uint64_t* deposit_id);

  // Pointer to [offset, offset + bytes) of one of this client's buffers.
  Status ResolveOwn(uint64_t buffer_id, uint64_t offset, uint64_t bytes, void** ptr);
  // The buffer behind a span, if it belongs to this client.
  Status CheckSpan(const BufferSpan& span, uint64_t bytes, const char* what, uint64_t* buffer_id) const;

  uint64_t session_id() const { return session_id_; }
  uint64_t session_token() const { return session_token_; }
  const ClientOptions& options() const { return options_; }

 private:
  std::unique_ptr<grpc::ClientContext> NewContext(int timeout_ms = -1) const;
  Status FetchWindow(uint64_t window_id, uint64_t bytes, std::shared_ptr<ipc::ShmWindow>* out);
  // The fd of a window (the caller owns it) and the window's size.
  Status FetchFd(uint64_t window_id, int* fd, uint64_t* bytes);
  // CreateCommunicator's GPU half (gpu_setup.cc). Before the join: a GPU
  // rank's device UUID into `req`, and a hardware queue reserved for it; a
  // rank refused here is announced to the daemon, which fails its peers now.
  // Without a device, refuses gpu_heap_bytes.
  Status PrepareGpuJoin(const CommunicatorOptions& options, v1::CreateCommunicatorRequest* req,
                        std::shared_ptr<void>* queue_lease);
  // After the join: what the rank's GPU communicator maps, and its calls to the daemon.
  // `segment_rank`: the member's index in `seg` (CreateCommunicatorResponse.segment_rank).
  GpuCommSetup MakeGpuSetup(const CommunicatorOptions& options, uint32_t segment_rank,
                            const v1::CreateCommunicatorResponse& resp,
                            const ring::CommSegment& seg, std::shared_ptr<ipc::ShmWindow> window,
                            std::shared_ptr<void> queue_lease);

  ClientOptions options_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<v1::CollectiveService::Stub> stub_;
  uint64_t session_id_ = 0;
  uint64_t session_token_ = 0;  // sent with every call (kSessionTokenMetadata)
  uint32_t daemon_api_minor_ = 0;  // from Connect: which requests the daemon understands
  // UNAVAILABLE once the daemon hung up the session's fd socket (it stopped
  // or restarted): checked before every call to the daemon.
  Status Lease() const;
  int fd_sock_ = -1;
  std::mutex fd_mu_;
  mutable std::mutex buffers_mu_;
  std::unordered_map<uint64_t, std::shared_ptr<BufferState>> buffers_;
};

}  // namespace collectived

#endif  // COLLECTIVED_CLIENT_SRC_CLIENT_IMPL_H_
