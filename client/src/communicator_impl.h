// Private: one rank's view of a communicator in a client process.
#ifndef COLLECTIVED_CLIENT_SRC_COMMUNICATOR_IMPL_H_
#define COLLECTIVED_CLIENT_SRC_COMMUNICATOR_IMPL_H_

#include <atomic>
#include <memory>
#include <mutex>

#include "client/src/client_impl.h"
#include "client/src/gpu_communicator.h"
#include "executor/host_executor.h"
#include "ring/segment_layout.h"

namespace collectived {

struct HandleState {
  std::shared_ptr<ipc::ShmWindow> window;  // keeps the segment mapped
  ring::CommSegment seg;
  uint32_t rank = 0;
  uint64_t index = 0;
  int64_t default_timeout_ms = 0;
  std::mutex mu;
  bool known = false;  // `status` is final
  Status status;
  std::shared_ptr<GpuOpState> gpu;  // GPU ops: their event and verdict
  // Client-executed host ops: the rank's executor, so that a waiting thread
  // runs its op itself (RankExecutor::RunPosted).
  std::weak_ptr<host::RankExecutor> executor;
  // The communicator's record that an op of this rank failed (AsyncError).
  std::shared_ptr<std::atomic<bool>> op_failed;
};

class CommunicatorImpl : public host::BufferResolver {
 public:
  // `rank` and `world`: the caller's, over every node; `segment_rank`: its
  // index in `seg` (which, for a communicator across nodes, holds this
  // node's ranks only).
  CommunicatorImpl(std::shared_ptr<ClientImpl> client, uint64_t comm_id, uint32_t rank, uint32_t world,
                   uint32_t segment_rank, ring::CommSegment seg, std::shared_ptr<ipc::ShmWindow> window,
                   ExecutionMode mode);
  ~CommunicatorImpl() override;

  void Start();  // the rank's executor, in client-executed mode
  Status Post(CollectiveKind kind, BufferSpan send, BufferSpan recv, uint64_t count, DataType dtype, ReduceOp op,
              bool via_rpc, Handle* handle);
  Status Destroy();
  Status Abort(const std::string& reason);
  Status AsyncError() const;
  // Whether `s`, a post's or a submit's, failed on the communicator's abort
  // (not on bad input).
  bool FailedOnAbort(const Status& s) const;
  void SetGpu(std::unique_ptr<GpuCommunicator> gpu) { gpu_ = std::move(gpu); }
  GpuCommunicator* gpu() const { return gpu_.get(); }
  bool destroyed() const { return destroyed_.load(std::memory_order_acquire); }
  // Wraps a GPU op's state in a handle.
  void MakeGpuHandle(std::shared_ptr<GpuOpState> op, Handle* handle) const;

  Status Resolve(uint32_t rank, uint64_t buffer_id, uint64_t offset, uint64_t bytes, void** ptr) override;

  uint32_t rank() const { return global_rank_; }
  uint32_t world_size() const { return world_; }
  uint64_t id() const { return comm_id_; }
  ExecutionMode mode() const { return mode_; }
  uint64_t max_message_bytes() const { return seg_.params().max_message_bytes; }
  const ring::CommSegment& segment() const { return seg_; }

 private:
  int64_t OpTimeoutMs() const { return static_cast<int64_t>(seg_.params().op_timeout_ns / 1000000); }

  std::shared_ptr<ClientImpl> client_;
  uint64_t comm_id_;
  uint32_t global_rank_;
  uint32_t world_;
  uint32_t rank_;  // in the segment: every call to the daemon and the rings names this
  ring::CommSegment seg_;
  std::shared_ptr<ipc::ShmWindow> window_;
  ExecutionMode mode_;
  std::shared_ptr<host::RankExecutor> executor_;
  // Set by a wait that finds an op of this rank failed (AsyncError).
  std::shared_ptr<std::atomic<bool>> op_failed_ = std::make_shared<std::atomic<bool>>(false);
  std::unique_ptr<GpuCommunicator> gpu_;
  std::atomic<bool> destroyed_{false};
  std::mutex destroy_mu_;  // Destroy and Abort, from any thread
  // Destroy could not see this rank's GPU work finish: its mappings are never
  // undone, so that work cannot fault on an unmapped page.
  bool leak_gpu_ = false;
  Status destroy_status_;
};

}  // namespace collectived

#endif  // COLLECTIVED_CLIENT_SRC_COMMUNICATOR_IMPL_H_
