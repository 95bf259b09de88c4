#include "ipc/legacy_ipc_window.h"

#include <cuda_runtime.h>

#include <cstring>

#include "kernels/device/gpu_check.h"

namespace collectived::ipc {

// Makes `ordinal` current for a scope (the runtime's IPC calls act on it).
class CurrentDevice {
 public:
  explicit CurrentDevice(int ordinal) {
    if (cudaGetDevice(&previous_) == cudaSuccess && previous_ != ordinal && cudaSetDevice(ordinal) == cudaSuccess) {
      restore_ = true;
    }
  }
  ~CurrentDevice() {
    if (restore_) cudaSetDevice(previous_);
  }

 private:
  int previous_ = 0;
  bool restore_ = false;
};

Status LegacyIpcWindow::Create(int ordinal, uint64_t bytes, std::unique_ptr<LegacyIpcWindow>* out) {
  if (bytes == 0) return Status::InvalidArgument("window of 0 bytes");
  CurrentDevice device(ordinal);
  std::unique_ptr<LegacyIpcWindow> w(new LegacyIpcWindow());
  w->ordinal_ = ordinal;
  w->size_ = bytes;
  COLLECTIVED_GPU_CHECK(cudaMalloc(&w->ptr_, bytes));
  cudaIpcMemHandle_t h;
  COLLECTIVED_GPU_CHECK(cudaIpcGetMemHandle(&h, w->ptr_));
  w->handle_.assign(reinterpret_cast<const char*>(&h), sizeof(h));
  *out = std::move(w);
  return Status::Ok();
}

Status LegacyIpcWindow::Open(const std::string& handle, int ordinal, uint64_t bytes,
                             std::unique_ptr<LegacyIpcWindow>* out) {
  cudaIpcMemHandle_t h;
  if (handle.size() != sizeof(h)) {
    return Status::InvalidArgument("a cudaIpc handle has " + std::to_string(sizeof(h)) + " bytes, not " +
                                   std::to_string(handle.size()));
  }
  std::memcpy(&h, handle.data(), sizeof(h));
  CurrentDevice device(ordinal);
  std::unique_ptr<LegacyIpcWindow> w(new LegacyIpcWindow());
  w->ordinal_ = ordinal;
  w->size_ = bytes;
  // Lazy peer access: a window on another GPU is reached over NVLink.
  COLLECTIVED_GPU_CHECK(cudaIpcOpenMemHandle(&w->ptr_, h, cudaIpcMemLazyEnablePeerAccess));
  w->opened_ = true;
  w->handle_ = handle;
  *out = std::move(w);
  return Status::Ok();
}

LegacyIpcWindow::~LegacyIpcWindow() {
  if (ptr_ == nullptr) return;
  CurrentDevice device(ordinal_);
  if (opened_) {
    cudaIpcCloseMemHandle(ptr_);
  } else {
    cudaFree(ptr_);
  }
}

}  // namespace collectived::ipc
