// Element-wise reduction across ranks' buffers on the GPU: the arithmetic core
// of the one-shot and two-shot kernels. Same contract as
// host::ReduceElements (rank order, float accumulation for 16-bit types,
// wrapping integers, avg = sum / n), so host and device give the same bits.
#ifndef COLLECTIVED_KERNELS_DEVICE_DEVICE_REDUCE_H_
#define COLLECTIVED_KERNELS_DEVICE_DEVICE_REDUCE_H_

#include <cstdint>

#include "collectived/status.h"
#include "collectived/types.h"
#include "base/gpu/gpu_runtime.h"

namespace collectived::device {

// out[j] = in[0][j] op ... op in[n-1][j], j < count, on `stream`.
// `in_ptrs` is a device array of n device pointers. At most `max_blocks` blocks.
// INVALID_ARGUMENT for a dtype/op pair that is not allowed; INTERNAL (with
// one log line) if the launch fails.
Status LaunchReduce(DataType dtype, ReduceOp op, void* out, const void* const* in_ptrs, uint32_t n, uint64_t count,
                    gpuStream_t stream, uint32_t max_blocks = 132);

// The SM step of the copy-engine all-reduce: the copy engines have gathered,
// for each owner r < world, part r of every rank's input into the `world`
// slots of r in `scratch` (slot (r, k) starts at element (r * world + k) *
// chunk). outputs[r][j] = slot (r, 0)[j] op ... op slot (r, world - 1)[j] for
// j < counts[r], one launch for every owner. An output may be one of its own
// owner's slots (each element is read before it is written).
constexpr uint32_t kMaxReduceOwners = 16;
struct ReduceSlotsArgs {
  const void* scratch = nullptr;
  uint32_t world = 0;
  uint64_t chunk = 0;
  void* outputs[kMaxReduceOwners] = {};
  uint64_t counts[kMaxReduceOwners] = {};
};
Status LaunchReduceSlots(DataType dtype, ReduceOp op, const ReduceSlotsArgs& args, gpuStream_t stream,
                         uint32_t max_blocks = 132);

// Loads this file's kernels now (the first launch of a lazily loaded module
// may block the host), like PreloadKernels, which calls it.
Status PreloadReduceKernels();

}  // namespace collectived::device

#endif  // COLLECTIVED_KERNELS_DEVICE_DEVICE_REDUCE_H_
