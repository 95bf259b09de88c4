// NCCL-style checks: a failing GPU runtime call becomes a Status naming the
// call, the error and the place. Library code returns it; it never prints
// (the daemon logs what it is handed, a client decides for itself).
#ifndef COLLECTIVED_BASE_GPU_GPU_CHECK_H_
#define COLLECTIVED_BASE_GPU_GPU_CHECK_H_

#include <string>

#include "base/gpu/gpu_runtime.h"
#include "collectived/status.h"

namespace collectived::gpu {

inline Status GpuErrorStatus(gpuError_t err, const char* call, const char* file, int line) {
  std::string msg = std::string(call) + " failed: " + gpuGetErrorString(err) + " (" + file + ":" +
                    std::to_string(line) + ")";
  return Status::Internal(msg);
}

}  // namespace collectived::gpu

#define COLLECTIVED_GPU_CHECK(call)                                                     \
  do {                                                                                  \
    gpuError_t _collectived_err = (call);                                               \
    if (_collectived_err != gpuSuccess) {                                               \
      return ::collectived::gpu::GpuErrorStatus(_collectived_err, #call, __FILE__, __LINE__); \
    }                                                                                   \
  } while (0)

namespace collectived::gpu {

// Loads `kernel`'s module now. With lazy module loading (the CUDA default) a
// kernel's first launch loads it, and that can block the host until running
// kernels finish: a rank spinning in a barrier for a peer whose launch is
// blocked never finishes. Launchers of spinning kernels preload them.
template <typename Kernel>
Status PreloadKernel(Kernel kernel) {
  gpuFuncAttributes attr;
  COLLECTIVED_GPU_CHECK(gpuFuncGetAttributes(&attr, reinterpret_cast<const void*>(kernel)));
  return Status::Ok();
}

}  // namespace collectived::gpu

#endif  // COLLECTIVED_BASE_GPU_GPU_CHECK_H_
