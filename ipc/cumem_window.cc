#include "ipc/cumem_window.h"

#include <cuda.h>
#include <cuda_runtime.h>
#include <unistd.h>

#include <cstdio>
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
#undef COLLECTIVED_LOAD
  });
  return d;
}

// One log line per failing driver call, like the runtime's GPU_CHECK.
Status DriverStatus(CUresult r, const char* call) {
  const char* name = nullptr;
  GetDriver().cuGetErrorName(r, &name);
  std::string msg = std::string(call) + " failed: " + (name ? name : "unknown CUDA driver error");
  std::fprintf(stderr, "collectived: %s\n", msg.c_str());
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

CUmemAllocationProp Prop(int ordinal) {
  CUmemAllocationProp prop = {};
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  prop.location.id = ordinal;
  prop.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
  return prop;
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

Status CuMemWindow::Create(int ordinal, uint64_t bytes, std::unique_ptr<CuMemWindow>* out) {
  if (bytes == 0) return Status::InvalidArgument("window of 0 bytes");
  COLLECTIVED_RETURN_IF_ERROR(EnsureContext(ordinal));
  CUmemAllocationProp prop = Prop(ordinal);
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
