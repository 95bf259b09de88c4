// A host-to-device copy that work on any stream sees. gpuMemcpy from pageable
// memory may return once the bytes are staged, before its DMA lands (the CUDA
// runtime's documented synchronization behaviour), and a non-blocking stream's
// next op (a rank's copy-in, a kernel) is not ordered after the legacy stream's
// copy: it could read what the buffer held before. daemon/gpu_comm_memory.cc
// (SetAbort) waits the same way.
#ifndef COLLECTIVED_TESTS_SUPPORT_GPU_UPLOAD_H_
#define COLLECTIVED_TESTS_SUPPORT_GPU_UPLOAD_H_

#include <cstddef>

#include "base/gpu/gpu_check.h"

namespace collectived::testing {

// REQUIRES: `dst` device memory of at least `bytes`. Returns once the bytes are there.
inline Status UploadToDevice(void* dst, const void* src, size_t bytes) {
  COLLECTIVED_GPU_CHECK(gpuMemcpy(dst, src, bytes, gpuMemcpyHostToDevice));
  COLLECTIVED_GPU_CHECK(gpuStreamSynchronize(nullptr));  // the legacy stream, where the copy ran
  return Status::Ok();
}

}  // namespace collectived::testing

#endif  // COLLECTIVED_TESTS_SUPPORT_GPU_UPLOAD_H_
