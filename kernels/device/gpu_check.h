// NCCL-style checks: a failing GPU runtime call becomes a Status with one log
// line naming the call, the error and the place.
#ifndef COLLECTIVED_KERNELS_DEVICE_GPU_CHECK_H_
#define COLLECTIVED_KERNELS_DEVICE_GPU_CHECK_H_

#include <cstdio>
#include <string>

#include "collectived/status.h"
#include "kernels/device/gpu_runtime.h"

namespace collectived::device {

inline Status GpuErrorStatus(gpuError_t err, const char* call, const char* file, int line) {
  std::string msg = std::string(call) + " failed: " + gpuGetErrorString(err) + " (" + file + ":" +
                    std::to_string(line) + ")";
  std::fprintf(stderr, "collectived: %s\n", msg.c_str());
  return Status::Internal(msg);
}

}  // namespace collectived::device

#define COLLECTIVED_GPU_CHECK(call)                                                        \
  do {                                                                                     \
    gpuError_t _collectived_err = (call);                                                  \
    if (_collectived_err != gpuSuccess) {                                                  \
      return ::collectived::device::GpuErrorStatus(_collectived_err, #call, __FILE__, __LINE__); \
    }                                                                                      \
  } while (0)

#endif  // COLLECTIVED_KERNELS_DEVICE_GPU_CHECK_H_
