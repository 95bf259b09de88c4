#include "client/src/gpu_op.h"

#include <chrono>
#include <thread>

#include "base/gpu/device_guard.h"
#include "base/gpu/gpu_check.h"
#include "client/src/gpu_communicator.h"
#include "kernels/device/device_collectives.h"

namespace collectived {

using gpu::DeviceGuard;

StatusSlots::~StatusSlots() {
  for (gpuEvent_t e : events_) gpuEventDestroy(e);
  for (const Word& slab : slabs_) gpuFreeHost(slab.host);
}

Status StatusSlots::Take(uint64_t** host, uint64_t** device, gpuEvent_t* event) {
  std::lock_guard<std::mutex> lock(mu_);
  Reclaim(false);
  if (free_.empty()) Reclaim(true);
  if (free_.empty()) {
    void* slab = nullptr;
    COLLECTIVED_GPU_CHECK(gpuHostAlloc(&slab, kSlab * sizeof(uint64_t), gpuHostAllocMapped | gpuHostAllocPortable));
    void* dev = nullptr;
    const gpuError_t mapped = gpuHostGetDevicePointer(&dev, slab, 0);
    if (mapped != gpuSuccess) gpuFreeHost(slab);
    COLLECTIVED_GPU_CHECK(mapped);
    slabs_.push_back({static_cast<uint64_t*>(slab), static_cast<uint64_t*>(dev)});
    // The device view of a mapped allocation is one range: word i of the
    // slab is word i of its device view.
    for (uint32_t i = 0; i < kSlab; ++i) {
      free_.push_back({static_cast<uint64_t*>(slab) + i, static_cast<uint64_t*>(dev) + i});
    }
  }
  if (event != nullptr) {
    if (events_.empty()) {
      COLLECTIVED_GPU_CHECK(gpuEventCreateWithFlags(event, gpuEventDisableTiming));
    } else {
      *event = events_.back();
      events_.pop_back();
    }
  }
  const Word w = free_.back();
  free_.pop_back();
  *reinterpret_cast<volatile uint64_t*>(w.host) = kWordUnset;
  *host = w.host;
  *device = w.device;
  return Status::Ok();
}

void StatusSlots::Give(uint64_t* slot, gpuEvent_t event, bool written_later) {
  std::lock_guard<std::mutex> lock(mu_);
  if (event != nullptr) events_.push_back(event);
  if (written_later) {
    retired_.push_back(slot);
  } else if (uint64_t* device = DeviceView(slot); device != nullptr) {
    free_.push_back({slot, device});
  }
}

uint64_t* StatusSlots::DeviceView(uint64_t* host) const {
  for (const Word& slab : slabs_) {
    if (host >= slab.host && host < slab.host + kSlab) return slab.device + (host - slab.host);
  }
  return nullptr;  // not this pool's
}

void StatusSlots::Reclaim(bool all) {
  // A verdict written into the low half leaves the high half all ones: the
  // word reads other than kWordUnset either way.
  auto written = [](const uint64_t* w) { return *reinterpret_cast<volatile const uint64_t*>(w) != kWordUnset; };
  auto release = [this](uint64_t* w) {
    if (uint64_t* device = DeviceView(w); device != nullptr) free_.push_back({w, device});
  };
  if (!all) {
    while (!retired_.empty() && written(retired_.front())) {
      release(retired_.front());
      retired_.pop_front();
    }
    return;
  }
  for (auto it = retired_.begin(); it != retired_.end();) {
    if (written(*it)) {
      release(*it);
      it = retired_.erase(it);
    } else {
      ++it;
    }
  }
}

Status VerdictStatus(int32_t code, const ring::CommSegment& seg, uint64_t timeout_ns) {
  switch (code) {
    case ring::kDeviceOk:
      return Status::Ok();
    case ring::kDeviceDeadline:
      return Status::DeadlineExceeded("a GPU collective waited longer than the op timeout (" +
                                      std::to_string(timeout_ns / 1000000) +
                                      " ms) for a peer; the communicator is aborted");
    case ring::kDeviceMismatch:
      return Status::InvalidArgument(
          "ranks posted different ops at the same index (kind, type, op, count or heap offsets differ, or a "
          "rank is an op ahead; the device-side matcher refused it); the communicator is aborted");
    case ring::kDeviceAborted: {
      Status abort = seg.AbortStatus();
      if (!abort.ok()) return abort;
      return Status::Aborted("communicator aborted: an op failed on another rank");
    }
    case kSlotUnset:
      return Status::Internal("the op's completion did not record a verdict");
    default:
      return Status::Internal("unknown device error " + std::to_string(code));
  }
}

int32_t GenVerdict(uint64_t gen_word, uint64_t failed_gen, int32_t rank_error) {
  if (gen_word == kWordUnset) return kSlotUnset;
  if (failed_gen == 0 || failed_gen > gen_word) return ring::kDeviceOk;
  // The kernel stores the code before failed_gen, with a system fence
  // between: a code of 0 here would be a broken record, not a success.
  return rank_error != ring::kDeviceOk ? rank_error : ring::kDeviceAborted;
}

GpuOpState::~GpuOpState() {
  if (status_slot != nullptr) {
    slots->Give(status_slot, event, slot_written_later);  // takes the event
  } else if (event != nullptr) {
    gpuEventDestroy(event);
  }
}

int32_t GpuOpState::Code() const {
  if (captured || status_slot == nullptr) return ring::kDeviceOk;
  if (failed_gen == nullptr) return *reinterpret_cast<volatile const int32_t*>(status_slot);  // the low half
  // Read once the op ran (its event fired): its kernel's stores, the
  // generation at begin and any failure after, have landed. Read earlier
  // (LastOpError), a written generation says nothing of the op's end.
  const uint64_t gen = *reinterpret_cast<volatile const uint64_t*>(status_slot);
  const uint64_t failed = *reinterpret_cast<volatile const uint64_t*>(failed_gen);
  return GenVerdict(gen, failed, *reinterpret_cast<volatile const int32_t*>(rank_error));
}

Status GpuOpState::Verdict() const { return VerdictStatus(Code(), seg, timeout_ns); }

Status WaitFired(gpuEvent_t event, int64_t timeout_ms, const std::string& what_if_not) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  for (uint32_t polls = 0;; ++polls) {
    const gpuError_t e = gpuEventQuery(event);
    if (e == gpuSuccess) return Status::Ok();
    if (e != gpuErrorNotReady) return gpu::GpuErrorStatus(e, "gpuEventQuery", __FILE__, __LINE__);
    if (std::chrono::steady_clock::now() >= deadline) return Status::DeadlineExceeded(what_if_not);
    if (polls > 2000) std::this_thread::sleep_for(std::chrono::microseconds(20));
  }
}

Status GpuOpWait(const GpuOpState& op, int64_t timeout_ms) {
  if (op.captured) {
    return Status::FailedPrecondition(
        "this op was captured into a graph: wait for it with Handle::WaitOn(stream) inside the capture, or "
        "synchronize the stream that launches the graph");
  }
  COLLECTIVED_RETURN_IF_ERROR(
      WaitFired(op.event, timeout_ms, "op not complete after " + std::to_string(timeout_ms) + " ms"));
  return op.Verdict();
}

bool GpuOpTest(const GpuOpState& op, Status* status) {
  if (op.captured) {
    if (status) *status = GpuOpWait(op, 0);
    return true;
  }
  const gpuError_t e = gpuEventQuery(op.event);
  if (e == gpuErrorNotReady) return false;
  if (status) *status = e == gpuSuccess ? op.Verdict() : gpu::GpuErrorStatus(e, "gpuEventQuery", __FILE__, __LINE__);
  return true;
}

Status GpuOpWaitOn(const GpuOpState& op, void* stream) {
  // The event follows the complete kernel on the op's stream, so a stream
  // that waits for it sees the whole op, copy-out included (rule 1).
  COLLECTIVED_GPU_CHECK(gpuStreamWaitEvent(static_cast<gpuStream_t>(stream), op.event, 0));
  return Status::Ok();
}

Status WaitRan(const GpuOpState& op, int64_t timeout_ms, const char* what_if_not) {
  return WaitFired(op.event, timeout_ms, what_if_not);
}

Status WaitForEnqueued(const std::shared_ptr<OpOrder>& order, int device, int64_t timeout_ms, const char* what) {
  std::shared_ptr<GpuOpState> last;
  {
    std::lock_guard<std::mutex> lock(order->mu);
    last = order->last;
  }
  if (!last) return Status::Ok();
  DeviceGuard guard(device);
  return WaitRan(*last, timeout_ms, what);
}

}  // namespace collectived
