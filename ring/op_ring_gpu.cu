#include "ring/op_ring_gpu.h"

#include "base/gpu/gpu_check.h"
#include "ring/op_ring_device.cuh"

namespace collectived::ring {
namespace {

__global__ void PostKernel(uint64_t* counter, uint64_t* op_index, uint64_t* posted_mirror, uint64_t* trace) {
  if (threadIdx.x == 0 && blockIdx.x == 0) {
    const uint64_t index = atomicAdd(reinterpret_cast<unsigned long long*>(counter), 1ull);
    *op_index = index;
    if (trace != nullptr) {
      uint64_t* e = TraceEntry(trace, index + 1);
      for (uint64_t w = 0; w < kTraceEntryWords - 1; ++w) e[w] = 0;
      e[3] = index + 1;  // whose entry this is: entries are reused every kTraceDepth ops
    }
    __threadfence_system();
    if (posted_mirror != nullptr) StoreRelease(posted_mirror, index + 1);
  }
}

__global__ void CompleteKernel(const uint64_t* op_index, uint64_t* done, uint64_t* completed_mirror,
                               const int32_t* error_word, int32_t* status_mirror, uint64_t* trace) {
  if (threadIdx.x == 0 && blockIdx.x == 0) {
    __threadfence_system();
    const uint64_t gen = *op_index + 1;
    if (trace != nullptr) {
      ClearNextTraceEntry(trace, gen);  // the next op may be a single launch
      uint64_t* e = TraceEntry(trace, gen);
      e[2] = NowNs();
      __threadfence();
      StoreRelease(e, gen);
    }
    // The verdict first, so a host that sees the new count also sees it.
    if (status_mirror != nullptr) *static_cast<volatile int32_t*>(status_mirror) = *static_cast<const volatile int32_t*>(error_word);
    StoreRelease(done, gen);
    if (completed_mirror != nullptr) StoreRelease(completed_mirror, gen);
  }
}

__global__ void WaitKernel(const uint64_t* op_index, const uint64_t* done, uint64_t* abort_word, int32_t* error_word,
                           uint64_t timeout_ns, int32_t* rank_error) {
  if (threadIdx.x == 0 && blockIdx.x == 0) {
    DeviceOpArgs a;
    a.abort_word = abort_word;
    a.error_word = error_word;
    a.rank_error = rank_error;
    a.timeout_ns = timeout_ns;
    // The daemon publishes `done` for ops that succeeded only (a failed one
    // aborts the communicator), so only this wait's own failure is recorded.
    SpinAtLeast(a, done, *op_index + 1);
  }
}

__global__ void RingPostKernel(RingPostArgs r) {
  if (threadIdx.x != 0 || blockIdx.x != 0) return;
  const uint64_t index = atomicAdd(reinterpret_cast<unsigned long long*>(r.counter), 1ull);
  *r.op_index = index;
  DeviceOpArgs a;
  a.abort_word = r.abort_word;
  a.error_word = r.error_word;
  a.timeout_ns = r.timeout_ns;
  // The slot is free once the daemon finished the op that used it last.
  if (index >= r.depth && !SpinAtLeast(a, r.completed, index + 1 - r.depth)) return;
  uint8_t* slot = r.ring + (index % r.depth) * r.slot.slot_bytes;
  volatile uint64_t* desc = reinterpret_cast<volatile uint64_t*>(slot + r.slot.desc_offset);
  for (uint32_t w = 0; w < r.slot.desc_words; ++w) desc[w] = r.desc[w];
  __threadfence_system();
  StoreRelease(reinterpret_cast<uint64_t*>(slot), index + 1);
  if (r.posted_mirror != nullptr) StoreRelease(r.posted_mirror, index + 1);
}

__global__ void PublishKernel(PublishArgs p) {
  if (blockIdx.x != 0 || threadIdx.x >= p.n) return;
  __threadfence_system();
  StoreRelease(p.words[threadIdx.x], p.value);
}

}  // namespace

Status PreloadOpRingKernels() {
  COLLECTIVED_RETURN_IF_ERROR(gpu::PreloadKernel(PostKernel));
  COLLECTIVED_RETURN_IF_ERROR(gpu::PreloadKernel(CompleteKernel));
  COLLECTIVED_RETURN_IF_ERROR(gpu::PreloadKernel(WaitKernel));
  COLLECTIVED_RETURN_IF_ERROR(gpu::PreloadKernel(RingPostKernel));
  return gpu::PreloadKernel(PublishKernel);
}

Status LaunchPost(uint64_t* counter, uint64_t* op_index, gpuStream_t stream, uint64_t* posted_mirror,
                  uint64_t* trace) {
  PostKernel<<<1, 32, 0, stream>>>(counter, op_index, posted_mirror, trace);
  COLLECTIVED_GPU_CHECK(gpuGetLastError());
  return Status::Ok();
}

Status LaunchComplete(const uint64_t* op_index, uint64_t* done_word, gpuStream_t stream, uint64_t* completed_mirror,
                      const int32_t* error_word, int32_t* status_mirror, uint64_t* trace) {
  if ((error_word == nullptr) != (status_mirror == nullptr)) {
    return Status::InvalidArgument("a status mirror needs the error word, and the other way round");
  }
  CompleteKernel<<<1, 32, 0, stream>>>(op_index, done_word, completed_mirror, error_word, status_mirror, trace);
  COLLECTIVED_GPU_CHECK(gpuGetLastError());
  return Status::Ok();
}

Status LaunchWait(const uint64_t* op_index, const uint64_t* done_word, uint64_t* abort_word, int32_t* error_word,
                  uint64_t timeout_ns, gpuStream_t stream, int32_t* rank_error) {
  if (timeout_ns == 0) return Status::InvalidArgument("a wait needs a timeout");
  WaitKernel<<<1, 32, 0, stream>>>(op_index, done_word, abort_word, error_word, timeout_ns, rank_error);
  COLLECTIVED_GPU_CHECK(gpuGetLastError());
  return Status::Ok();
}

Status LaunchRingPost(const RingPostArgs& args, gpuStream_t stream) {
  if (args.counter == nullptr || args.op_index == nullptr || args.ring == nullptr || args.completed == nullptr ||
      args.abort_word == nullptr || args.error_word == nullptr || args.depth == 0 || args.timeout_ns == 0 ||
      args.slot.desc_words > kRingDescriptorWords || args.slot.slot_bytes == 0) {
    return Status::InvalidArgument("ring post needs counter, index, ring, completed, abort/error words, a depth "
                                   "and a timeout");
  }
  RingPostKernel<<<1, 32, 0, stream>>>(args);
  COLLECTIVED_GPU_CHECK(gpuGetLastError());
  return Status::Ok();
}

Status LaunchPublish(const PublishArgs& args, gpuStream_t stream) {
  if (args.n == 0 || args.n > kMaxPublishWords) return Status::InvalidArgument("publish: 1..64 words");
  PublishKernel<<<1, kMaxPublishWords, 0, stream>>>(args);
  COLLECTIVED_GPU_CHECK(gpuGetLastError());
  return Status::Ok();
}

}  // namespace collectived::ring
