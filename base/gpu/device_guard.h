// Makes a GPU device current on this thread for a scope, and restores the
// one before (a library call must not change its caller's current device).
#ifndef COLLECTIVED_BASE_GPU_DEVICE_GUARD_H_
#define COLLECTIVED_BASE_GPU_DEVICE_GUARD_H_

#include "base/gpu/gpu_runtime.h"

namespace collectived::gpu {

class DeviceGuard {
 public:
  explicit DeviceGuard(int ordinal) {
    if (gpuGetDevice(&previous_) == gpuSuccess && previous_ != ordinal && gpuSetDevice(ordinal) == gpuSuccess) {
      restore_ = true;
    }
  }
  ~DeviceGuard() {
    if (restore_) (void)gpuSetDevice(previous_);
  }
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;

 private:
  int previous_ = 0;
  bool restore_ = false;
};

}  // namespace collectived::gpu

#endif  // COLLECTIVED_BASE_GPU_DEVICE_GUARD_H_
