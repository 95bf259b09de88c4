// The driver-level GPU names (virtual memory management: cuMem on CUDA,
// hipMem on HIP), beside gpu_runtime.h's runtime names: types, constants, a
// table of entry points and the check that turns a failing call into a
// Status. ipc/cumem_window.cc is written against these only.
//
// CUDA: the entry points are resolved at run time through the runtime
// (cudaGetDriverEntryPointByVersion): nothing links libcuda, so binaries load
// (and report "no GPU") on machines without a driver.
// HIP: there is no separate driver library; the table points at the hip*
// functions of libamdhip64, linked directly.
//
// Handles and device pointers are integers on CUDA and pointers on HIP: code
// that keeps them as 64-bit words converts with gpuToWord / gpuFromWord.
#ifndef COLLECTIVED_BASE_GPU_GPU_DRIVER_H_
#define COLLECTIVED_BASE_GPU_GPU_DRIVER_H_

#include <cstdint>
#include <mutex>
#include <string>
#include <type_traits>

#include "base/gpu/gpu_runtime.h"
#include "collectived/status.h"

#if defined(COLLECTIVED_USE_HIP) || defined(__HIP_PLATFORM_AMD__)
using gpuDriverResult_t = hipError_t;
using gpuDevice_t = hipDevice_t;
using gpuCtx_t = hipCtx_t;
using gpuUuid_t = hipUUID;
using gpuDeviceptr_t = hipDeviceptr_t;  // void*
using gpuMemGenericAllocationHandle_t = hipMemGenericAllocationHandle_t;  // a pointer
using gpuMemAllocationProp = hipMemAllocationProp;
using gpuMemAccessDesc = hipMemAccessDesc;
using gpuMemAllocationHandleType = hipMemAllocationHandleType;
#define gpuDriverSuccess hipSuccess
#define gpuDriverErrorOutOfMemory hipErrorOutOfMemory
#define gpuDriverErrorNotSupported hipErrorNotSupported
#define gpuMemAllocationTypePinned hipMemAllocationTypePinned
#define gpuMemLocationTypeDevice hipMemLocationTypeDevice
#define gpuMemHandleTypeNone hipMemHandleTypeNone
#define gpuMemHandleTypePosixFileDescriptor hipMemHandleTypePosixFileDescriptor
#define gpuMemAllocationGranularityRecommended hipMemAllocationGranularityRecommended
#define gpuMemAccessFlagsProtReadWrite hipMemAccessFlagsProtReadWrite
// ROCm 5 has no "mapping" attributes: the range ones name the allocation's
// address range, the closest it reports.
#define gpuPointerAttributeMappingBaseAddr HIP_POINTER_ATTRIBUTE_RANGE_START_ADDR
#define gpuPointerAttributeMappingSize HIP_POINTER_ATTRIBUTE_RANGE_SIZE
// What the HIP runtime cannot report (ROCm 5.2, Debian 12): whether a device
// has virtual memory management or can export it as POSIX fds (no device
// attribute for either; hipDeviceAttributeVirtualMemoryManagementSupported
// came with later ROCm), and which handle types an allocation allows
// (HIP_POINTER_ATTRIBUTE_ALLOWED_HANDLE_TYPES is "not supported in HIP").
#define COLLECTIVED_GPU_DRIVER_REPORTS_VMM_SUPPORT 0
#define COLLECTIVED_GPU_DRIVER_REPORTS_HANDLE_TYPES 0
// Names for messages: what the user's toolkit calls these things.
#define COLLECTIVED_GPU_DRIVER_NAME "HIP runtime"
#define COLLECTIVED_GPU_VMM_NAME "hipMem"
#define COLLECTIVED_GPU_VMM_CREATE_NAME "hipMemCreate"
#define COLLECTIVED_GPU_VMM_MAP_NAME "hipMemMap"
#define COLLECTIVED_GPU_MALLOC_NAME "hipMalloc"
#define COLLECTIVED_GPU_POSIX_FD_HANDLE_NAME "hipMemHandleTypePosixFileDescriptor"
#define COLLECTIVED_GPU_REQUESTED_HANDLE_TYPES_NAME "requestedHandleType"
#else
#include <cuda.h>
using gpuDriverResult_t = CUresult;
using gpuDevice_t = CUdevice;
using gpuCtx_t = CUcontext;
using gpuUuid_t = CUuuid;
using gpuDeviceptr_t = CUdeviceptr;  // an integer
using gpuMemGenericAllocationHandle_t = CUmemGenericAllocationHandle;  // an integer
using gpuMemAllocationProp = CUmemAllocationProp;
using gpuMemAccessDesc = CUmemAccessDesc;
using gpuMemAllocationHandleType = CUmemAllocationHandleType;
#define gpuDriverSuccess CUDA_SUCCESS
#define gpuDriverErrorOutOfMemory CUDA_ERROR_OUT_OF_MEMORY
#define gpuDriverErrorNotSupported CUDA_ERROR_NOT_SUPPORTED
#define gpuMemAllocationTypePinned CU_MEM_ALLOCATION_TYPE_PINNED
#define gpuMemLocationTypeDevice CU_MEM_LOCATION_TYPE_DEVICE
#define gpuMemHandleTypeNone CU_MEM_HANDLE_TYPE_NONE
#define gpuMemHandleTypePosixFileDescriptor CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR
#define gpuMemAllocationGranularityRecommended CU_MEM_ALLOC_GRANULARITY_RECOMMENDED
#define gpuMemAccessFlagsProtReadWrite CU_MEM_ACCESS_FLAGS_PROT_READWRITE
#define gpuPointerAttributeMappingBaseAddr CU_POINTER_ATTRIBUTE_MAPPING_BASE_ADDR
#define gpuPointerAttributeMappingSize CU_POINTER_ATTRIBUTE_MAPPING_SIZE
#define gpuPointerAttributeAllowedHandleTypes CU_POINTER_ATTRIBUTE_ALLOWED_HANDLE_TYPES
#define gpuDeviceAttributeVirtualMemoryManagementSupported CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED
#define gpuDeviceAttributeHandleTypePosixFdSupported CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED
#define COLLECTIVED_GPU_DRIVER_REPORTS_VMM_SUPPORT 1
#define COLLECTIVED_GPU_DRIVER_REPORTS_HANDLE_TYPES 1
#define COLLECTIVED_GPU_DRIVER_NAME "CUDA driver"
#define COLLECTIVED_GPU_VMM_NAME "cuMem"
#define COLLECTIVED_GPU_VMM_CREATE_NAME "cuMemCreate"
#define COLLECTIVED_GPU_VMM_MAP_NAME "cuMemMap"
#define COLLECTIVED_GPU_MALLOC_NAME "cudaMalloc"
#define COLLECTIVED_GPU_POSIX_FD_HANDLE_NAME "CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR"
#define COLLECTIVED_GPU_REQUESTED_HANDLE_TYPES_NAME "requestedHandleTypes"
#endif

// A handle or device pointer as a 64-bit word, and back.
template <typename T>
inline unsigned long long gpuToWord(T v) {
  if constexpr (std::is_pointer_v<T>) {
    return static_cast<unsigned long long>(reinterpret_cast<uintptr_t>(v));
  } else {
    return static_cast<unsigned long long>(v);
  }
}
template <typename T>
inline T gpuFromWord(unsigned long long w) {
  if constexpr (std::is_pointer_v<T>) {
    return reinterpret_cast<T>(static_cast<uintptr_t>(w));
  } else {
    return static_cast<T>(w);
  }
}

// Pinned device memory on `ordinal`, exportable as a POSIX fd or not (CUDA
// names the field requestedHandleTypes, HIP requestedHandleType).
inline gpuMemAllocationProp gpuDeviceAllocationProp(int ordinal, bool exportable) {
  gpuMemAllocationProp prop = {};
  prop.type = gpuMemAllocationTypePinned;
  prop.location.type = gpuMemLocationTypeDevice;
  prop.location.id = ordinal;
#if defined(COLLECTIVED_USE_HIP) || defined(__HIP_PLATFORM_AMD__)
  prop.requestedHandleType = exportable ? gpuMemHandleTypePosixFileDescriptor : gpuMemHandleTypeNone;
#else
  prop.requestedHandleTypes = exportable ? gpuMemHandleTypePosixFileDescriptor : gpuMemHandleTypeNone;
#endif
  return prop;
}

namespace collectived::gpu {

// One driver entry point: callable, and named (the toolkit's own name) for messages.
template <typename Fn>
struct DriverFn;
template <typename R, typename... Params>
struct DriverFn<R (*)(Params...)> {
  R (*fn)(Params...) = nullptr;
  const char* name = "";
  R operator()(Params... params) const { return fn(params...); }
};

#if defined(COLLECTIVED_USE_HIP) || defined(__HIP_PLATFORM_AMD__)
namespace hip_driver {
// cuGetErrorName's shape (HIP returns the name instead).
inline hipError_t GetErrorName(hipError_t e, const char** name) {
  *name = hipGetErrorName(e);
  return hipSuccess;
}
// The primary-context calls are deprecated in HIP (a device's context is
// the runtime's), yet still the exact counterpart of what CUDA needs here.
#pragma clang diagnostic push
#pragma clang diagnostic ignored "-Wdeprecated-declarations"
inline hipError_t CtxSetCurrent(hipCtx_t ctx) { return hipCtxSetCurrent(ctx); }
#pragma clang diagnostic pop
}  // namespace hip_driver
#endif

// X(member, CUDA driver symbol, HIP symbol): the entry points cumem windows use.
#define COLLECTIVED_GPU_DRIVER_FUNCTIONS(X)                                                   \
  X(Init, cuInit, hipInit)                                                                    \
  X(GetErrorName, cuGetErrorName, hip_driver::GetErrorName)                                   \
  X(DeviceGet, cuDeviceGet, hipDeviceGet)                                                     \
  X(DeviceGetCount, cuDeviceGetCount, hipGetDeviceCount)                                      \
  X(DeviceGetUuid, cuDeviceGetUuid, hipDeviceGetUuid)                                         \
  X(DevicePrimaryCtxRetain, cuDevicePrimaryCtxRetain, hipDevicePrimaryCtxRetain)              \
  X(CtxSetCurrent, cuCtxSetCurrent, hip_driver::CtxSetCurrent)                                \
  X(MemGetAllocationGranularity, cuMemGetAllocationGranularity, hipMemGetAllocationGranularity) \
  X(MemCreate, cuMemCreate, hipMemCreate)                                                     \
  X(MemRelease, cuMemRelease, hipMemRelease)                                                  \
  X(MemExportToShareableHandle, cuMemExportToShareableHandle, hipMemExportToShareableHandle)  \
  X(MemImportFromShareableHandle, cuMemImportFromShareableHandle, hipMemImportFromShareableHandle) \
  X(MemAddressReserve, cuMemAddressReserve, hipMemAddressReserve)                             \
  X(MemAddressFree, cuMemAddressFree, hipMemAddressFree)                                      \
  X(MemMap, cuMemMap, hipMemMap)                                                              \
  X(MemUnmap, cuMemUnmap, hipMemUnmap)                                                        \
  X(MemSetAccess, cuMemSetAccess, hipMemSetAccess)                                            \
  X(MemRetainAllocationHandle, cuMemRetainAllocationHandle, hipMemRetainAllocationHandle)     \
  X(PointerGetAttribute, cuPointerGetAttribute, hipPointerGetAttribute)                       \
  X(DeviceGetAttribute, cuDeviceGetAttribute, hipDeviceGetAttribute)

#if defined(COLLECTIVED_USE_HIP) || defined(__HIP_PLATFORM_AMD__)
#define COLLECTIVED_GPU_DRIVER_MEMBER(member, cuda, hip) DriverFn<decltype(&hip)> member{&hip, #hip};
#else
#define COLLECTIVED_GPU_DRIVER_MEMBER(member, cuda, hip) DriverFn<decltype(&::cuda)> member{nullptr, #cuda};
#endif

struct DriverApi {
  COLLECTIVED_GPU_DRIVER_FUNCTIONS(COLLECTIVED_GPU_DRIVER_MEMBER)
  Status status;  // not OK: the entry points could not be resolved (none may be called)
};
#undef COLLECTIVED_GPU_DRIVER_MEMBER

// The process's driver entry points, resolved on first use.
inline const DriverApi& Driver() {
#if defined(COLLECTIVED_USE_HIP) || defined(__HIP_PLATFORM_AMD__)
  static const DriverApi d = [] {
    DriverApi api;
    api.GetErrorName.name = "hipGetErrorName";  // the functions the wrappers call
    api.CtxSetCurrent.name = "hipCtxSetCurrent";
    return api;
  }();
#else
  static DriverApi d;
  static std::once_flag once;
  std::call_once(once, [] {
    auto load = [](const char* symbol, void** fn) -> Status {
      cudaDriverEntryPointQueryResult q;
      cudaError_t e = cudaGetDriverEntryPointByVersion(symbol, fn, CUDA_VERSION, cudaEnableDefault, &q);
      if (e != cudaSuccess || q != cudaDriverEntryPointSuccess || *fn == nullptr) {
        return Status::FailedPrecondition(std::string("CUDA driver entry point ") + symbol +
                                          " unavailable: " + cudaGetErrorString(e));
      }
      return Status::Ok();
    };
#define COLLECTIVED_GPU_DRIVER_LOAD(member, cuda, hip) \
  if (d.status.ok()) d.status = load(#cuda, reinterpret_cast<void**>(&d.member.fn));
    COLLECTIVED_GPU_DRIVER_FUNCTIONS(COLLECTIVED_GPU_DRIVER_LOAD)
#undef COLLECTIVED_GPU_DRIVER_LOAD
  });
#endif
  return d;
}

// A failing driver call as a Status naming it, like GpuErrorStatus for the
// runtime (gpu_check.h): out of memory is RESOURCE_EXHAUSTED, an unsupported
// operation FAILED_PRECONDITION, anything else INTERNAL.
inline Status GpuDriverErrorStatus(gpuDriverResult_t r, const char* call) {
  const char* name = nullptr;
  (void)Driver().GetErrorName(r, &name);
  std::string msg = std::string(call) + " failed: " + (name ? name : "unknown " COLLECTIVED_GPU_DRIVER_NAME " error");
  if (r == gpuDriverErrorOutOfMemory) return Status::ResourceExhausted(msg);
  if (r == gpuDriverErrorNotSupported) return Status::FailedPrecondition(msg);
  return Status::Internal(msg);
}

}  // namespace collectived::gpu

// Calls driver entry point `fn` (a DriverApi member: MemCreate, MemMap, ...)
// and returns its failure, or the table's own, as a Status.
#define COLLECTIVED_GPU_DRIVER_CHECK(fn, ...)                                                  \
  do {                                                                                        \
    const ::collectived::gpu::DriverApi& _collectived_drv = ::collectived::gpu::Driver();     \
    COLLECTIVED_RETURN_IF_ERROR(_collectived_drv.status);                                     \
    gpuDriverResult_t _collectived_drv_result = _collectived_drv.fn(__VA_ARGS__);             \
    if (_collectived_drv_result != gpuDriverSuccess) {                                        \
      return ::collectived::gpu::GpuDriverErrorStatus(_collectived_drv_result, _collectived_drv.fn.name); \
    }                                                                                         \
  } while (0)

#endif  // COLLECTIVED_BASE_GPU_GPU_DRIVER_H_
