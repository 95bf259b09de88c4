// GPU memory shared between processes, however it was exported: a cuMem
// allocation passed as a POSIX fd (CuMemWindow, the default), or a legacy
// cudaIpc handle (LegacyIpcWindow, where the driver cannot export cuMem
// memory). Users only need its address and size.
#ifndef COLLECTIVED_IPC_GPU_WINDOW_H_
#define COLLECTIVED_IPC_GPU_WINDOW_H_

#include <cstdint>

namespace collectived::ipc {

class GpuWindow {
 public:
  virtual ~GpuWindow() = default;
  virtual void* device_ptr() const = 0;
  virtual uint64_t size() const = 0;
  virtual int ordinal() const = 0;
};

}  // namespace collectived::ipc

#endif  // COLLECTIVED_IPC_GPU_WINDOW_H_
