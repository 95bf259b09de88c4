// The GPU half of ClientImpl::CreateCommunicator: the rank's device checked
// and made ready and a hardware queue leased before it joins, and after the join what its
// GPU communicator maps and the calls it makes to the daemon.
#include <memory>
#include <string>

#include "client/src/client_impl.h"
#include "client/src/gpu_communicator.h"
#include "client/src/gpu_queue_lease.h"
#include "proto/status_convert.h"

namespace collectived {

Status ClientImpl::PrepareGpuJoin(const CommunicatorOptions& options, v1::CreateCommunicatorRequest* req,
                                  std::shared_ptr<void>* queue_lease) {
  if (options.device >= 0) {
    std::string uuid;
    Status local = GpuDeviceUuid(options.device, &uuid);
    if (local.ok()) local = WarmGpuDevice(options.device);
    if (local.ok()) local = LeaseGpuRankQueue(options.device, options.key, queue_lease);
    if (!local.ok()) {
      // The peers would wait for their join timeout: tell the daemon, which
      // fails them with this reason now. A daemon before API 1.2 would take
      // the request for a join, so it is not told.
      if (daemon_api_minor_ >= 2) {
        req->set_cannot_join(local.ToString());
        v1::CreateCommunicatorResponse ignored;
        auto ctx = NewContext(options_.rpc_timeout_ms);
        stub_->CreateCommunicator(ctx.get(), *req, &ignored);
      }
      return local;
    }
    req->set_device_uuid(uuid);
    req->set_gpu_heap_bytes(options.gpu_heap_bytes);
  } else if (options.gpu_heap_bytes != 0) {
    return Status::InvalidArgument("gpu_heap_bytes needs a GPU communicator (set CommunicatorOptions.device)");
  }
  return Status::Ok();
}

GpuCommSetup ClientImpl::MakeGpuSetup(const CommunicatorOptions& options, uint32_t segment_rank,
                                      const v1::CreateCommunicatorResponse& resp,
                                      const ring::CommSegment& seg, std::shared_ptr<ipc::ShmWindow> window,
                                      std::shared_ptr<void> queue_lease) {
  GpuCommSetup setup;
  setup.device = options.device;
  setup.rank = segment_rank;
  setup.world = options.world_size;
  setup.seg = seg;
  setup.seg_keep = window;
  auto ref = [](const v1::GpuWindow& w) {
    return GpuWindowRef{w.window_id(), w.bytes(), w.device_uuid(), w.legacy_ipc_handle()};
  };
  setup.control = ref(resp.gpu_control());
  for (const auto& w : resp.gpu_ranks()) setup.ranks.push_back(ref(w));
  setup.slot_bytes = resp.gpu_slot_bytes();
  setup.heap_bytes = resp.gpu_heap_bytes();
  setup.daemon_executed = resp.mode() == v1::EXECUTION_MODE_DAEMON;
  setup.blocks = resp.gpu_blocks();
  setup.op_trace = options.gpu_op_trace;
  setup.queue_lease = std::move(queue_lease);
  setup.register_plan = [this, comm_id = resp.comm_id(), rank = segment_rank](CollectiveKind kind, DataType dtype,
                                                                             ReduceOp op, uint64_t count) {
    v1::OpRequest req;
    req.set_kind(static_cast<v1::CollectiveKind>(kind));
    req.set_dtype(static_cast<v1::DataType>(dtype));
    req.set_reduce_op(static_cast<v1::ReduceOp>(op));
    req.set_count(count);
    return RegisterPlan(comm_id, rank, req);
  };
  if (daemon_api_minor_ >= 3) {  // older daemons have no registration calls
    const int register_timeout_ms = options.join_timeout_ms + options_.rpc_timeout_ms;
    setup.register_buffer = [this, comm_id = resp.comm_id(), rank = segment_rank, register_timeout_ms](
                                int fd, uint64_t allocation_bytes, uint64_t offset, uint64_t bytes,
                                GpuRegistrationReply* out) -> Status {
      v1::RegisterGpuBufferRequest req;
      req.set_session_id(session_id_);
      req.set_comm_id(comm_id);
      req.set_rank(rank);
      uint64_t deposit = 0;
      COLLECTIVED_RETURN_IF_ERROR(DepositFd(fd, &deposit));
      req.set_deposit_id(deposit);
      req.set_allocation_bytes(allocation_bytes);
      req.set_offset(offset);
      req.set_bytes(bytes);
      v1::RegisterGpuBufferResponse resp;
      auto ctx = NewContext(register_timeout_ms);  // waits for every rank's registration
      COLLECTIVED_RETURN_IF_ERROR(FromGrpcStatus(stub_->RegisterGpuBuffer(ctx.get(), req, &resp)));
      out->buffer_id = resp.buffer_id();
      for (const auto& w : resp.allocations()) {
        out->allocations.push_back({w.window_id(), w.bytes(), w.device_uuid(), ""});
      }
      out->offsets.assign(resp.offsets().begin(), resp.offsets().end());
      return Status::Ok();
    };
    // A buffer may outlive its client: then the session, and the daemon's reference, are gone already.
    setup.deregister_buffer = [weak = weak_from_this(), comm_id = resp.comm_id(),
                               rank = segment_rank](uint64_t buffer_id) -> Status {
      auto self = weak.lock();
      if (!self) return Status::Ok();
      v1::DeregisterGpuBufferRequest req;
      req.set_session_id(self->session_id_);
      req.set_comm_id(comm_id);
      req.set_rank(rank);
      req.set_buffer_id(buffer_id);
      v1::DeregisterGpuBufferResponse resp;
      auto ctx = self->NewContext();
      return FromGrpcStatus(self->stub_->DeregisterGpuBuffer(ctx.get(), req, &resp));
    };
  }
  return setup;
}

}  // namespace collectived
