#include "daemon/gpu_comm_memory.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <filesystem>

#ifdef COLLECTIVED_HAVE_GPU
#include "ipc/cumem_window.h"
#include "ipc/legacy_ipc_window.h"
#include "base/gpu/gpu_check.h"
#include "kernels/device/device_collectives.h"
#include "ring/gpu_control_layout.h"
#endif

namespace collectived::daemon {

#ifdef COLLECTIVED_HAVE_GPU

static_assert(kMaxGpuRanks == ring::kMaxDeviceRanks, "one limit for the daemon and the kernels");

struct GpuCommMemory::Windows {
  std::vector<std::unique_ptr<ipc::GpuWindow>> windows;
  std::vector<std::string> devices;
};

bool CudaBackendAvailable(std::string* why_not) {
  int n = 0;
  const gpuError_t e = gpuGetDeviceCount(&n);
  // A machine with no GPU reports "no device", or, with no GPU driver loaded
  // at all, an "insufficient driver": both mean no GPU, and saying so plainly
  // spares the operator a hunt for a driver version problem.
  const bool no_driver = e == gpuErrorInsufficientDriver && !std::filesystem::exists("/proc/driver/nvidia");
  if ((e == gpuSuccess && n == 0) || e == gpuErrorNoDevice || no_driver) {
    *why_not = "no GPU is visible to this process";
    return false;
  }
  if (e != gpuSuccess) {
    *why_not = std::string("GPU runtime unusable: ") + gpuGetErrorString(e);
    return false;
  }
  return true;
}

Status GpuCommMemory::Create(const std::vector<std::string>& device_uuids, uint64_t slot_bytes, uint64_t heap_bytes,
                             GpuMemoryExport how, uint32_t max_blocks_per_rank,
                             std::map<std::string, GpuDeviceLoad> load, std::unique_ptr<GpuCommMemory>* out) {
  if (device_uuids.empty()) return Status::InvalidArgument("a GPU communicator needs at least one rank");
  auto m = std::unique_ptr<GpuCommMemory>(new GpuCommMemory());
  m->windows_ = std::make_unique<Windows>();
  m->slot_bytes_ = ring::AlignUp(slot_bytes, ring::kHeapAlignment);
  m->heap_bytes_ = ring::AlignUp(heap_bytes, ring::kHeapAlignment);
  m->legacy_ipc_ = how == GpuMemoryExport::kLegacyIpc;
  if (how == GpuMemoryExport::kAuto) {
    for (const std::string& uuid : device_uuids) {
      int ordinal = 0;
      std::string why_not;
      COLLECTIVED_RETURN_IF_ERROR(ipc::GpuOrdinalByUuid(uuid, &ordinal));
      if (!m->legacy_ipc_ && !ipc::CuMemFdExportSupported(ordinal, &why_not)) {
        spdlog::warn("{}: sharing GPU communicator memory by legacy cudaIpc handles", why_not);
        m->legacy_ipc_ = true;
      }
    }
  }
  auto add = [&](const std::string& uuid, uint64_t bytes) -> Status {
    int ordinal = 0;
    COLLECTIVED_RETURN_IF_ERROR(ipc::GpuOrdinalByUuid(uuid, &ordinal));
    if (m->legacy_ipc_) {
      std::unique_ptr<ipc::LegacyIpcWindow> w;
      COLLECTIVED_RETURN_IF_ERROR(ipc::LegacyIpcWindow::Create(ordinal, bytes, &w));
      m->windows_->windows.push_back(std::move(w));
    } else {
      std::unique_ptr<ipc::CuMemWindow> w;
      COLLECTIVED_RETURN_IF_ERROR(ipc::CuMemWindow::Create(ordinal, bytes, &w));
      m->windows_->windows.push_back(std::move(w));
    }
    m->windows_->devices.push_back(uuid);
    return Status::Ok();
  };
  COLLECTIVED_RETURN_IF_ERROR(add(device_uuids[0], ring::GpuControlLayout::kBytes));
  // Flags, counters and the error word start at zero; slots and heaps need not.
  ipc::GpuWindow& control = *m->windows_->windows[0];
  COLLECTIVED_GPU_CHECK(gpuSetDevice(control.ordinal()));
  COLLECTIVED_GPU_CHECK(gpuMemset(control.device_ptr(), 0, control.size()));
  COLLECTIVED_GPU_CHECK(gpuDeviceSynchronize());
  for (const std::string& uuid : device_uuids) {
    COLLECTIVED_RETURN_IF_ERROR(add(uuid, m->slot_bytes_ + m->heap_bytes_));
  }
  for (auto& [uuid, d] : load) {
    int ordinal = 0, sms = 0;
    COLLECTIVED_RETURN_IF_ERROR(ipc::GpuOrdinalByUuid(uuid, &ordinal));
    COLLECTIVED_GPU_CHECK(gpuDeviceGetAttribute(&sms, gpuDevAttrMultiProcessorCount, ordinal));
    d.sms = static_cast<uint32_t>(sms);
  }
  std::vector<GpuDeviceLoad> devices;
  for (const auto& [uuid, d] : load) devices.push_back(d);
  m->blocks_ = GpuBlocksPerRank(devices, device::kResidentBlocksPerSm, max_blocks_per_rank);
  m->crowding_ = GpuCrowding(devices, m->blocks_, device::kResidentBlocksPerSm);
  *out = std::move(m);
  return Status::Ok();
}

GpuCommMemory::~GpuCommMemory() {
  // Nothing this daemon enqueued on the windows may still be in flight when
  // they are unmapped (see SetAbort); errors here change nothing.
  if (windows_ && !windows_->windows.empty() && gpuSetDevice(window_ordinal(0)) == gpuSuccess) {
    (void)gpuStreamSynchronize(nullptr);
  }
}

Status GpuCommMemory::ExportFd(uint32_t w, int* fd) const {
  if (w >= windows_->windows.size()) return Status::NotFound("no such GPU window");
  if (legacy_ipc_) return Status::FailedPrecondition("this communicator's memory is shared by cudaIpc handles, not fds");
  return static_cast<const ipc::CuMemWindow&>(*windows_->windows[w]).ExportFd(fd);
}
const std::string& GpuCommMemory::legacy_handle(uint32_t w) const {
  static const std::string kNone;
  if (!legacy_ipc_ || w >= windows_->windows.size()) return kNone;
  return static_cast<const ipc::LegacyIpcWindow&>(*windows_->windows[w]).handle();
}
uint32_t GpuCommMemory::window_count() const { return static_cast<uint32_t>(windows_->windows.size()); }
uint64_t GpuCommMemory::window_bytes(uint32_t w) const { return windows_->windows[w]->size(); }
const std::string& GpuCommMemory::window_device(uint32_t w) const { return windows_->devices[w]; }
void* GpuCommMemory::window_ptr(uint32_t w) const { return windows_->windows[w]->device_ptr(); }
Status GpuCommMemory::SetAbort() const {
  COLLECTIVED_GPU_CHECK(gpuSetDevice(window_ordinal(0)));
  const uint64_t one = 1;
  COLLECTIVED_GPU_CHECK(
      gpuMemcpy(ring::GpuControlLayout::Abort(window_ptr(0)), &one, sizeof(one), gpuMemcpyHostToDevice));
  // A copy from pageable memory returns once the bytes are staged, before
  // they land. The window may be unmapped right after this returns (the last
  // member left): a write still in flight then faults on the unmapped page
  // (Xid 31, seen on the H200 under heavy time-slicing) and the daemon's
  // whole CUDA context is lost. Wait for it.
  COLLECTIVED_GPU_CHECK(gpuStreamSynchronize(nullptr));
  return Status::Ok();
}

Status GpuCommMemory::ReadCounts(uint32_t world, Counts* out) const {
  COLLECTIVED_GPU_CHECK(gpuSetDevice(window_ordinal(0)));
  void* c = window_ptr(0);
  // The rank words and everything after them, in one copy.
  const uint64_t first = ring::GpuControlLayout::kRankWordsWord;
  std::vector<uint64_t> words(ring::GpuControlLayout::kAbortWord + 1 - first);
  // On a private non-blocking stream: the stall inspector calls this every
  // housekeeping tick under the registry's lock, and a copy on the legacy
  // stream would wait for the daemon's own kernels, which may be waiting for
  // clients that need that lock.
  gpuStream_t stream = nullptr;
  COLLECTIVED_GPU_CHECK(gpuStreamCreateWithFlags(&stream, gpuStreamNonBlocking));
  gpuError_t copied = gpuMemcpyAsync(words.data(), static_cast<uint64_t*>(c) + first, words.size() * 8,
                                     gpuMemcpyDeviceToHost, stream);
  if (copied == gpuSuccess) copied = gpuStreamSynchronize(stream);
  gpuStreamDestroy(stream);
  if (copied != gpuSuccess) return gpu::GpuErrorStatus(copied, "reading a communicator's counts", __FILE__, __LINE__);
  out->posted.resize(world);
  out->completed.resize(world);
  for (uint32_t r = 0; r < world; ++r) {
    const uint64_t at = (ring::GpuControlLayout::Counter(c, r) - static_cast<uint64_t*>(c)) - first;
    out->posted[r] = words[at];
    // Done, or the client library's block words (single-launch ops).
    out->completed[r] = ring::CompletedOps(words[(ring::GpuControlLayout::Done(c, r) - static_cast<uint64_t*>(c)) - first],
                                           &words[(ring::GpuControlLayout::BlockDone(c, r) - static_cast<uint64_t*>(c)) - first],
                                           blocks());
  }
  out->error = static_cast<int32_t>(words[ring::GpuControlLayout::kErrorWord - first] & 0xffffffffu);
  out->abort = words[ring::GpuControlLayout::kAbortWord - first];
  return Status::Ok();
}

Status GpuCommMemory::ReadAbort(uint64_t* out) const {
  COLLECTIVED_GPU_CHECK(gpuSetDevice(window_ordinal(0)));
  COLLECTIVED_GPU_CHECK(
      gpuMemcpy(out, ring::GpuControlLayout::Abort(window_ptr(0)), sizeof(*out), gpuMemcpyDeviceToHost));
  return Status::Ok();
}

bool GpuCommMemory::single_device() const {
  for (const auto& d : windows_->devices) {
    if (d != windows_->devices[0]) return false;
  }
  return true;
}
int GpuCommMemory::window_ordinal(uint32_t w) const { return windows_->windows[w]->ordinal(); }

#else  // no GPU backend at build time

struct GpuCommMemory::Windows {};

bool CudaBackendAvailable(std::string* why_not) {
  *why_not = "this collectived was built without the CUDA toolkit";
  return false;
}

Status GpuCommMemory::Create(const std::vector<std::string>&, uint64_t, uint64_t, GpuMemoryExport, uint32_t,
                             std::map<std::string, GpuDeviceLoad>, std::unique_ptr<GpuCommMemory>*) {
  return Status::FailedPrecondition("this collectived was built without the CUDA backend");
}
GpuCommMemory::~GpuCommMemory() = default;
Status GpuCommMemory::ExportFd(uint32_t, int*) const { return Status::FailedPrecondition("no CUDA backend"); }
const std::string& GpuCommMemory::legacy_handle(uint32_t) const {
  static const std::string kNone;
  return kNone;
}
uint32_t GpuCommMemory::window_count() const { return 0; }
uint64_t GpuCommMemory::window_bytes(uint32_t) const { return 0; }
const std::string& GpuCommMemory::window_device(uint32_t) const {
  static const std::string kNone;
  return kNone;
}
void* GpuCommMemory::window_ptr(uint32_t) const { return nullptr; }
bool GpuCommMemory::single_device() const { return true; }
Status GpuCommMemory::SetAbort() const { return Status::FailedPrecondition("no CUDA backend"); }
Status GpuCommMemory::ReadCounts(uint32_t, Counts*) const { return Status::FailedPrecondition("no CUDA backend"); }
Status GpuCommMemory::ReadAbort(uint64_t*) const { return Status::FailedPrecondition("no CUDA backend"); }
int GpuCommMemory::window_ordinal(uint32_t) const { return -1; }

#endif

}  // namespace collectived::daemon
