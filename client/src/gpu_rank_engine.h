// Private: one rank's GPU engine in a client process. It holds the
// communicator's device memory mapped here (the control window, and every
// rank's window: staging slot, then heap), knows where a buffer lies (the
// symmetric heap, a registered buffer, or neither: staged), fills the
// kernels' common arguments, and runs every op through one pipeline
// (Enqueue). GpuCommunicator owns it; DaemonPoster uses it for
// daemon-executed ops.
#ifndef COLLECTIVED_CLIENT_SRC_GPU_RANK_ENGINE_H_
#define COLLECTIVED_CLIENT_SRC_GPU_RANK_ENGINE_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "base/gpu/gpu_runtime.h"
#include "client/src/gpu_communicator.h"
#include "client/src/gpu_op.h"
#include "client/src/registered_buffers.h"
#include "client/src/symmetric_heap.h"
#include "ipc/gpu_window.h"
#include "kernels/device/device_collectives.h"

namespace collectived {

class GpuRankEngine {
 public:
  // Maps the windows `setup` names on setup.device (cuMem fds fetched with
  // `fetch`, or legacy IPC handles), after checking what the daemon sent.
  static Status Map(GpuCommSetup setup, const FetchFd& fetch, std::unique_ptr<GpuRankEngine>* out);

  GpuCommSetup setup;
  std::unique_ptr<ipc::GpuWindow> control;
  std::vector<std::shared_ptr<ipc::GpuWindow>> ranks;  // shared: heap buffers keep theirs mapped
  uint64_t* abort_word = nullptr;  // in the control window (device memory)
  // This rank's failure record (ring::DeviceOpArgs::rank_error, failed_gen):
  // device and host views of host-mapped words; kDeviceOk and 0 until a
  // kernel fails.
  int32_t* rank_error = nullptr;
  int32_t* rank_error_host = nullptr;
  uint64_t* failed_gen = nullptr;
  uint64_t* failed_gen_host = nullptr;
  uint32_t blocks = 1;
  std::shared_ptr<StatusSlots> slots = std::make_shared<StatusSlots>();
  std::shared_ptr<SymmetricHeap> heap;
  // Shared with the heap buffers' release, which may outlive this.
  std::shared_ptr<OpOrder> order = std::make_shared<OpOrder>();
  std::shared_ptr<RegisteredBuffers> registrations = std::make_shared<RegisteredBuffers>();
  FetchFd fetch;
  // An op took an index (its post was enqueued) but its completion was not:
  // the device's done word will stay behind the counter, so Quiesce cannot
  // wait for the two to meet.
  std::atomic<bool> post_without_complete{false};

  uint32_t world() const { return setup.seg.world_size(); }
  uint8_t* slot(uint32_t r) const { return static_cast<uint8_t*>(ranks[r]->device_ptr()); }
  // Rank r's staging area for a client-executed message of `bytes`: its own
  // fixed slot. The negative control --unsafe-size-dependent-slots packs every
  // rank's area into rank 0's slot by the message size, against its end (rank
  // r at end - (world - r) * bytes, when they fit), as mori's size-dependent
  // layout did: an area's address then depends on the message size, and a
  // rank's next copy-in can land on a peer's result that the peer is still
  // copying out (a small op of a low rank lands inside a high rank's area).
  uint8_t* staging(uint32_t r, uint64_t bytes) const;
  uint8_t* heap_base(uint32_t r) const { return slot(r) + setup.slot_bytes; }
  // Offset of [p, p + bytes) in this rank's heap, if it lies there.
  bool InHeap(const void* p, uint64_t bytes, uint64_t* offset) const;
  // Whether [p, p + bytes) lies in a registered buffer: its id, the offset
  // in it, and (optional) every rank's address of the range.
  bool InRegistered(const void* p, uint64_t bytes, uint64_t* id, uint64_t* offset,
                    const void** at = nullptr) const;
  // Whether [p, p + bytes) lies in a buffer every rank has at the same
  // offsets (the heap, or a registered buffer), and then every rank's address
  // of it and the tag peers compare (the offset, mixed with the buffer id).
  bool Symmetric(const void* p, uint64_t bytes, uint64_t* tag, const void* (&at)[ring::kMaxDeviceRanks]) const;
  // Whether [p, p + bytes) shares a byte with the heap or a registered buffer.
  bool Overlaps(const void* p, uint64_t bytes) const;

  device::DeviceRankArgs BaseArgs(uint64_t count) const;
  // This rank's op trace, or null when the communicator keeps none
  // (CommunicatorOptions::gpu_op_trace) or the daemon executes its ops.
  uint64_t* trace() const;

  // A staged client-executed op: its `bytes` of input fit the slot, and send
  // and recv are device memory of this rank's device. `what` names the bytes
  // in the message; `hint` says which buffers AllocBuffer would make zero-copy.
  Status CheckStaged(const void* send, const void* recv, uint64_t bytes, const char* what, const char* hint) const;
  Status CheckPointer(const void* p, const char* what) const;

  // How an op's kernel is completed (see Enqueue).
  struct KernelCompletion {
    bool in_kernel = false;  // single-launch: the kernel posts and completes the op itself
    uint64_t* index_word = nullptr;
    uint64_t* gen_mirror = nullptr;  // an eager op's word (DeviceOpArgs::gen_mirror)
    // The launcher's arguments for this completion.
    void ApplyTo(device::DeviceRankArgs* a) const {
      if (!in_kernel) return;
      a->op_index = nullptr;
      a->index_word = index_word;
      a->gen_mirror = gen_mirror;
    }
  };

  struct Plan {  // what a captured op tells the daemon
    CollectiveKind kind;
    DataType dtype;
    ReduceOp op;
    uint64_t count;
  };

  // Runs post, [copy-in], kernel, [copy-out], complete, event on `stream`.
  // A client-executed op with nothing before or after its kernel (zero-copy)
  // is one launch: the kernel posts and completes itself (single-launch mode
  // of device_collectives.h), two launches fewer per op. `kernel` is told which.
  Status Enqueue(gpuStream_t stream, const Plan& plan, const std::function<Status()>& copy_in,
                 const std::function<Status(const KernelCompletion&)>& kernel,
                 const std::function<Status()>& copy_out, std::shared_ptr<GpuOpState>* out);
};

// A device-to-device copy enqueued later on `stream` (the staged ops' copy-in and copy-out).
std::function<Status()> CopyLater(void* dst, const void* src, uint64_t bytes, gpuStream_t stream);

}  // namespace collectived

#endif  // COLLECTIVED_CLIENT_SRC_GPU_RANK_ENGINE_H_
