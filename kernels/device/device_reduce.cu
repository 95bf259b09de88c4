#include "kernels/device/device_reduce.h"

#include <string>

#include "base/gpu/gpu_check.h"
#include "kernels/device/reduce_ops.cuh"

namespace collectived::device {
namespace {

constexpr uint32_t kThreads = 512;

// Owner blockIdx.y reduces its `world` slots of the scratch.
template <typename T, ReduceOp kOp>
__global__ void ReduceSlotsKernel(ReduceSlotsArgs a) {
  const uint32_t r = blockIdx.y;
  const T* base = static_cast<const T*>(a.scratch) + static_cast<uint64_t>(r) * a.world * a.chunk;
  const void* in[kMaxReduceOwners];
  for (uint32_t k = 0; k < a.world; ++k) in[k] = base + k * a.chunk;
  T* out = static_cast<T*>(a.outputs[r]);
  const uint64_t stride = static_cast<uint64_t>(gridDim.x) * blockDim.x;
  for (uint64_t j = static_cast<uint64_t>(blockIdx.x) * blockDim.x + threadIdx.x; j < a.counts[r]; j += stride) {
    out[j] = ReduceOne<T, kOp>(in, a.world, j);
  }
}

// Blocks for `count` elements, at most `max_blocks`, at least one.
uint32_t GridFor(uint64_t count, uint64_t max_blocks) {
  const uint64_t want = (count + kThreads - 1) / kThreads;
  return static_cast<uint32_t>(want == 0 ? 1 : (want < max_blocks ? want : max_blocks));
}

Status CheckReduction(DataType dtype, ReduceOp op) {
  if (!IsValidReduction(dtype, op)) {
    return Status::InvalidArgument(std::string("reduction ") + ReduceOpName(op) + " is not allowed on " +
                                   DataTypeName(dtype));
  }
  return Status::Ok();
}

}  // namespace

Status LaunchReduceSlots(DataType dtype, ReduceOp op, const ReduceSlotsArgs& args, gpuStream_t stream,
                         uint32_t max_blocks) {
  COLLECTIVED_RETURN_IF_ERROR(CheckReduction(dtype, op));
  if (args.world == 0 || args.world > kMaxReduceOwners || max_blocks == 0 || args.scratch == nullptr) {
    return Status::InvalidArgument("reduce slots: need 1 to " + std::to_string(kMaxReduceOwners) +
                                   " owners, a scratch area and at least one block");
  }
  uint64_t most = 0;
  for (uint32_t r = 0; r < args.world; ++r) {
    if (args.counts[r] > args.chunk) return Status::InvalidArgument("reduce slots: a count exceeds the slot");
    most = args.counts[r] > most ? args.counts[r] : most;
  }
  // The owners share the GPU: max_blocks in all, at least one per owner.
  const uint32_t per_owner = max_blocks / args.world > 0 ? max_blocks / args.world : 1;
  const dim3 grid(GridFor(most, per_owner), args.world);
  DispatchReduction(dtype, op, [&]<typename T, ReduceOp kOp>() {
    ReduceSlotsKernel<T, kOp><<<grid, kThreads, 0, stream>>>(args);
  });
  COLLECTIVED_GPU_CHECK(gpuGetLastError());
  return Status::Ok();
}

Status PreloadReduceKernels() {
  for (DataType dt : {DataType::kFloat32, DataType::kFloat64, DataType::kFloat16, DataType::kBFloat16,
                      DataType::kInt32, DataType::kInt64, DataType::kUint32}) {
    for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kProd, ReduceOp::kMin, ReduceOp::kMax, ReduceOp::kAvg}) {
      if (!IsValidReduction(dt, op)) continue;
      COLLECTIVED_RETURN_IF_ERROR(DispatchReduction(dt, op, []<typename T, ReduceOp kOp>() -> Status {
        return gpu::PreloadKernel(ReduceSlotsKernel<T, kOp>);
      }));
    }
  }
  return Status::Ok();
}

}  // namespace collectived::device
