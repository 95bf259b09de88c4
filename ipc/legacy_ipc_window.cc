#include "ipc/legacy_ipc_window.h"

#include <cstring>
#include <map>
#include <mutex>
#include <utility>

#include "base/gpu/device_guard.h"
#include "base/gpu/gpu_check.h"
#include "base/gpu/gpu_runtime.h"

namespace collectived::ipc {

// One open per (handle, device) in this process: gpuIpcOpenMemHandle of a
// handle that is already open in the context fails ("resource already
// mapped", seen on the H200 when several ranks of one process opened the
// daemon's windows at once). Opens and closes are counted under one lock.
struct OpenHandles {
  struct Entry {
    void* ptr = nullptr;
    uint32_t refs = 0;
  };
  std::mutex mu;
  std::map<std::pair<std::string, int>, Entry> open;
};
OpenHandles& Opened() {
  static auto* handles = new OpenHandles;  // never destroyed: closes may run during static destruction
  return *handles;
}

Status LegacyIpcWindow::Create(int ordinal, uint64_t bytes, std::unique_ptr<LegacyIpcWindow>* out) {
  if (bytes == 0) return Status::InvalidArgument("window of 0 bytes");
  gpu::DeviceGuard guard(ordinal);
  std::unique_ptr<LegacyIpcWindow> w(new LegacyIpcWindow());
  w->ordinal_ = ordinal;
  w->size_ = bytes;
  COLLECTIVED_GPU_CHECK(gpuMalloc(&w->ptr_, bytes));
  gpuIpcMemHandle_t h;
  COLLECTIVED_GPU_CHECK(gpuIpcGetMemHandle(&h, w->ptr_));
  w->handle_.assign(reinterpret_cast<const char*>(&h), sizeof(h));
  *out = std::move(w);
  return Status::Ok();
}

Status LegacyIpcWindow::Open(const std::string& handle, int ordinal, uint64_t bytes,
                             std::unique_ptr<LegacyIpcWindow>* out) {
  gpuIpcMemHandle_t h;
  if (handle.size() != sizeof(h)) {
    return Status::InvalidArgument("a " COLLECTIVED_GPU_IPC_NAME " handle has " + std::to_string(sizeof(h)) +
                                   " bytes, not " + std::to_string(handle.size()));
  }
  std::memcpy(&h, handle.data(), sizeof(h));
  gpu::DeviceGuard guard(ordinal);
  std::unique_ptr<LegacyIpcWindow> w(new LegacyIpcWindow());
  w->ordinal_ = ordinal;
  w->size_ = bytes;
  OpenHandles& handles = Opened();
  std::lock_guard<std::mutex> lock(handles.mu);
  OpenHandles::Entry& e = handles.open[{handle, ordinal}];
  if (e.refs == 0) {
    // Lazy peer access: a window on another GPU is reached over NVLink.
    const gpuError_t err = gpuIpcOpenMemHandle(&e.ptr, h, gpuIpcMemLazyEnablePeerAccess);
    if (err != gpuSuccess) {
      handles.open.erase({handle, ordinal});
      return gpu::GpuErrorStatus(err, COLLECTIVED_GPU_IPC_NAME "OpenMemHandle", __FILE__, __LINE__);
    }
  }
  ++e.refs;
  w->ptr_ = e.ptr;
  w->opened_ = true;
  w->handle_ = handle;
  *out = std::move(w);
  return Status::Ok();
}

LegacyIpcWindow::~LegacyIpcWindow() {
  if (ptr_ == nullptr) return;
  gpu::DeviceGuard guard(ordinal_);
  if (!opened_) {
    (void)gpuFree(ptr_);
    return;
  }
  OpenHandles& handles = Opened();
  std::lock_guard<std::mutex> lock(handles.mu);
  auto it = handles.open.find({handle_, ordinal_});
  if (it != handles.open.end() && --it->second.refs == 0) {
    (void)gpuIpcCloseMemHandle(ptr_);
    handles.open.erase(it);
  }
}

}  // namespace collectived::ipc
