#include "client/src/gpu_rank_engine.h"

#include <unistd.h>

#include <mutex>
#include <string>

#include "base/gpu/device_guard.h"
#include "base/gpu/gpu_check.h"
#include "client/src/gpu_placement.h"
#include "ipc/cumem_window.h"
#include "ipc/legacy_ipc_window.h"
#include "ring/gpu_control_layout.h"

namespace collectived {

using gpu::DeviceGuard;

std::function<Status()> CopyLater(void* dst, const void* src, uint64_t bytes, gpuStream_t stream) {
  return [=] {
    COLLECTIVED_GPU_CHECK(gpuMemcpyAsync(dst, src, bytes, gpuMemcpyDeviceToDevice, stream));
    return Status::Ok();
  };
}

Status GpuRankEngine::Map(GpuCommSetup setup, const FetchFd& fetch, std::unique_ptr<GpuRankEngine>* out) {
  auto engine = std::make_unique<GpuRankEngine>();
  engine->setup = std::move(setup);
  engine->fetch = fetch;
  const GpuCommSetup& s = engine->setup;
  if (s.ranks.size() != s.seg.world_size()) return Status::Internal("daemon sent the wrong number of rank windows");
  if (s.seg.world_size() > ring::kMaxDeviceRanks) return Status::InvalidArgument("too many GPU ranks");
  DeviceGuard guard(s.device);  // its kernels were loaded before the join (WarmGpuDevice)
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
  COLLECTIVED_RETURN_IF_ERROR(import(s.control, &engine->control));
  for (const GpuWindowRef& ref : s.ranks) {
    std::unique_ptr<ipc::GpuWindow> w;
    COLLECTIVED_RETURN_IF_ERROR(import(ref, &w));
    engine->ranks.push_back(std::move(w));
  }
  engine->abort_word = ring::GpuControlLayout::Abort(engine->control->device_ptr());
  // Kept for the engine's life (the slab goes with the slots, after every op).
  uint64_t *error_host = nullptr, *error_dev = nullptr;
  COLLECTIVED_RETURN_IF_ERROR(engine->slots->Take(&error_host, &error_dev));
  *reinterpret_cast<volatile uint64_t*>(error_host) = 0;  // kDeviceOk in the low half, which the kernels write
  engine->rank_error_host = reinterpret_cast<int32_t*>(error_host);
  engine->rank_error = reinterpret_cast<int32_t*>(error_dev);
  COLLECTIVED_RETURN_IF_ERROR(engine->slots->Take(&engine->failed_gen_host, &engine->failed_gen));
  *reinterpret_cast<volatile uint64_t*>(engine->failed_gen_host) = 0;
  *out = std::move(engine);
  return Status::Ok();
}

uint8_t* GpuRankEngine::staging(uint32_t r, uint64_t bytes) const {
  if ((setup.seg.params().unsafe_flags & ring::kUnsafeSizeDependentSlots) != 0) {
    const uint64_t stride = (bytes + 15) / 16 * 16;
    if (stride * world() <= setup.slot_bytes) return slot(0) + setup.slot_bytes - (world() - r) * stride;
  }
  return slot(r);
}

bool GpuRankEngine::InHeap(const void* p, uint64_t bytes, uint64_t* offset) const {
  const auto base = reinterpret_cast<uintptr_t>(heap_base(setup.rank));
  const auto x = reinterpret_cast<uintptr_t>(p);
  if (x < base || x - base > setup.heap_bytes || bytes > setup.heap_bytes - (x - base)) return false;
  *offset = x - base;
  return true;
}

bool GpuRankEngine::InRegistered(const void* p, uint64_t bytes, uint64_t* id, uint64_t* offset,
                                 const void** at) const {
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

bool GpuRankEngine::Symmetric(const void* p, uint64_t bytes, uint64_t* tag,
                              const void* (&at)[ring::kMaxDeviceRanks]) const {
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

bool GpuRankEngine::Overlaps(const void* p, uint64_t bytes) const {
  const auto x = reinterpret_cast<uintptr_t>(p);
  auto overlap = [&](uintptr_t base, uint64_t len) { return x < base + len && base < x + bytes; };
  if (overlap(reinterpret_cast<uintptr_t>(heap_base(setup.rank)), setup.heap_bytes)) return true;
  std::lock_guard<std::mutex> lock(registrations->mu);
  for (const auto& [base, e] : registrations->by_address) {
    if (overlap(base, e.bytes)) return true;
  }
  return false;
}

uint64_t* GpuRankEngine::trace() const {
  if (!setup.op_trace || setup.daemon_executed) return nullptr;
  return ring::GpuControlLayout::Trace(control->device_ptr(), setup.rank);
}

device::DeviceRankArgs GpuRankEngine::BaseArgs(uint64_t count) const {
  device::DeviceRankArgs a;
  void* c = control->device_ptr();
  a.rank = setup.rank;
  a.world = world();
  a.count = count;
  a.flags = ring::GpuControlLayout::Flags(c);
  a.op_index = ring::GpuControlLayout::OpIndex(c, setup.rank);
  a.done = ring::GpuControlLayout::Done(c, setup.rank);
  a.finished = ring::GpuControlLayout::Finished(c, setup.rank);
  // Every kernel of this rank runs `blocks` blocks (the daemon's choice for
  // the communicator), so single-launch ops complete a word per block.
  a.block_done = ring::GpuControlLayout::BlockDone(c, setup.rank);
  a.counter = ring::GpuControlLayout::Counter(c, setup.rank);
  a.abort_word = abort_word;
  a.error_word = ring::GpuControlLayout::Error(c);
  a.rank_error = rank_error;
  a.failed_gen = failed_gen;
  a.timeout_ns = setup.seg.params().op_timeout_ns;
  a.match_descriptors = true;
  a.trace = trace();
  // Debug hook and negative control (daemon flags, in the segment header).
  const ring::SegmentParams& h = setup.seg.params();
  if (h.debug_delay_rank == static_cast<int32_t>(setup.rank)) a.debug_read_delay_ns = uint64_t{h.debug_delay_us} * 1000;
  a.unsafe_skip_end_barrier = (h.unsafe_flags & ring::kUnsafeSkipEndBarrier) != 0;
  a.start_flag_release = (h.gpu_flags & ring::kGpuStartFlagRelease) != 0;
  a.end_fence_gpu_scope = EndFenceAtGpuScope(setup.ranks, h.gpu_flags);
  // Every rank decides alike (the placement and the daemon's flags are the
  // communicator's): ranks of one op must agree on claiming its work.
  if (RanksShareOneDevice(setup.ranks) && (h.gpu_flags & ring::kGpuStaticTwoShot) == 0) {
    a.claims = ring::GpuControlLayout::Claims(c);
  }
  return a;
}

Status GpuRankEngine::CheckStaged(const void* send, const void* recv, uint64_t bytes, const char* what,
                                  const char* hint) const {
  if (bytes > setup.slot_bytes) {
    return Status::InvalidArgument(std::string(what) + " of " + std::to_string(bytes) +
                                   " bytes exceeds the staging slot of " + std::to_string(setup.slot_bytes) +
                                   " bytes (max_message_bytes); allocate " + hint +
                                   " with Communicator::AllocBuffer to run it zero-copy");
  }
  COLLECTIVED_RETURN_IF_ERROR(CheckPointer(send, "send"));
  return CheckPointer(recv, "recv");
}

Status GpuRankEngine::CheckPointer(const void* p, const char* what) const {
  if (p == nullptr) return Status::InvalidArgument(std::string(what) + " is null");
  gpuPointerAttributes attr{};
  if (gpuPointerGetAttributes(&attr, p) != gpuSuccess) {
    gpuGetLastError();  // clear it: not sticky
    return Status::InvalidArgument(std::string(what) + " is not a pointer the GPU runtime knows");
  }
  const auto type = gpuPointerMemoryType(attr);
  if (type != gpuMemoryTypeDevice && type != gpuMemoryTypeManaged) {
    return Status::InvalidArgument(std::string(what) + " is not device memory");
  }
  if (type == gpuMemoryTypeDevice && attr.device != setup.device) {
    return Status::InvalidArgument(std::string(what) + " lives on device " + std::to_string(attr.device) +
                                   ", this rank's communicator is on device " + std::to_string(setup.device));
  }
  return Status::Ok();
}

Status GpuRankEngine::Enqueue(gpuStream_t stream, const Plan& plan, const std::function<Status()>& copy_in,
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
  op->timeout_ns = setup.seg.params().op_timeout_ns;
  op->slots = slots;
  uint64_t* slot_dev = nullptr;
  if (op->captured) {
    COLLECTIVED_GPU_CHECK(gpuEventCreateWithFlags(&op->event, gpuEventDisableTiming));
  } else {
    COLLECTIVED_RETURN_IF_ERROR(slots->Take(&op->status_slot, &slot_dev, &op->event));
  }
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
  bool posted = false;  // a post that took an index, until its completion is enqueued too
  Status enqueued = [&]() -> Status {
    void* c = control->device_ptr();
    if (!setup.daemon_executed && !in_kernel) {
      COLLECTIVED_RETURN_IF_ERROR(ring::LaunchPost(ring::GpuControlLayout::Counter(c, setup.rank),
                                                     ring::GpuControlLayout::OpIndex(c, setup.rank), stream,
                                                     nullptr, trace()));
      posted = true;
    }
    if (copy_in) COLLECTIVED_RETURN_IF_ERROR(copy_in());
    // Debug hooks and the negative control, as on the host backend (daemon flags, in the segment header).
    const ring::SegmentParams& h = setup.seg.params();
    KernelCompletion completion;
    if (in_kernel) {
      completion.in_kernel = true;
      completion.index_word = ring::GpuControlLayout::OpIndex(c, setup.rank);
      // The kernel's block 0 stores the op's generation in the word; the
      // verdict is then the rank's failure record (GenVerdict): no last
      // block counts the others to copy a verdict (docs/latency.md, the
      // ninth cut). Null for captured ops, as below.
      completion.gen_mirror = slot_dev;
      if (slot_dev != nullptr) {
        op->failed_gen = failed_gen_host;
        op->rank_error = rank_error_host;
      }
    }
    // Set before the launch that writes the word: a launcher's error may be
    // an earlier one left on the thread, its kernel enqueued all the same
    // (a word taken back too early could get that kernel's write late).
    if (in_kernel) op->slot_written_later = slot_dev != nullptr;  // the kernel's block 0 writes it
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
      op->slot_written_later = slot_dev != nullptr;  // before the launch, as above
      COLLECTIVED_RETURN_IF_ERROR(ring::LaunchComplete(
          ring::GpuControlLayout::OpIndex(c, setup.rank), ring::GpuControlLayout::Done(c, setup.rank), stream,
          nullptr, op->captured ? nullptr : ring::GpuControlLayout::Error(c),
          reinterpret_cast<int32_t*>(slot_dev),  // the verdict, in the word's low half
          trace()));
      posted = false;
    }
    if (!event_early) COLLECTIVED_GPU_CHECK(gpuEventRecord(op->event, stream));
    event_recorded = true;
    return Status::Ok();
  }();
  if (!op->captured) {
    if (!event_recorded) gpuEventRecord(op->event, stream);  // best effort: cover what was enqueued
    order->last = op;  // under `ordered`, held since the wait above
  }
  if (posted) post_without_complete.store(true, std::memory_order_release);
  COLLECTIVED_RETURN_IF_ERROR(enqueued);
  *out = std::move(op);
  return Status::Ok();
}

}  // namespace collectived
