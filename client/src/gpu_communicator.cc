#include "client/src/gpu_communicator.h"

#include "collectived/client.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <cstddef>
#include <map>
#include <mutex>
#include <thread>

#include "client/src/gpu_op.h"
#include "client/src/registered_buffers.h"
#include "client/src/symmetric_heap.h"
#include "ipc/cumem_window.h"
#include "ipc/legacy_ipc_window.h"
#include "kernels/device/device_collectives.h"
#include "base/gpu/device_guard.h"
#include "base/gpu/gpu_check.h"
#include "kernels/device/gpu_comm_layout.h"

namespace collectived {

namespace {

using gpu::DeviceGuard;

// A device-to-device copy enqueued later on `stream` (the staged ops' copy-in and copy-out).
std::function<Status()> CopyLater(void* dst, const void* src, uint64_t bytes, gpuStream_t stream) {
  return [=] {
    COLLECTIVED_GPU_CHECK(gpuMemcpyAsync(dst, src, bytes, gpuMemcpyDeviceToDevice, stream));
    return Status::Ok();
  };
}

// Kernels load whole elements: a buffer not aligned to its element size would fault.
Status CheckElementAlignment(const void* send, const void* recv, size_t es) {
  if (reinterpret_cast<uintptr_t>(send) % es != 0 || reinterpret_cast<uintptr_t>(recv) % es != 0) {
    return Status::InvalidArgument("send and recv must be aligned to the element size (" + std::to_string(es) +
                                   " bytes)");
  }
  return Status::Ok();
}

}  // namespace

struct GpuCommunicator::Impl {
  ~Impl() {
    if (registered != nullptr) {
      DeviceGuard guard(setup.device);
      gpuHostUnregister(registered);
    }
  }
  GpuCommSetup setup;
  std::unique_ptr<ipc::GpuWindow> control;
  std::vector<std::shared_ptr<ipc::GpuWindow>> ranks;  // shared: heap buffers keep theirs mapped
  void* registered = nullptr;  // the segment's control page, registered with CUDA
  // Daemon-executed only: device views of the segment's words.
  uint64_t* posted_mirror = nullptr;
  uint64_t* completed_mirror = nullptr;
  uint64_t* abort_word = nullptr;  // in the control window (device memory)
  uint8_t* ring = nullptr;  // device view of this rank's op ring (daemon-executed)
  uint32_t blocks = 1;
  std::shared_ptr<StatusSlots> slots = std::make_shared<StatusSlots>();
  std::shared_ptr<SymmetricHeap> heap;
  // Shared with the heap buffers' release, which may outlive this.
  std::shared_ptr<OpOrder> order = std::make_shared<OpOrder>();
  std::shared_ptr<RegisteredBuffers> registrations = std::make_shared<RegisteredBuffers>();
  FetchFd fetch;

  uint32_t world() const { return setup.seg.world_size(); }
  uint8_t* slot(uint32_t r) const { return static_cast<uint8_t*>(ranks[r]->device_ptr()); }
  // Rank r's staging area for a client-executed message of `bytes`: its own
  // fixed slot. The negative control --unsafe-size-dependent-slots packs every
  // rank's area into rank 0's slot by the message size, against its end (rank
  // r at end - (world - r) * bytes, when they fit), as mori's size-dependent
  // layout did: an area's address then depends on the message size, and a
  // rank's next copy-in can land on a peer's result that the peer is still
  // copying out (a small op of a low rank lands inside a high rank's area).
  uint8_t* staging(uint32_t r, uint64_t bytes) const {
    if ((setup.seg.header().unsafe_flags & ring::kUnsafeSizeDependentSlots) != 0) {
      const uint64_t stride = (bytes + 15) / 16 * 16;
      if (stride * world() <= setup.slot_bytes) return slot(0) + setup.slot_bytes - (world() - r) * stride;
    }
    return slot(r);
  }
  uint8_t* heap_base(uint32_t r) const { return slot(r) + setup.slot_bytes; }
  // Offset of [p, p + bytes) in this rank's heap, if it lies there.
  bool InHeap(const void* p, uint64_t bytes, uint64_t* offset) const {
    const auto base = reinterpret_cast<uintptr_t>(heap_base(setup.rank));
    const auto x = reinterpret_cast<uintptr_t>(p);
    if (x < base || x - base > setup.heap_bytes || bytes > setup.heap_bytes - (x - base)) return false;
    *offset = x - base;
    return true;
  }

  // Whether [p, p + bytes) lies in a registered buffer: its id, the offset
  // in it, and (optional) every rank's address of the range.
  bool InRegistered(const void* p, uint64_t bytes, uint64_t* id, uint64_t* offset,
                    const void** at = nullptr) const {
    const auto x = reinterpret_cast<uintptr_t>(p);
    std::lock_guard<std::mutex> lock(registrations->mu);
    auto it = registrations->by_address.upper_bound(x);
    if (it == registrations->by_address.begin()) return false;
    --it;
    const RegisteredBuffers::Entry& e = it->second;
    if (x - it->first > e.bytes || bytes > e.bytes - (x - it->first)) return false;
    *id = e.id;
    *offset = x - it->first;
    if (at != nullptr) {
      for (uint32_t k = 0; k < world(); ++k) at[k] = e.at[k] + *offset;
    }
    return true;
  }

  // Whether [p, p + bytes) lies in a buffer every rank has at the same
  // offsets (the heap, or a registered buffer), and then every rank's address
  // of it and the tag peers compare (the offset, mixed with the buffer id).
  bool Symmetric(const void* p, uint64_t bytes, uint64_t* tag, const void* (&at)[device::kMaxDeviceRanks]) const {
    uint64_t off = 0, id = 0;
    if (InHeap(p, bytes, &off)) {
      for (uint32_t k = 0; k < world(); ++k) at[k] = heap_base(k) + off;
      *tag = off;
      return true;
    }
    if (!InRegistered(p, bytes, &id, &off, at)) return false;
    *tag = off ^ (id * 0xC2B2AE3D27D4EB4Full);
    return true;
  }

  // Whether [p, p + bytes) shares a byte with the heap or a registered buffer.
  bool Overlaps(const void* p, uint64_t bytes) const {
    const auto x = reinterpret_cast<uintptr_t>(p);
    auto overlap = [&](uintptr_t base, uint64_t len) { return x < base + len && base < x + bytes; };
    if (overlap(reinterpret_cast<uintptr_t>(heap_base(setup.rank)), setup.heap_bytes)) return true;
    std::lock_guard<std::mutex> lock(registrations->mu);
    for (const auto& [base, e] : registrations->by_address) {
      if (overlap(base, e.bytes)) return true;
    }
    return false;
  }

  device::DeviceRankArgs BaseArgs(uint64_t count) const {
    device::DeviceRankArgs a;
    void* c = control->device_ptr();
    a.rank = setup.rank;
    a.world = world();
    a.count = count;
    a.flags = device::GpuControlLayout::Flags(c);
    a.op_index = device::GpuControlLayout::OpIndex(c, setup.rank);
    a.done = device::GpuControlLayout::Done(c, setup.rank);
    a.finished = device::GpuControlLayout::Finished(c, setup.rank);
    a.counter = device::GpuControlLayout::Counter(c, setup.rank);
    a.abort_word = abort_word;
    a.error_word = device::GpuControlLayout::Error(c);
    a.timeout_ns = setup.seg.header().op_timeout_ns;
    a.descriptors = device::GpuControlLayout::Descriptors(c);
    a.trace = device::GpuControlLayout::Trace(c, setup.rank);
    // Debug hook and negative control (daemon flags, in the segment header).
    const ring::CommHeader& h = setup.seg.header();
    if (h.debug_delay_rank == static_cast<int32_t>(setup.rank)) a.debug_read_delay_ns = uint64_t{h.debug_delay_us} * 1000;
    a.unsafe_skip_end_barrier = (h.unsafe_flags & ring::kUnsafeSkipEndBarrier) != 0;
    return a;
  }

  // A staged client-executed op: its `bytes` of input fit the slot, and send
  // and recv are device memory of this rank's device. `what` names the bytes
  // in the message; `hint` says which buffers AllocBuffer would make zero-copy.
  Status CheckStaged(const void* send, const void* recv, uint64_t bytes, const char* what, const char* hint) const {
    if (bytes > setup.slot_bytes) {
      return Status::InvalidArgument(std::string(what) + " of " + std::to_string(bytes) +
                                     " bytes exceeds the staging slot of " + std::to_string(setup.slot_bytes) +
                                     " bytes (max_message_bytes); allocate " + hint +
                                     " with Communicator::AllocBuffer to run it zero-copy");
    }
    COLLECTIVED_RETURN_IF_ERROR(CheckPointer(send, "send"));
    return CheckPointer(recv, "recv");
  }

  Status CheckPointer(const void* p, const char* what) const {
    if (p == nullptr) return Status::InvalidArgument(std::string(what) + " is null");
    gpuPointerAttributes attr{};
    if (gpuPointerGetAttributes(&attr, p) != gpuSuccess) {
      gpuGetLastError();  // clear it: not sticky
      return Status::InvalidArgument(std::string(what) + " is not a pointer the GPU runtime knows");
    }
    if (attr.type != gpuMemoryTypeDevice && attr.type != gpuMemoryTypeManaged) {
      return Status::InvalidArgument(std::string(what) + " is not device memory");
    }
    if (attr.type == gpuMemoryTypeDevice && attr.device != setup.device) {
      return Status::InvalidArgument(std::string(what) + " lives on device " + std::to_string(attr.device) +
                                     ", this rank's communicator is on device " + std::to_string(setup.device));
    }
    return Status::Ok();
  }

  // Daemon-executed: the descriptor into the ring (after the copy-in), then a
  // wait on the daemon's completion word.
  Status PostAndWaitForDaemon(const ring::OpDescriptor& d, gpuStream_t stream) {
    void* c = control->device_ptr();
    device::RingPostArgs p;
    p.counter = device::GpuControlLayout::Counter(c, setup.rank);
    p.op_index = device::GpuControlLayout::OpIndex(c, setup.rank);
    p.posted_mirror = posted_mirror;
    p.ring = ring;
    p.depth = setup.seg.ring_depth();
    p.slot_bytes = sizeof(ring::RingSlot);
    p.desc_offset = offsetof(ring::RingSlot, desc);
    static_assert(sizeof(ring::OpDescriptor) % 8 == 0 && sizeof(ring::OpDescriptor) / 8 <= device::kRingDescriptorWords);
    p.desc_words = sizeof(ring::OpDescriptor) / 8;
    std::memcpy(p.desc, &d, sizeof(d));
    p.completed = completed_mirror;
    p.abort_word = abort_word;
    p.error_word = device::GpuControlLayout::Error(c);
    p.timeout_ns = setup.seg.header().op_timeout_ns;
    COLLECTIVED_RETURN_IF_ERROR(device::LaunchRingPost(p, stream));
    return device::LaunchWait(p.op_index, completed_mirror, abort_word, p.error_word, p.timeout_ns, stream);
  }

  // How an op's kernel is completed (see Enqueue).
  struct KernelCompletion {
    bool in_kernel = false;  // single-launch: the kernel posts and completes the op itself
    uint64_t* index_word = nullptr;
    int32_t* status_mirror = nullptr;
    // The launcher's arguments for this completion.
    void ApplyTo(device::DeviceRankArgs* a) const {
      if (!in_kernel) return;
      a->op_index = nullptr;
      a->index_word = index_word;
      a->status_mirror = status_mirror;
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
                 const std::function<Status()>& copy_out, std::shared_ptr<GpuOpState>* out) {
    gpuStreamCaptureStatus capture = gpuStreamCaptureStatusNone;
    COLLECTIVED_GPU_CHECK(gpuStreamIsCapturing(stream, &capture));
    // A captured op's plan goes to the daemon now, before anything is
    // enqueued: its replays post from the device with no RPC.
    if (capture != gpuStreamCaptureStatusNone && setup.register_plan) {
      COLLECTIVED_RETURN_IF_ERROR(setup.register_plan(plan.kind, plan.dtype, plan.op, plan.count));
    }
    auto op = std::make_shared<GpuOpState>();
    op->device = setup.device;
    op->captured = capture != gpuStreamCaptureStatusNone;
    op->seg = setup.seg;
    op->seg_keep = setup.seg_keep;
    op->timeout_ns = setup.seg.header().op_timeout_ns;
    op->slots = slots;
    COLLECTIVED_GPU_CHECK(gpuEventCreateWithFlags(&op->event, gpuEventDisableTiming));
    int32_t* slot_dev = nullptr;
    if (!op->captured) COLLECTIVED_RETURN_IF_ERROR(slots->Take(&op->status_slot, &slot_dev));
    std::unique_lock<std::mutex> ordered(order->mu, std::defer_lock);
    if (!op->captured) {
      // One rank's ops share its index word and input slot, so they run one
      // after another: each waits for the previous one, on whatever stream.
      // Always, even on the "same" stream: a handle value can name another
      // stream by now (cudaStreamPerThread, or a destroyed stream's reused handle).
      ordered.lock();
      if (order->closed) return Status::FailedPrecondition("communicator was destroyed");
      if (order->last) COLLECTIVED_GPU_CHECK(gpuStreamWaitEvent(stream, order->last->event, 0));
    }
    // From the first launch on, the op is this rank's last whatever fails
    // later, so Quiesce and heap frees wait for what did get enqueued.
    bool event_recorded = false;
    const bool in_kernel = !setup.daemon_executed && !copy_in && !copy_out;
    Status enqueued = [&]() -> Status {
      void* c = control->device_ptr();
      if (!setup.daemon_executed && !in_kernel) {
        COLLECTIVED_RETURN_IF_ERROR(device::LaunchPost(device::GpuControlLayout::Counter(c, setup.rank),
                                                       device::GpuControlLayout::OpIndex(c, setup.rank), stream,
                                                       nullptr, device::GpuControlLayout::Trace(c, setup.rank)));
      }
      if (copy_in) COLLECTIVED_RETURN_IF_ERROR(copy_in());
      // Debug hooks and the negative control, as on the host backend (daemon flags, in the segment header).
      const ring::CommHeader& h = setup.seg.header();
      KernelCompletion completion;
      if (in_kernel) {
        completion.in_kernel = true;
        completion.index_word = device::GpuControlLayout::OpIndex(c, setup.rank);
        completion.status_mirror = slot_dev;  // null for captured ops, as below
      }
      COLLECTIVED_RETURN_IF_ERROR(kernel(completion));
      const bool event_early = (h.unsafe_flags & ring::kUnsafeEventBeforeEpilogue) != 0;
      if (event_early) COLLECTIVED_GPU_CHECK(gpuEventRecord(op->event, stream));  // seed bug 1, on purpose
      if (copy_out && h.debug_delay_copyout_us > 0) {
        // Rank r's copy-out starts (r + 1) x the delay late: ranks leave their
        // epilogues apart, as skewed ranks do, which opens the staging race.
        const uint64_t ns = uint64_t{h.debug_delay_copyout_us} * 1000 * (setup.rank + 1);
        COLLECTIVED_RETURN_IF_ERROR(device::LaunchDelay(ns, stream));
      }
      if (copy_out) COLLECTIVED_RETURN_IF_ERROR(copy_out());
      // A captured op's verdict has no host slot to go to (a graph outlives
      // handles); its failure shows in every later eager op, the error word being sticky.
      // Daemon-executed: the daemon keeps `completed` itself.
      if (!in_kernel) {
        COLLECTIVED_RETURN_IF_ERROR(device::LaunchComplete(
            device::GpuControlLayout::OpIndex(c, setup.rank), device::GpuControlLayout::Done(c, setup.rank), stream,
            nullptr, op->captured ? nullptr : device::GpuControlLayout::Error(c), slot_dev,
            setup.daemon_executed ? nullptr : device::GpuControlLayout::Trace(c, setup.rank)));
      }
      if (!event_early) COLLECTIVED_GPU_CHECK(gpuEventRecord(op->event, stream));
      event_recorded = true;
      return Status::Ok();
    }();
    if (!op->captured) {
      if (!event_recorded) gpuEventRecord(op->event, stream);  // best effort: cover what was enqueued
      order->last = op;  // under `ordered`, held since the wait above
    }
    COLLECTIVED_RETURN_IF_ERROR(enqueued);
    *out = std::move(op);
    return Status::Ok();
  }
};

GpuCommunicator::GpuCommunicator(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

GpuCommunicator::~GpuCommunicator() = default;  // Impl unregisters the segment

void GpuCommunicator::ReleaseQueueLease() { impl_->setup.queue_lease.reset(); }

Status GpuCommunicator::ReadTrace(uint64_t index, std::vector<OpTrace>* per_rank) const {
  Impl& m = *impl_;
  if (m.setup.daemon_executed) return Status::FailedPrecondition("daemon-executed GPU ops keep no op trace");
  for (const GpuWindowRef& w : m.setup.ranks) {
    if (w.device_uuid != m.setup.ranks[0].device_uuid) {
      // Each GPU's globaltimer runs on its own: times of different GPUs do not compare.
      return Status::FailedPrecondition("the op trace compares ranks of one GPU only");
    }
  }
  DeviceGuard guard(m.setup.device);
  void* c = m.control->device_ptr();
  // A private stream: a copy on the legacy stream could wait behind this
  // process's kernels, which may be waiting for ranks this thread posts next.
  gpuStream_t stream = nullptr;
  COLLECTIVED_GPU_CHECK(gpuStreamCreateWithFlags(&stream, gpuStreamNonBlocking));
  std::vector<uint64_t> e(m.world() * device::kTraceEntryWords);
  Status copied = [&]() -> Status {
    for (uint32_t r = 0; r < m.world(); ++r) {
      const uint64_t* at =
          device::GpuControlLayout::Trace(c, r) + (index % device::kTraceDepth) * device::kTraceEntryWords;
      COLLECTIVED_GPU_CHECK(gpuMemcpyAsync(e.data() + r * device::kTraceEntryWords, at,
                                           device::kTraceEntryWords * sizeof(uint64_t), gpuMemcpyDeviceToHost, stream));
    }
    COLLECTIVED_GPU_CHECK(gpuStreamSynchronize(stream));
    return Status::Ok();
  }();
  gpuStreamDestroy(stream);
  COLLECTIVED_RETURN_IF_ERROR(copied);
  per_rank->assign(m.world(), OpTrace{});
  for (uint32_t r = 0; r < m.world(); ++r) {
    const uint64_t* w = e.data() + r * device::kTraceEntryWords;
    OpTrace& t = (*per_rank)[r];
    t.posted = w[3] == index + 1;
    // Complete: index + 1 in word 0, and the completion time it was stored after
    // (one copy may see the new word 0 with an old word 2).
    t.valid = t.posted && w[0] == index + 1 && w[2] != 0;
    t.reads_done_ns = t.posted ? static_cast<int64_t>(w[1]) : 0;
    t.output_done_ns = t.valid ? static_cast<int64_t>(w[2]) : 0;  // the complete kernel runs after any copy-out
    t.completed_ns = t.output_done_ns;
  }
  return Status::Ok();
}

Status GpuCommunicator::Create(GpuCommSetup setup, const FetchFd& fetch, std::unique_ptr<GpuCommunicator>* out) {
  auto impl = std::make_unique<Impl>();
  impl->setup = std::move(setup);
  impl->fetch = fetch;
  const GpuCommSetup& s = impl->setup;
  if (s.ranks.size() != s.seg.world_size()) return Status::Internal("daemon sent the wrong number of rank windows");
  if (s.seg.world_size() > device::kMaxDeviceRanks) return Status::InvalidArgument("too many GPU ranks");
  DeviceGuard guard(s.device);
  COLLECTIVED_RETURN_IF_ERROR(device::PreloadKernels());
  auto import = [&](const GpuWindowRef& ref, std::unique_ptr<ipc::GpuWindow>* w) -> Status {
    if (!ref.legacy_ipc_handle.empty()) {  // the daemon could not export cuMem memory
      std::unique_ptr<ipc::LegacyIpcWindow> legacy;
      COLLECTIVED_RETURN_IF_ERROR(ipc::LegacyIpcWindow::Open(ref.legacy_ipc_handle, s.device, ref.bytes, &legacy));
      *w = std::move(legacy);
      return Status::Ok();
    }
    int fd = -1;
    uint64_t bytes = 0;
    COLLECTIVED_RETURN_IF_ERROR(fetch(ref.window_id, &fd, &bytes));
    if (bytes < ref.bytes) {
      close(fd);
      return Status::Internal("GPU window smaller than announced");
    }
    // Mapped for this rank's device: peers' windows on other GPUs are reached over peer access.
    std::unique_ptr<ipc::CuMemWindow> cumem;
    COLLECTIVED_RETURN_IF_ERROR(ipc::CuMemWindow::Import(fd, s.device, ref.bytes, &cumem));
    *w = std::move(cumem);
    return Status::Ok();
  };
  COLLECTIVED_RETURN_IF_ERROR(import(s.control, &impl->control));
  for (const GpuWindowRef& ref : s.ranks) {
    std::unique_ptr<ipc::GpuWindow> w;
    COLLECTIVED_RETURN_IF_ERROR(import(ref, &w));
    impl->ranks.push_back(std::move(w));
  }
  impl->abort_word = device::GpuControlLayout::Abort(impl->control->device_ptr());
  if (s.daemon_executed) {
    // Daemon-executed ops meet the daemon in the segment: ring posts write the
    // op ring, the wait kernel polls the daemon's `completed` word.
    const uint64_t page = static_cast<uint64_t>(sysconf(_SC_PAGESIZE));
    void* base = &s.seg.header();
    COLLECTIVED_GPU_CHECK(gpuHostRegister(base, device::AlignUp(s.seg.control_bytes(), page),
                                          gpuHostRegisterMapped | gpuHostRegisterPortable));
    impl->registered = base;
    void* dev = nullptr;
    COLLECTIVED_GPU_CHECK(gpuHostGetDevicePointer(&dev, base, 0));
    auto device_view = [&](const void* host) {
      return reinterpret_cast<uint64_t*>(static_cast<uint8_t*>(dev) +
                                         (static_cast<const uint8_t*>(host) - static_cast<const uint8_t*>(base)));
    };
    impl->posted_mirror = device_view(&s.seg.control(s.rank).next_index.value);
    impl->completed_mirror = device_view(&s.seg.control(s.rank).completed.value);
    impl->ring = reinterpret_cast<uint8_t*>(device_view(&s.seg.slot(s.rank, 0)));
  }
  // One block count for every rank (barriers pair blocks by index), chosen
  // by the daemon so that ranks sharing a GPU are all resident at once.
  if (s.blocks == 0 || s.blocks > device::kMaxBlocks) return Status::Internal("daemon sent no valid block count");
  impl->blocks = s.blocks;
  impl->heap = std::make_shared<SymmetricHeap>(s.heap_bytes, device::kHeapAlignment);
  out->reset(new GpuCommunicator(std::move(impl)));
  return Status::Ok();
}

Status GpuCommunicator::AllocBuffer(uint64_t bytes, GpuHeapBuffer* out) {
  if (bytes == 0) return Status::InvalidArgument("buffer of 0 bytes");
  uint64_t offset = 0;
  COLLECTIVED_RETURN_IF_ERROR(impl_->heap->Alloc(bytes, &offset));
  out->ptr = impl_->heap_base(impl_->setup.rank) + offset;
  out->bytes = bytes;
  out->keep = impl_->ranks[impl_->setup.rank];
  // Like cudaFree, a Free waits for the GPU work before it: the range goes
  // back only after this rank's eager ops enqueued so far ran (peers' parts
  // of those ops passed the end barrier with them). Freeing at once would let
  // the next AllocBuffer hand the range out while an op still writes it.
  // Waiting keeps the heap symmetric: every rank frees at the same point.
  const int64_t timeout_ms = static_cast<int64_t>(impl_->setup.seg.header().op_timeout_ns / 1000000) + 5000;
  out->release = [heap = impl_->heap, offset, order = impl_->order, device = impl_->setup.device, timeout_ms] {
    COLLECTIVED_RETURN_IF_ERROR(WaitForEnqueued(order, device, timeout_ms,
                                                "a GPU op enqueued before this heap buffer's Free did not finish; "
                                                "the range stays allocated"));
    return heap->Free(offset);
  };
  return Status::Ok();
}

Status GpuCommunicator::RegisterBuffer(void* ptr, uint64_t bytes, GpuHeapBuffer* out) {
  Impl& m = *impl_;
  if (!m.setup.register_buffer) return Status::Unimplemented("this daemon does not take registered buffers");
  if (bytes == 0) return Status::InvalidArgument("buffer of 0 bytes");
  DeviceGuard guard(m.setup.device);
  COLLECTIVED_RETURN_IF_ERROR(m.CheckPointer(ptr, "buffer"));
  if (m.Overlaps(ptr, bytes)) {
    return Status::AlreadyExists("buffer overlaps this communicator's heap or a buffer already registered");
  }
  return RegisterCallerBuffer(m.setup, m.fetch, m.registrations, m.order, ptr, bytes, out);
}

namespace {

// The descriptor every peer compares: kind, type, op, algorithm, count and,
// for zero-copy ops, where send and recv lie (Impl::Symmetric's tags: peers
// address each other's buffers by them).
void Describe(device::DeviceRankArgs* a, CollectiveKind kind, DataType dtype, ReduceOp op, uint32_t algo,
              bool zero_copy, uint64_t send_tag, uint64_t recv_tag) {
  a->desc[0] = static_cast<uint64_t>(kind) | static_cast<uint64_t>(dtype) << 8 | static_cast<uint64_t>(op) << 16 |
               static_cast<uint64_t>(algo) << 24 | static_cast<uint64_t>(zero_copy) << 32;
  a->desc[1] = a->count;
  a->desc[2] = zero_copy ? (send_tag * 0x9E3779B97F4A7C15ull) ^ recv_tag : 0;
}

}  // namespace

Status GpuCommunicator::AllReduce(const void* send, void* recv, uint64_t count, DataType dtype, ReduceOp op,
                                  void* stream_ptr, std::shared_ptr<GpuOpState>* out) {
  Impl& m = *impl_;
  if (count == 0) return Status::InvalidArgument("count must be positive");
  if (!IsValidReduction(dtype, op)) {
    return Status::InvalidArgument(std::string("reduction ") + ReduceOpName(op) + " is not allowed on " +
                                   DataTypeName(dtype));
  }
  const uint64_t bytes = count * DataTypeSize(dtype);
  if (bytes / DataTypeSize(dtype) != count) return Status::InvalidArgument("count overflows");
  COLLECTIVED_RETURN_IF_ERROR(CheckElementAlignment(send, recv, DataTypeSize(dtype)));
  DeviceGuard guard(m.setup.device);
  auto stream = static_cast<gpuStream_t>(stream_ptr);
  if (m.setup.daemon_executed) {
    return DaemonOp(CollectiveKind::kAllReduce, send, recv, count, dtype, op, stream, out);
  }
  uint64_t send_tag = 0, recv_tag = 0;
  const void* send_at[device::kMaxDeviceRanks];
  const void* recv_at[device::kMaxDeviceRanks];
  const bool zero_copy = m.Symmetric(send, bytes, &send_tag, send_at) && m.Symmetric(recv, bytes, &recv_tag, recv_at);
  device::DeviceRankArgs a = m.BaseArgs(count);
  const bool small = bytes <= m.setup.seg.header().one_shot_max_bytes;
  device::DeviceAlgorithm algo = small ? device::DeviceAlgorithm::kOneShot : device::DeviceAlgorithm::kTwoShotPush;
  std::function<Status()> copy_in, copy_out;
  if (zero_copy) {
    for (uint32_t k = 0; k < m.world(); ++k) {
      a.inputs[k] = send_at[k];
      a.outputs[k] = const_cast<void*>(recv_at[k]);
    }
    if (send == recv) algo = device::DeviceAlgorithm::kTwoShotPush;  // the launcher's in-place rule, said up front
  } else {
    // Staged through the fixed input slots.
    COLLECTIVED_RETURN_IF_ERROR(m.CheckStaged(send, recv, bytes, "message", "send and recv"));
    for (uint32_t k = 0; k < m.world(); ++k) a.inputs[k] = m.staging(k, bytes);
    uint8_t* mine = m.staging(m.setup.rank, bytes);
    copy_in = CopyLater(mine, send, bytes, stream);
    if (algo == device::DeviceAlgorithm::kOneShot) {
      a.own_output_only = true;  // peers' recv buffers are not mapped here
      a.outputs[m.setup.rank] = recv;
    } else {
      // Two-shot in place over the slots (only rank r touches chunk r of any
      // slot), then this rank's slot to recv. The next op's copy-in into the
      // slot runs after this kernel's end barrier: no peer reads it then.
      for (uint32_t k = 0; k < m.world(); ++k) a.outputs[k] = m.staging(k, bytes);
      copy_out = CopyLater(recv, mine, bytes, stream);
    }
  }
  Describe(&a, CollectiveKind::kAllReduce, dtype, op, static_cast<uint32_t>(algo), zero_copy, send_tag, recv_tag);
  // Checked before anything is enqueued: a refused op must not take an index.
  COLLECTIVED_RETURN_IF_ERROR(device::ValidateAllReduce(dtype, op, algo, a, m.blocks));
  auto kernel = [&](const Impl::KernelCompletion& c) {
    c.ApplyTo(&a);
    return device::LaunchAllReduce(dtype, op, algo, a, m.blocks, stream);
  };
  return m.Enqueue(stream, {CollectiveKind::kAllReduce, dtype, op, count}, copy_in, kernel, copy_out, out);
}

Status GpuCommunicator::AllGather(const void* send, void* recv, uint64_t count, DataType dtype, void* stream_ptr,
                                  std::shared_ptr<GpuOpState>* out) {
  Impl& m = *impl_;
  const size_t es = DataTypeSize(dtype);
  if (es == 0) return Status::InvalidArgument("unknown data type");
  if (count == 0) return Status::InvalidArgument("count must be positive");
  const uint64_t bytes = count * es;
  if (bytes / es != count) return Status::InvalidArgument("count overflows");
  COLLECTIVED_RETURN_IF_ERROR(CheckElementAlignment(send, recv, es));
  const uint64_t out_bytes = bytes * m.world();
  DeviceGuard guard(m.setup.device);
  auto stream = static_cast<gpuStream_t>(stream_ptr);
  if (m.setup.daemon_executed) {
    return DaemonOp(CollectiveKind::kAllGather, send, recv, count, dtype, ReduceOp::kUnspecified, stream, out);
  }
  uint64_t recv_tag = 0;
  const void* recv_at[device::kMaxDeviceRanks];
  const bool zero_copy = m.Symmetric(recv, out_bytes, &recv_tag, recv_at);
  device::DeviceRankArgs a = m.BaseArgs(count);
  device::GatherAlgorithm algo = device::GatherAlgorithm::kPush;
  std::function<Status()> copy_in;
  if (zero_copy) {
    uint64_t unused_tag = 0;
    const void* unused_at[device::kMaxDeviceRanks];
    if (!m.Symmetric(send, bytes, &unused_tag, unused_at)) COLLECTIVED_RETURN_IF_ERROR(m.CheckPointer(send, "send"));
    for (uint32_t k = 0; k < m.world(); ++k) {
      a.outputs[k] = const_cast<void*>(recv_at[k]);
      // Push reads only this rank's input; a peer's is named as its own
      // output chunk (never read), which keeps the launcher's overlap checks exact.
      a.inputs[k] = k == m.setup.rank ? send : static_cast<const uint8_t*>(recv_at[k]) + k * bytes;
    }
  } else {
    COLLECTIVED_RETURN_IF_ERROR(m.CheckStaged(send, recv, bytes, "input", "recv"));
    algo = device::GatherAlgorithm::kPull;
    a.own_output_only = true;
    for (uint32_t k = 0; k < m.world(); ++k) a.inputs[k] = m.staging(k, bytes);
    a.outputs[m.setup.rank] = recv;
    uint8_t* mine = m.staging(m.setup.rank, bytes);
    copy_in = CopyLater(mine, send, bytes, stream);
  }
  // Peers do not address this rank's input: only recv's place is compared.
  Describe(&a, CollectiveKind::kAllGather, dtype, ReduceOp::kUnspecified, static_cast<uint32_t>(algo), zero_copy, 0,
           recv_tag);
  COLLECTIVED_RETURN_IF_ERROR(device::ValidateAllGather(dtype, a, m.blocks, algo));
  auto kernel = [&](const Impl::KernelCompletion& c) {
    c.ApplyTo(&a);
    return device::LaunchAllGather(dtype, a, m.blocks, stream, algo);
  };
  return m.Enqueue(stream, {CollectiveKind::kAllGather, dtype, ReduceOp::kUnspecified, count}, copy_in, kernel,
                   nullptr, out);
}

Status GpuCommunicator::DaemonOp(CollectiveKind kind, const void* send, void* recv, uint64_t count, DataType dtype,
                                 ReduceOp op, void* stream_ptr, std::shared_ptr<GpuOpState>* out) {
  Impl& m = *impl_;
  auto stream = static_cast<gpuStream_t>(stream_ptr);
  const uint64_t bytes = count * DataTypeSize(dtype);
  const uint64_t out_bytes = kind == CollectiveKind::kAllGather ? bytes * m.world() : bytes;
  ring::OpDescriptor d{};
  d.kind = kind;
  d.dtype = dtype;
  d.reduce_op = op;
  d.algorithm = ring::Algorithm::kUnspecified;  // one fused launch
  d.count = count;
  // The daemon addresses each rank's buffers on its own (no symmetry needed):
  // heap and registered buffers in place, anything else through the rank's slot.
  std::function<Status()> copy_in, copy_out;
  uint8_t* mine = m.slot(m.setup.rank);
  uint64_t id = 0;
  if (m.InHeap(send, bytes, &d.send_offset)) {
    d.send_buffer_id = device::kGpuPlaceHeap;
  } else if (m.InRegistered(send, bytes, &id, &d.send_offset)) {
    d.send_buffer_id = device::kGpuPlaceRegistered | id << 8;
  } else {
    if (bytes > m.setup.slot_bytes) {
      return Status::InvalidArgument("message of " + std::to_string(bytes) + " bytes exceeds the staging slot of " +
                                     std::to_string(m.setup.slot_bytes) + " bytes; use Communicator::AllocBuffer");
    }
    COLLECTIVED_RETURN_IF_ERROR(m.CheckPointer(send, "send"));
    d.send_buffer_id = device::kGpuPlaceSlot;
    copy_in = CopyLater(mine, send, bytes, stream);
  }
  if (m.InHeap(recv, out_bytes, &d.recv_offset)) {
    d.recv_buffer_id = device::kGpuPlaceHeap;
  } else if (m.InRegistered(recv, out_bytes, &id, &d.recv_offset)) {
    d.recv_buffer_id = device::kGpuPlaceRegistered | id << 8;
  } else if (kind == CollectiveKind::kAllGather) {
    return Status::InvalidArgument("a daemon-executed all-gather writes into the symmetric heap or a registered "
                                   "buffer: allocate recv with Communicator::AllocBuffer, or register it");
  } else {
    if (out_bytes > m.setup.slot_bytes) return Status::InvalidArgument("message exceeds the staging slot");
    COLLECTIVED_RETURN_IF_ERROR(m.CheckPointer(recv, "recv"));
    d.recv_buffer_id = device::kGpuPlaceSlot;
    d.recv_offset = 0;
    copy_out = CopyLater(recv, mine, bytes, stream);
  }
  auto kernel = [&](const Impl::KernelCompletion&) { return m.PostAndWaitForDaemon(d, stream); };
  return m.Enqueue(stream, {kind, dtype, op, count}, copy_in, kernel, copy_out, out);
}

Status GpuCommunicator::Quiesce(int64_t timeout_ms) {
  std::shared_ptr<GpuOpState> last;
  {
    std::lock_guard<std::mutex> lock(impl_->order->mu);
    impl_->order->closed = true;
    last.swap(impl_->order->last);
  }
  if (!last) return Status::Ok();
  DeviceGuard guard(impl_->setup.device);
  return WaitRan(*last, timeout_ms, "this rank's GPU ops did not finish before destroy");
}

}  // namespace collectived
