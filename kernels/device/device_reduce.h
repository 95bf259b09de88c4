// The copy-engine all-reduce's reduction step on the GPU. Same arithmetic
// contract as host::ReduceElements and the collective kernels (reduce_ops.cuh:
// rank order, float accumulation for 16-bit types, wrapping integers,
// avg = sum / n), so host and device give the same bits.
#ifndef COLLECTIVED_KERNELS_DEVICE_DEVICE_REDUCE_H_
#define COLLECTIVED_KERNELS_DEVICE_DEVICE_REDUCE_H_

#include <cstdint>

#include "collectived/status.h"
#include "collectived/types.h"
#include "base/gpu/gpu_runtime.h"

namespace collectived::device {

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
