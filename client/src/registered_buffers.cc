#include "client/src/registered_buffers.h"

#include <unistd.h>

#include <string>

#include "client/src/gpu_op.h"

namespace collectived {

Status RegisterCallerBuffer(const GpuCommSetup& setup, const FetchFd& fetch,
                            const std::shared_ptr<RegisteredBuffers>& table, const std::shared_ptr<OpOrder>& order,
                            void* ptr, uint64_t bytes, GpuHeapBuffer* out) {
  const uint32_t world = setup.seg.world_size();
  ipc::CallerRangeExport ex;
  COLLECTIVED_RETURN_IF_ERROR(ipc::ExportCallerRange(ptr, bytes, &ex));
  GpuRegistrationReply reply;
  Status registered = setup.register_buffer(ex.fd, ex.allocation_bytes, ex.offset, bytes, &reply);
  close(ex.fd);  // the daemon holds its own copy now
  COLLECTIVED_RETURN_IF_ERROR(registered);
  // Map every peer's allocation here; ours is the caller's own mapping.
  RegisteredBuffers::Entry e;
  e.id = reply.buffer_id;
  e.bytes = bytes;
  Status mapped = [&]() -> Status {
    if (reply.allocations.size() != world || reply.offsets.size() != world) {
      return Status::Internal("daemon sent the wrong number of registered allocations");
    }
    if (e.id == 0 || e.id >= (uint64_t{1} << 56)) return Status::Internal("registered buffer id out of range");
    for (uint32_t k = 0; k < world; ++k) {
      if (k == setup.rank) {
        e.at.push_back(static_cast<uint8_t*>(ptr));
        continue;
      }
      int fd = -1;
      uint64_t got = 0;
      COLLECTIVED_RETURN_IF_ERROR(fetch(reply.allocations[k].window_id, &fd, &got));
      if (got < reply.allocations[k].bytes || reply.offsets[k] + bytes > reply.allocations[k].bytes) {
        close(fd);
        return Status::Internal("registered allocation of rank " + std::to_string(k) + " smaller than announced");
      }
      std::unique_ptr<ipc::CuMemWindow> w;
      COLLECTIVED_RETURN_IF_ERROR(ipc::CuMemWindow::Import(fd, setup.device, reply.allocations[k].bytes, &w));
      e.at.push_back(static_cast<uint8_t*>(w->device_ptr()) + reply.offsets[k]);
      e.peers.push_back(std::move(w));
    }
    return Status::Ok();
  }();
  if (!mapped.ok()) {
    setup.deregister_buffer(reply.buffer_id);
    return mapped;
  }
  const uint64_t id = e.id;
  {
    std::lock_guard<std::mutex> lock(table->mu);
    table->by_address[reinterpret_cast<uintptr_t>(ptr)] = std::move(e);
  }
  out->id = id;
  out->ptr = ptr;
  out->bytes = bytes;
  out->keep = std::move(ex.retained);
  const int64_t timeout_ms = static_cast<int64_t>(setup.seg.params().op_timeout_ns / 1000000) + 5000;
  // Like a heap buffer's Free: the rank's ops enqueued before it run first;
  // then the peers' mappings go, and the daemon's reference (unless the
  // communicator was destroyed, which dropped it).
  out->release = [table, key = reinterpret_cast<uintptr_t>(ptr), order, device = setup.device, timeout_ms, id,
                  deregister = setup.deregister_buffer] {
    COLLECTIVED_RETURN_IF_ERROR(WaitForEnqueued(order, device, timeout_ms,
                                                "a GPU op enqueued before this registered buffer's Free did not "
                                                "finish; it stays registered"));
    {
      std::lock_guard<std::mutex> lock(table->mu);
      table->by_address.erase(key);
    }
    bool destroyed = false;
    {
      std::lock_guard<std::mutex> lock(order->mu);
      destroyed = order->closed;
    }
    return destroyed ? Status::Ok() : deregister(id);
  };
  return Status::Ok();
}

}  // namespace collectived
