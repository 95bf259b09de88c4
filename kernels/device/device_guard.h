// Makes a GPU device current on this thread for a scope, and restores the
// one before (a library call must not change its caller's current device).
#ifndef COLLECTIVED_KERNELS_DEVICE_DEVICE_GUARD_H_
#define COLLECTIVED_KERNELS_DEVICE_DEVICE_GUARD_H_

#include "kernels/device/gpu_runtime.h"

namespace collectived::device {

class DeviceGuard {
 public:
  explicit DeviceGuard(int ordinal) {
    if (gpuGetDevice(&previous_) == gpuSuccess && previous_ != ordinal && gpuSetDevice(ordinal) == gpuSuccess) {
      restore_ = true;
    }
  }
  ~DeviceGuard() {
    if (restore_) gpuSetDevice(previous_);
  }
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;

 private:
  int previous_ = 0;
  bool restore_ = false;
};

}  // namespace collectived::device

#endif  // COLLECTIVED_KERNELS_DEVICE_DEVICE_GUARD_H_
