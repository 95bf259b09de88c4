#include "ipc/cumem_window.h"

#include <cuda.h>
#include <cuda_runtime.h>
#include <unistd.h>

#include <mutex>

namespace collectived::ipc {
namespace {

// Driver entry points, resolved through the runtime: nothing links libcuda,
// so binaries load (and report "no GPU") on machines without a driver.
struct Driver {
#define COLLECTIVED_DRIVER_FN(name) decltype(&::name) name = nullptr;
  COLLECTIVED_DRIVER_FN(cuInit)
  COLLECTIVED_DRIVER_FN(cuGetErrorName)
  COLLECTIVED_DRIVER_FN(cuDeviceGet)
  COLLECTIVED_DRIVER_FN(cuDeviceGetCount)
  COLLECTIVED_DRIVER_FN(cuDeviceGetUuid)
  COLLECTIVED_DRIVER_FN(cuDevicePrimaryCtxRetain)
  COLLECTIVED_DRIVER_FN(cuCtxSetCurrent)
  COLLECTIVED_DRIVER_FN(cuMemGetAllocationGranularity)
  COLLECTIVED_DRIVER_FN(cuMemCreate)
  COLLECTIVED_DRIVER_FN(cuMemRelease)
  COLLECTIVED_DRIVER_FN(cuMemExportToShareableHandle)
  COLLECTIVED_DRIVER_FN(cuMemImportFromShareableHandle)
  COLLECTIVED_DRIVER_FN(cuMemAddressReserve)
  COLLECTIVED_DRIVER_FN(cuMemAddressFree)
  COLLECTIVED_DRIVER_FN(cuMemMap)
  COLLECTIVED_DRIVER_FN(cuMemUnmap)
  COLLECTIVED_DRIVER_FN(cuMemSetAccess)
  COLLECTIVED_DRIVER_FN(cuMemRetainAllocationHandle)
  COLLECTIVED_DRIVER_FN(cuPointerGetAttribute)
  COLLECTIVED_DRIVER_FN(cuDeviceGetAttribute)
#undef COLLECTIVED_DRIVER_FN
  Status status;
};

const Driver& GetDriver() {
  static Driver d;
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
#define COLLECTIVED_LOAD(name) \
  if (d.status.ok()) d.status = load(#name, reinterpret_cast<void**>(&d.name));
    COLLECTIVED_LOAD(cuInit)
    COLLECTIVED_LOAD(cuGetErrorName)
    COLLECTIVED_LOAD(cuDeviceGet)
    COLLECTIVED_LOAD(cuDeviceGetCount)
    COLLECTIVED_LOAD(cuDeviceGetUuid)
    COLLECTIVED_LOAD(cuDevicePrimaryCtxRetain)
    COLLECTIVED_LOAD(cuCtxSetCurrent)
    COLLECTIVED_LOAD(cuMemGetAllocationGranularity)
    COLLECTIVED_LOAD(cuMemCreate)
    COLLECTIVED_LOAD(cuMemRelease)
    COLLECTIVED_LOAD(cuMemExportToShareableHandle)
    COLLECTIVED_LOAD(cuMemImportFromShareableHandle)
    COLLECTIVED_LOAD(cuMemAddressReserve)
    COLLECTIVED_LOAD(cuMemAddressFree)
    COLLECTIVED_LOAD(cuMemMap)
    COLLECTIVED_LOAD(cuMemUnmap)
    COLLECTIVED_LOAD(cuMemSetAccess)
    COLLECTIVED_LOAD(cuMemRetainAllocationHandle)
    COLLECTIVED_LOAD(cuPointerGetAttribute)
    COLLECTIVED_LOAD(cuDeviceGetAttribute)
#undef COLLECTIVED_LOAD
  });
  return d;
}

// A failing driver call as a Status naming it, like the runtime's GPU_CHECK.
Status DriverStatus(CUresult r, const char* call) {
  const char* name = nullptr;
  GetDriver().cuGetErrorName(r, &name);
  std::string msg = std::string(call) + " failed: " + (name ? name : "unknown CUDA driver error");
  if (r == CUDA_ERROR_OUT_OF_MEMORY) return Status::ResourceExhausted(msg);
  if (r == CUDA_ERROR_NOT_SUPPORTED) return Status::FailedPrecondition(msg);
  return Status::Internal(msg);
}

// Calls driver function `fn` (of GetDriver()) and returns its failure as a Status.
#define CU_CHECK(fn, ...)                                                           \
  do {                                                                             \
    COLLECTIVED_RETURN_IF_ERROR(GetDriver().status);                               \
    CUresult _cu_result = GetDriver().fn(__VA_ARGS__);                             \
    if (_cu_result != CUDA_SUCCESS) return DriverStatus(_cu_result, #fn);          \
  } while (0)

Status EnsureContext(int ordinal) {
  CU_CHECK(cuInit, 0);
  CUdevice dev;
  CU_CHECK(cuDeviceGet, &dev, ordinal);
  CUcontext ctx;
  CU_CHECK(cuDevicePrimaryCtxRetain, &ctx, dev);  // the runtime's context, shared with it
  CU_CHECK(cuCtxSetCurrent, ctx);
  return Status::Ok();
}

CUmemAllocationProp Prop(int ordinal, bool exportable = true) {
  CUmemAllocationProp prop = {};
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  prop.location.id = ordinal;
  prop.requestedHandleTypes = exportable ? CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR : CU_MEM_HANDLE_TYPE_NONE;
  return prop;
}

// A pointer attribute of `ptr`; false (the error cleared) when the driver has none for it.
template <typename T>
bool PointerAttribute(const void* ptr, CUpointer_attribute attr, T* value) {
  const Driver& d = GetDriver();
  if (!d.status.ok()) return false;
  return d.cuPointerGetAttribute(value, attr, reinterpret_cast<CUdeviceptr>(ptr)) == CUDA_SUCCESS;
}

}  // namespace

Status GpuUuid(int ordinal, std::string* uuid) {
  CU_CHECK(cuInit, 0);
  CUdevice dev;
  CU_CHECK(cuDeviceGet, &dev, ordinal);
  CUuuid id;
  CU_CHECK(cuDeviceGetUuid, &id, dev);
  const auto* b = reinterpret_cast<const unsigned char*>(id.bytes);
  char buf[64];
  std::snprintf(buf, sizeof(buf), "GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x", b[0], b[1],
                b[2], b[3], b[4], b[5], b[6], b[7], b[8], b[9], b[10], b[11], b[12], b[13], b[14], b[15]);
  *uuid = buf;
  return Status::Ok();
}

Status GpuOrdinalByUuid(const std::string& uuid, int* ordinal) {
  CU_CHECK(cuInit, 0);
  int count = 0;
  CU_CHECK(cuDeviceGetCount, &count);
  for (int i = 0; i < count; ++i) {
    std::string u;
    COLLECTIVED_RETURN_IF_ERROR(GpuUuid(i, &u));
    if (u == uuid) {
      *ordinal = i;
      return Status::Ok();
    }
  }
  return Status::NotFound("no GPU with UUID " + uuid + " is visible to this process");
}

bool CuMemFdExportSupported(int ordinal, std::string* why_not) {
  const Driver& d = GetDriver();
  CUdevice dev;
  int vmm = 0, fd = 0;
  if (!d.status.ok() || d.cuInit(0) != CUDA_SUCCESS || d.cuDeviceGet(&dev, ordinal) != CUDA_SUCCESS) {
    *why_not = "the CUDA driver is not usable";
    return false;
  }
  if (d.cuDeviceGetAttribute(&vmm, CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED, dev) != CUDA_SUCCESS ||
      vmm == 0) {
    *why_not = "device " + std::to_string(ordinal) + " has no virtual memory management (cuMem)";
    return false;
  }
  if (d.cuDeviceGetAttribute(&fd, CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED, dev) !=
          CUDA_SUCCESS ||
      fd == 0) {
    *why_not = "device " + std::to_string(ordinal) + " cannot export cuMem memory as POSIX fds";
    return false;
  }
  return true;
}

Status ExportCallerRange(const void* ptr, uint64_t bytes, CallerRangeExport* out) {
  COLLECTIVED_RETURN_IF_ERROR(GetDriver().status);
  if (ptr == nullptr || bytes == 0) return Status::InvalidArgument("buffer is null or empty");
  // cudaMalloc memory has no shareable handle type: only cuMem (VMM)
  // allocations made with requestedHandleTypes = POSIX fd can be imported by peers.
  uint64_t types = 0;
  if (!PointerAttribute(ptr, CU_POINTER_ATTRIBUTE_ALLOWED_HANDLE_TYPES, &types) ||
      (types & CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR) == 0) {
    return Status::InvalidArgument(
        "buffer is not cuMem memory exportable as a POSIX fd (cudaMalloc memory is not): allocate it with "
        "cuMemCreate and requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, or use "
        "Communicator::AllocBuffer; other device memory is staged");
  }
  CUdeviceptr base = 0;
  size_t size = 0;
  if (!PointerAttribute(ptr, CU_POINTER_ATTRIBUTE_MAPPING_BASE_ADDR, &base) ||
      !PointerAttribute(ptr, CU_POINTER_ATTRIBUTE_MAPPING_SIZE, &size)) {
    return Status::InvalidArgument("the driver reports no cuMem mapping for this buffer");
  }
  const auto p = reinterpret_cast<uintptr_t>(ptr);
  if (p < base || p - base > size || bytes > size - (p - base)) {
    return Status::InvalidArgument("buffer of " + std::to_string(bytes) + " bytes runs past its cuMem mapping (" +
                                   std::to_string(size) + " bytes at offset " + std::to_string(p - base) +
                                   "): a registered buffer must lie inside one allocation");
  }
  CUmemGenericAllocationHandle handle;
  if (GetDriver().cuMemRetainAllocationHandle(&handle, reinterpret_cast<void*>(base)) != CUDA_SUCCESS) {
    // Pool memory (cudaMallocAsync) may allow an fd export but has no allocation handle of its own.
    return Status::InvalidArgument("buffer is not a cuMem (cuMemCreate + cuMemMap) mapping; memory-pool "
                                   "allocations cannot be registered: use Communicator::AllocBuffer");
  }
  auto retained = std::shared_ptr<void>(nullptr, [handle](void*) { GetDriver().cuMemRelease(handle); });
  int fd = -1;
  CU_CHECK(cuMemExportToShareableHandle, &fd, handle, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0);
  out->fd = fd;
  out->allocation_bytes = size;
  out->offset = p - base;
  out->retained = std::move(retained);
  return Status::Ok();
}

Status CuMemWindow::CreateUnexportable(int ordinal, uint64_t bytes, std::unique_ptr<CuMemWindow>* out) {
  return CreateWith(ordinal, bytes, false, out);
}

Status CuMemWindow::Create(int ordinal, uint64_t bytes, std::unique_ptr<CuMemWindow>* out) {
  return CreateWith(ordinal, bytes, true, out);
}

Status CuMemWindow::CreateWith(int ordinal, uint64_t bytes, bool exportable, std::unique_ptr<CuMemWindow>* out) {
  if (bytes == 0) return Status::InvalidArgument("window of 0 bytes");
  COLLECTIVED_RETURN_IF_ERROR(EnsureContext(ordinal));
  CUmemAllocationProp prop = Prop(ordinal, exportable);
  size_t granularity = 0;
  CU_CHECK(cuMemGetAllocationGranularity, &granularity, &prop, CU_MEM_ALLOC_GRANULARITY_RECOMMENDED);
  std::unique_ptr<CuMemWindow> w(new CuMemWindow());
  w->ordinal_ = ordinal;
  w->size_ = (bytes + granularity - 1) / granularity * granularity;
  CUmemGenericAllocationHandle handle;
  CU_CHECK(cuMemCreate, &handle, w->size_, &prop, 0);
  w->handle_ = handle;
  COLLECTIVED_RETURN_IF_ERROR(w->MapHere());
  *out = std::move(w);
  return Status::Ok();
}

Status CuMemWindow::Import(int fd, int ordinal, uint64_t bytes, std::unique_ptr<CuMemWindow>* out) {
  Status ctx = EnsureContext(ordinal);
  if (!ctx.ok()) {
    close(fd);
    return ctx;
  }
  std::unique_ptr<CuMemWindow> w(new CuMemWindow());
  w->ordinal_ = ordinal;
  w->size_ = bytes;
  CUmemGenericAllocationHandle handle;
  Status loaded = GetDriver().status;
  if (!loaded.ok()) {
    close(fd);
    return loaded;
  }
  CUresult r = GetDriver().cuMemImportFromShareableHandle(&handle, reinterpret_cast<void*>(static_cast<uintptr_t>(fd)),
                                              CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR);
  close(fd);  // the handle holds its own reference
  if (r != CUDA_SUCCESS) return DriverStatus(r, "cuMemImportFromShareableHandle");
  w->handle_ = handle;
  COLLECTIVED_RETURN_IF_ERROR(w->MapHere());
  *out = std::move(w);
  return Status::Ok();
}

Status CuMemWindow::MapHere() {
  CUdeviceptr ptr;
  CU_CHECK(cuMemAddressReserve, &ptr, size_, 0, 0, 0);
  ptr_ = ptr;
  CU_CHECK(cuMemMap, ptr, size_, 0, static_cast<CUmemGenericAllocationHandle>(handle_), 0);
  mapped_ = true;
  CUmemAccessDesc access = {};
  access.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  access.location.id = ordinal_;
  access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
  CU_CHECK(cuMemSetAccess, ptr, size_, &access, 1);
  return Status::Ok();
}

Status CuMemWindow::ExportFd(int* fd) const {
  int exported = -1;
  CU_CHECK(cuMemExportToShareableHandle, &exported, static_cast<CUmemGenericAllocationHandle>(handle_),
                                        CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0);
  *fd = exported;
  return Status::Ok();
}

CuMemWindow::~CuMemWindow() {
  const Driver& d = GetDriver();
  if (mapped_) d.cuMemUnmap(static_cast<CUdeviceptr>(ptr_), size_);
  if (ptr_ != 0) d.cuMemAddressFree(static_cast<CUdeviceptr>(ptr_), size_);
  if (handle_ != 0) d.cuMemRelease(static_cast<CUmemGenericAllocationHandle>(handle_));
}

}  // namespace collectived::ipc
