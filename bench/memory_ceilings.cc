#include "bench/memory_ceilings.h"

#include "base/gpu/gpu_check.h"
#include "base/gpu/gpu_runtime.h"

namespace collectived::bench {
namespace {

// Seconds per call of `op` (enqueued on `stream`), over `iters` calls.
template <typename Op>
Status Seconds(gpuStream_t stream, int iters, int warmup, Op op, double* out) {
  for (int i = 0; i < warmup; ++i) COLLECTIVED_RETURN_IF_ERROR(op());
  gpuEvent_t start = nullptr, stop = nullptr;
  COLLECTIVED_GPU_CHECK(gpuEventCreate(&start));
  COLLECTIVED_GPU_CHECK(gpuEventCreate(&stop));
  Status s = [&]() -> Status {
    COLLECTIVED_GPU_CHECK(gpuEventRecord(start, stream));
    for (int i = 0; i < iters; ++i) COLLECTIVED_RETURN_IF_ERROR(op());
    COLLECTIVED_GPU_CHECK(gpuEventRecord(stop, stream));
    COLLECTIVED_GPU_CHECK(gpuEventSynchronize(stop));
    float ms = 0;
    COLLECTIVED_GPU_CHECK(gpuEventElapsedTime(&ms, start, stop));
    *out = ms / 1e3 / iters;
    return Status::Ok();
  }();
  gpuEventDestroy(start);
  gpuEventDestroy(stop);
  return s;
}

}  // namespace

Status MeasureMemoryCeilings(uint64_t bytes, int iters, int warmup, MemoryCeilings* out) {
  if (bytes == 0 || iters <= 0) return Status::InvalidArgument("bytes and iters must be positive");
  void* a = nullptr;
  void* b = nullptr;
  gpuStream_t stream = nullptr;
  COLLECTIVED_GPU_CHECK(gpuMalloc(&a, bytes));
  Status s = [&]() -> Status {
    COLLECTIVED_GPU_CHECK(gpuMalloc(&b, bytes));
    COLLECTIVED_GPU_CHECK(gpuStreamCreate(&stream));
    COLLECTIVED_GPU_CHECK(gpuMemsetAsync(a, 1, bytes, stream));  // a source that is not all zeros
    double copy_s = 0, memset_s = 0;
    COLLECTIVED_RETURN_IF_ERROR(Seconds(stream, iters, warmup, [&]() -> Status {
      COLLECTIVED_GPU_CHECK(gpuMemcpyAsync(b, a, bytes, gpuMemcpyDeviceToDevice, stream));
      return Status::Ok();
    }, &copy_s));
    COLLECTIVED_RETURN_IF_ERROR(Seconds(stream, iters, warmup, [&]() -> Status {
      COLLECTIVED_GPU_CHECK(gpuMemsetAsync(b, 0x5a, bytes, stream));
      return Status::Ok();
    }, &memset_s));
    out->copy_gbs = 2.0 * bytes / copy_s / 1e9;
    out->memset_gbs = bytes / memset_s / 1e9;
    return Status::Ok();
  }();
  if (stream != nullptr) gpuStreamDestroy(stream);
  if (b != nullptr) gpuFree(b);
  gpuFree(a);
  return s;
}

}  // namespace collectived::bench
