// One source for CUDA and HIP: the runtime names the device code uses, aliased
// to whichever toolkit compiles it (MSCCL++ style). HIP builds define
// COLLECTIVED_USE_HIP (or compile with hipcc for AMD).
#ifndef COLLECTIVED_KERNELS_DEVICE_GPU_RUNTIME_H_
#define COLLECTIVED_KERNELS_DEVICE_GPU_RUNTIME_H_

#if defined(COLLECTIVED_USE_HIP) || defined(__HIP_PLATFORM_AMD__)
#include <hip/hip_bf16.h>
#include <hip/hip_fp16.h>
#include <hip/hip_runtime.h>
using gpuError_t = hipError_t;
using gpuStream_t = hipStream_t;
using gpu_half = __half;
using gpu_bfloat16 = __hip_bfloat16;
#define gpuSuccess hipSuccess
#define gpuGetErrorString hipGetErrorString
#define gpuGetLastError hipGetLastError
#define gpuGetDeviceCount hipGetDeviceCount
#define gpuMalloc hipMalloc
#define gpuFree hipFree
#define gpuMemcpy hipMemcpy
#define gpuMemcpyAsync hipMemcpyAsync
#define gpuMemcpyHostToDevice hipMemcpyHostToDevice
#define gpuMemcpyDeviceToHost hipMemcpyDeviceToHost
#define gpuStreamCreate hipStreamCreate
#define gpuStreamDestroy hipStreamDestroy
#define gpuStreamSynchronize hipStreamSynchronize
#define gpuDeviceGetAttribute hipDeviceGetAttribute
#define gpuDevAttrMultiProcessorCount hipDeviceAttributeMultiprocessorCount
#define gpuGetDevice hipGetDevice
#define gpuHalfToFloat __half2float
#define gpuFloatToHalf __float2half_rn
#define gpuBFloat16ToFloat __bfloat162float
#define gpuFloatToBFloat16 __float2bfloat16
#else
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
using gpuError_t = cudaError_t;
using gpuStream_t = cudaStream_t;
using gpu_half = __half;
using gpu_bfloat16 = __nv_bfloat16;
#define gpuSuccess cudaSuccess
#define gpuGetErrorString cudaGetErrorString
#define gpuGetLastError cudaGetLastError
#define gpuGetDeviceCount cudaGetDeviceCount
#define gpuMalloc cudaMalloc
#define gpuFree cudaFree
#define gpuMemcpy cudaMemcpy
#define gpuMemcpyAsync cudaMemcpyAsync
#define gpuMemcpyHostToDevice cudaMemcpyHostToDevice
#define gpuMemcpyDeviceToHost cudaMemcpyDeviceToHost
#define gpuStreamCreate cudaStreamCreate
#define gpuStreamDestroy cudaStreamDestroy
#define gpuStreamSynchronize cudaStreamSynchronize
#define gpuDeviceGetAttribute cudaDeviceGetAttribute
#define gpuDevAttrMultiProcessorCount cudaDevAttrMultiProcessorCount
#define gpuGetDevice cudaGetDevice
#define gpuHalfToFloat __half2float
#define gpuFloatToHalf __float2half_rn
#define gpuBFloat16ToFloat __bfloat162float
#define gpuFloatToBFloat16 __float2bfloat16_rn
#endif

#endif  // COLLECTIVED_KERNELS_DEVICE_GPU_RUNTIME_H_
