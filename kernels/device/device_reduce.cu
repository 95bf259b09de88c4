#include "kernels/device/device_reduce.h"

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

template <typename T>
Status LaunchTyped(ReduceOp op, void* out, const void* const* in, uint32_t n, uint64_t count, gpuStream_t stream,
                   uint32_t max_blocks) {
  constexpr uint32_t kThreads = 512;
  const uint64_t want = (count + kThreads - 1) / kThreads;
  const uint32_t blocks = static_cast<uint32_t>(want < max_blocks ? (want == 0 ? 1 : want) : max_blocks);
  T* o = static_cast<T*>(out);
  switch (op) {
    case ReduceOp::kSum: ReduceKernel<T, ReduceOp::kSum><<<blocks, kThreads, 0, stream>>>(o, in, n, count); break;
    case ReduceOp::kProd: ReduceKernel<T, ReduceOp::kProd><<<blocks, kThreads, 0, stream>>>(o, in, n, count); break;
    case ReduceOp::kMin: ReduceKernel<T, ReduceOp::kMin><<<blocks, kThreads, 0, stream>>>(o, in, n, count); break;
    case ReduceOp::kMax: ReduceKernel<T, ReduceOp::kMax><<<blocks, kThreads, 0, stream>>>(o, in, n, count); break;
    case ReduceOp::kAvg:
      if constexpr (!std::is_integral_v<T>) {
        ReduceKernel<T, ReduceOp::kAvg><<<blocks, kThreads, 0, stream>>>(o, in, n, count);
      }
      break;
    default: break;
  }
  COLLECTIVED_GPU_CHECK(gpuGetLastError());
  return Status::Ok();
}

}  // namespace

Status LaunchReduce(DataType dtype, ReduceOp op, void* out, const void* const* in_ptrs, uint32_t n, uint64_t count,
                    gpuStream_t stream, uint32_t max_blocks) {
  if (!IsValidReduction(dtype, op)) {
    return Status::InvalidArgument(std::string("reduction ") + ReduceOpName(op) + " is not allowed on " +
                                   DataTypeName(dtype));
  }
  if (n == 0 || max_blocks == 0) return Status::InvalidArgument("need at least one input and one block");
  switch (dtype) {
    case DataType::kFloat32: return LaunchTyped<float>(op, out, in_ptrs, n, count, stream, max_blocks);
    case DataType::kFloat64: return LaunchTyped<double>(op, out, in_ptrs, n, count, stream, max_blocks);
    case DataType::kFloat16: return LaunchTyped<gpu_half>(op, out, in_ptrs, n, count, stream, max_blocks);
    case DataType::kBFloat16: return LaunchTyped<gpu_bfloat16>(op, out, in_ptrs, n, count, stream, max_blocks);
    case DataType::kInt32: return LaunchTyped<int32_t>(op, out, in_ptrs, n, count, stream, max_blocks);
    case DataType::kInt64: return LaunchTyped<int64_t>(op, out, in_ptrs, n, count, stream, max_blocks);
    case DataType::kUint32: return LaunchTyped<uint32_t>(op, out, in_ptrs, n, count, stream, max_blocks);
    default: return Status::InvalidArgument("unknown data type");
  }
}

}  // namespace collectived::device
