#include "kernels/device/device_reduce.h"

#include <string>
#include <type_traits>

#include "kernels/device/gpu_check.h"
#include "kernels/device/reduce_ops.cuh"

namespace collectived::device {
namespace {

template <typename T, ReduceOp kOp>
__global__ void ReduceKernel(T* __restrict__ out, const void* const* __restrict__ in, uint32_t n, uint64_t count) {
  const uint64_t stride = static_cast<uint64_t>(gridDim.x) * blockDim.x;
  for (uint64_t j = static_cast<uint64_t>(blockIdx.x) * blockDim.x + threadIdx.x; j < count; j += stride) {
    out[j] = ReduceOne<T, kOp>(in, n, j);
  }
}

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

// Runs `launch.template operator()<kOp>()` for the runtime `op`: one switch
// for every reduction kernel of this file.
template <typename T, typename Launch>
void DispatchOp(ReduceOp op, Launch&& launch) {
  switch (op) {
    case ReduceOp::kSum: launch.template operator()<ReduceOp::kSum>(); break;
    case ReduceOp::kProd: launch.template operator()<ReduceOp::kProd>(); break;
    case ReduceOp::kMin: launch.template operator()<ReduceOp::kMin>(); break;
    case ReduceOp::kMax: launch.template operator()<ReduceOp::kMax>(); break;
    case ReduceOp::kAvg:
      if constexpr (!std::is_integral_v<T>) launch.template operator()<ReduceOp::kAvg>();
      break;
    default: break;
  }
}

template <typename T>
Status LaunchTyped(ReduceOp op, void* out, const void* const* in, uint32_t n, uint64_t count, gpuStream_t stream,
                   uint32_t max_blocks) {
  constexpr uint32_t kThreads = 512;
  const uint64_t want = (count + kThreads - 1) / kThreads;
  const uint32_t blocks = static_cast<uint32_t>(want < max_blocks ? (want == 0 ? 1 : want) : max_blocks);
  T* o = static_cast<T*>(out);
  DispatchOp<T>(op, [&]<ReduceOp kOp>() { ReduceKernel<T, kOp><<<blocks, kThreads, 0, stream>>>(o, in, n, count); });
  COLLECTIVED_GPU_CHECK(gpuGetLastError());
  return Status::Ok();
}

template <typename T>
Status LaunchSlotsTyped(ReduceOp op, const ReduceSlotsArgs& a, gpuStream_t stream, uint32_t max_blocks) {
  constexpr uint32_t kThreads = 512;
  uint64_t most = 0;
  for (uint32_t r = 0; r < a.world; ++r) most = a.counts[r] > most ? a.counts[r] : most;
  const uint64_t want = (most + kThreads - 1) / kThreads;
  // The owners share the GPU: max_blocks in all, at least one per owner.
  const uint64_t per_owner = max_blocks / a.world > 0 ? max_blocks / a.world : 1;
  const dim3 grid(static_cast<uint32_t>(want < per_owner ? (want == 0 ? 1 : want) : per_owner), a.world);
  DispatchOp<T>(op, [&]<ReduceOp kOp>() { ReduceSlotsKernel<T, kOp><<<grid, kThreads, 0, stream>>>(a); });
  COLLECTIVED_GPU_CHECK(gpuGetLastError());
  return Status::Ok();
}

// Runs `launch.template operator()<T>()` for the runtime `dtype`.
template <typename Launch>
Status DispatchType(DataType dtype, Launch&& launch) {
  switch (dtype) {
    case DataType::kFloat32: return launch.template operator()<float>();
    case DataType::kFloat64: return launch.template operator()<double>();
    case DataType::kFloat16: return launch.template operator()<gpu_half>();
    case DataType::kBFloat16: return launch.template operator()<gpu_bfloat16>();
    case DataType::kInt32: return launch.template operator()<int32_t>();
    case DataType::kInt64: return launch.template operator()<int64_t>();
    case DataType::kUint32: return launch.template operator()<uint32_t>();
    default: return Status::InvalidArgument("unknown data type");
  }
}

Status CheckReduction(DataType dtype, ReduceOp op) {
  if (!IsValidReduction(dtype, op)) {
    return Status::InvalidArgument(std::string("reduction ") + ReduceOpName(op) + " is not allowed on " +
                                   DataTypeName(dtype));
  }
  return Status::Ok();
}

}  // namespace

Status LaunchReduce(DataType dtype, ReduceOp op, void* out, const void* const* in_ptrs, uint32_t n, uint64_t count,
                    gpuStream_t stream, uint32_t max_blocks) {
  COLLECTIVED_RETURN_IF_ERROR(CheckReduction(dtype, op));
  if (n == 0 || max_blocks == 0) return Status::InvalidArgument("need at least one input and one block");
  return DispatchType(dtype, [&]<typename T>() { return LaunchTyped<T>(op, out, in_ptrs, n, count, stream, max_blocks); });
}

Status LaunchReduceSlots(DataType dtype, ReduceOp op, const ReduceSlotsArgs& args, gpuStream_t stream,
                         uint32_t max_blocks) {
  COLLECTIVED_RETURN_IF_ERROR(CheckReduction(dtype, op));
  if (args.world == 0 || args.world > kMaxReduceOwners || max_blocks == 0 || args.scratch == nullptr) {
    return Status::InvalidArgument("reduce slots: need 1 to " + std::to_string(kMaxReduceOwners) +
                                   " owners, a scratch area and at least one block");
  }
  for (uint32_t r = 0; r < args.world; ++r) {
    if (args.counts[r] > args.chunk) return Status::InvalidArgument("reduce slots: a count exceeds the slot");
  }
  return DispatchType(dtype, [&]<typename T>() { return LaunchSlotsTyped<T>(op, args, stream, max_blocks); });
}

}  // namespace collectived::device
