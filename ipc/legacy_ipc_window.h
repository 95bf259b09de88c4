// The fallback where cuMem memory cannot be exported as an fd (the device or
// driver lacks it, or the daemon is told so): cudaMalloc memory shared by a
// 64-byte cudaIpc handle, which travels in the gRPC reply. Unlike a cuMem
// fd, the handle does not keep the memory alive: the exporter must keep the
// allocation until every importer closed it (freeing it first is undefined
// behaviour), so the daemon holds it until every member session has ended.
// A process opens each handle once (a second cudaIpcOpenMemHandle of an open
// handle fails): windows of one handle share that mapping, counted, and the
// last one closes it.
#ifndef COLLECTIVED_IPC_LEGACY_IPC_WINDOW_H_
#define COLLECTIVED_IPC_LEGACY_IPC_WINDOW_H_

#include <cstdint>
#include <memory>
#include <string>

#include "collectived/status.h"
#include "ipc/gpu_window.h"

namespace collectived::ipc {

class LegacyIpcWindow : public GpuWindow {
 public:
  // cudaMalloc's at least `bytes` on device `ordinal`.
  static Status Create(int ordinal, uint64_t bytes, std::unique_ptr<LegacyIpcWindow>* out);
  // Opens `handle` (from Handle() of another process) on device `ordinal`.
  static Status Open(const std::string& handle, int ordinal, uint64_t bytes, std::unique_ptr<LegacyIpcWindow>* out);
  ~LegacyIpcWindow() override;
  LegacyIpcWindow(const LegacyIpcWindow&) = delete;
  LegacyIpcWindow& operator=(const LegacyIpcWindow&) = delete;

  // The cudaIpcMemHandle_t bytes of an allocation this process made.
  const std::string& handle() const { return handle_; }
  void* device_ptr() const override { return ptr_; }
  uint64_t size() const override { return size_; }
  int ordinal() const override { return ordinal_; }

 private:
  LegacyIpcWindow() = default;
  int ordinal_ = 0;
  uint64_t size_ = 0;
  void* ptr_ = nullptr;
  bool opened_ = false;  // imported (close the handle), or allocated here (free it)
  std::string handle_;
};

}  // namespace collectived::ipc

#endif  // COLLECTIVED_IPC_LEGACY_IPC_WINDOW_H_
