#include "ipc/cumem_window.h"

#include <unistd.h>

#include <cstdio>

#include "base/gpu/gpu_driver.h"

namespace collectived::ipc {
namespace {

using gpu::Driver;
using gpu::DriverApi;

Status EnsureContext(int ordinal) {
  COLLECTIVED_GPU_DRIVER_CHECK(Init, 0);
  gpuDevice_t dev;
  COLLECTIVED_GPU_DRIVER_CHECK(DeviceGet, &dev, ordinal);
  gpuCtx_t ctx;
  COLLECTIVED_GPU_DRIVER_CHECK(DevicePrimaryCtxRetain, &ctx, dev);  // the runtime's context, shared with it
  COLLECTIVED_GPU_DRIVER_CHECK(CtxSetCurrent, ctx);
  return Status::Ok();
}

// A pointer attribute of `ptr`; false (the error cleared) when the driver has none for it.
template <typename Attribute, typename T>
bool PointerAttribute(const void* ptr, Attribute attr, T* value) {
  const DriverApi& d = Driver();
  if (!d.status.ok()) return false;
  return d.PointerGetAttribute(value, attr, gpuFromWord<gpuDeviceptr_t>(reinterpret_cast<uintptr_t>(ptr))) ==
         gpuDriverSuccess;
}

}  // namespace

Status GpuUuid(int ordinal, std::string* uuid) {
  COLLECTIVED_GPU_DRIVER_CHECK(Init, 0);
  gpuDevice_t dev;
  COLLECTIVED_GPU_DRIVER_CHECK(DeviceGet, &dev, ordinal);
  gpuUuid_t id;
  COLLECTIVED_GPU_DRIVER_CHECK(DeviceGetUuid, &id, dev);
  const auto* b = reinterpret_cast<const unsigned char*>(id.bytes);
  char buf[64];
  std::snprintf(buf, sizeof(buf), "GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x", b[0], b[1],
                b[2], b[3], b[4], b[5], b[6], b[7], b[8], b[9], b[10], b[11], b[12], b[13], b[14], b[15]);
  *uuid = buf;
  return Status::Ok();
}

Status GpuOrdinalByUuid(const std::string& uuid, int* ordinal) {
  COLLECTIVED_GPU_DRIVER_CHECK(Init, 0);
  int count = 0;
  COLLECTIVED_GPU_DRIVER_CHECK(DeviceGetCount, &count);
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
  const DriverApi& d = Driver();
  gpuDevice_t dev;
  if (!d.status.ok() || d.Init(0) != gpuDriverSuccess || d.DeviceGet(&dev, ordinal) != gpuDriverSuccess) {
    *why_not = "the " COLLECTIVED_GPU_DRIVER_NAME " is not usable";
    return false;
  }
#if COLLECTIVED_GPU_DRIVER_REPORTS_VMM_SUPPORT
  int vmm = 0, fd = 0;
  if (d.DeviceGetAttribute(&vmm, gpuDeviceAttributeVirtualMemoryManagementSupported, dev) != gpuDriverSuccess ||
      vmm == 0) {
    *why_not = "device " + std::to_string(ordinal) + " has no virtual memory management (" COLLECTIVED_GPU_VMM_NAME ")";
    return false;
  }
  if (d.DeviceGetAttribute(&fd, gpuDeviceAttributeHandleTypePosixFdSupported, dev) != gpuDriverSuccess || fd == 0) {
    *why_not = "device " + std::to_string(ordinal) + " cannot export " COLLECTIVED_GPU_VMM_NAME " memory as POSIX fds";
    return false;
  }
  return true;
#else
  // The runtime cannot say whether this device exports hipMem memory as
  // POSIX fds (see gpu_driver.h): answer no, so the daemon's auto mode shares
  // its windows by legacy IPC handles, which every ROCm supports.
  *why_not = "the " COLLECTIVED_GPU_DRIVER_NAME " cannot report whether device " + std::to_string(ordinal) +
             " exports " COLLECTIVED_GPU_VMM_NAME " memory as POSIX fds (ROCm 5 has no such attribute)";
  return false;
#endif
}

Status ExportCallerRange(const void* ptr, uint64_t bytes, CallerRangeExport* out) {
  COLLECTIVED_RETURN_IF_ERROR(Driver().status);
  if (ptr == nullptr || bytes == 0) return Status::InvalidArgument("buffer is null or empty");
#if COLLECTIVED_GPU_DRIVER_REPORTS_HANDLE_TYPES
  // cudaMalloc memory has no shareable handle type: only cuMem (VMM)
  // allocations made with requestedHandleTypes = POSIX fd can be imported by peers.
  uint64_t types = 0;
  if (!PointerAttribute(ptr, gpuPointerAttributeAllowedHandleTypes, &types) ||
      (types & gpuMemHandleTypePosixFileDescriptor) == 0) {
    return Status::InvalidArgument(
        "buffer is not " COLLECTIVED_GPU_VMM_NAME " memory exportable as a POSIX fd (" COLLECTIVED_GPU_MALLOC_NAME
        " memory is not): allocate it with " COLLECTIVED_GPU_VMM_CREATE_NAME " and "
        COLLECTIVED_GPU_REQUESTED_HANDLE_TYPES_NAME " = " COLLECTIVED_GPU_POSIX_FD_HANDLE_NAME ", or use "
        "Communicator::AllocBuffer; other device memory is staged");
  }
#endif  // else: the allocation handle lookup and the export below refuse what cannot be shared
  gpuDeviceptr_t base_ptr{};
  size_t size = 0;
  if (!PointerAttribute(ptr, gpuPointerAttributeMappingBaseAddr, &base_ptr) ||
      !PointerAttribute(ptr, gpuPointerAttributeMappingSize, &size)) {
    return Status::InvalidArgument("the driver reports no " COLLECTIVED_GPU_VMM_NAME " mapping for this buffer");
  }
  const auto base = static_cast<uintptr_t>(gpuToWord(base_ptr));
  const auto p = reinterpret_cast<uintptr_t>(ptr);
  if (p < base || p - base > size || bytes > size - (p - base)) {
    return Status::InvalidArgument("buffer of " + std::to_string(bytes) +
                                   " bytes runs past its " COLLECTIVED_GPU_VMM_NAME " mapping (" +
                                   std::to_string(size) + " bytes at offset " + std::to_string(p - base) +
                                   "): a registered buffer must lie inside one allocation");
  }
  gpuMemGenericAllocationHandle_t handle;
  if (Driver().MemRetainAllocationHandle(&handle, reinterpret_cast<void*>(base)) != gpuDriverSuccess) {
    // Pool memory (cudaMallocAsync) may allow an fd export but has no allocation handle of its own.
    return Status::InvalidArgument("buffer is not a " COLLECTIVED_GPU_VMM_NAME " (" COLLECTIVED_GPU_VMM_CREATE_NAME
                                   " + " COLLECTIVED_GPU_VMM_MAP_NAME ") mapping; memory-pool "
                                   "allocations cannot be registered: use Communicator::AllocBuffer");
  }
  auto retained = std::shared_ptr<void>(nullptr, [handle](void*) { (void)Driver().MemRelease(handle); });
  int fd = -1;
  COLLECTIVED_GPU_DRIVER_CHECK(MemExportToShareableHandle, &fd, handle, gpuMemHandleTypePosixFileDescriptor, 0);
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
  gpuMemAllocationProp prop = gpuDeviceAllocationProp(ordinal, exportable);
  size_t granularity = 0;
  COLLECTIVED_GPU_DRIVER_CHECK(MemGetAllocationGranularity, &granularity, &prop,
                               gpuMemAllocationGranularityRecommended);
  std::unique_ptr<CuMemWindow> w(new CuMemWindow());
  w->ordinal_ = ordinal;
  w->size_ = (bytes + granularity - 1) / granularity * granularity;
  gpuMemGenericAllocationHandle_t handle;
  COLLECTIVED_GPU_DRIVER_CHECK(MemCreate, &handle, w->size_, &prop, 0);
  w->handle_ = gpuToWord(handle);
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
  gpuMemGenericAllocationHandle_t handle;
  const DriverApi& d = Driver();
  if (!d.status.ok()) {
    close(fd);
    return d.status;
  }
  gpuDriverResult_t r = d.MemImportFromShareableHandle(&handle, reinterpret_cast<void*>(static_cast<uintptr_t>(fd)),
                                                       gpuMemHandleTypePosixFileDescriptor);
  close(fd);  // the handle holds its own reference
  if (r != gpuDriverSuccess) return gpu::GpuDriverErrorStatus(r, d.MemImportFromShareableHandle.name);
  w->handle_ = gpuToWord(handle);
  COLLECTIVED_RETURN_IF_ERROR(w->MapHere());
  *out = std::move(w);
  return Status::Ok();
}

Status CuMemWindow::MapHere() {
  gpuDeviceptr_t ptr;
  COLLECTIVED_GPU_DRIVER_CHECK(MemAddressReserve, &ptr, size_, 0, gpuDeviceptr_t{}, 0);
  ptr_ = gpuToWord(ptr);
  COLLECTIVED_GPU_DRIVER_CHECK(MemMap, ptr, size_, 0, gpuFromWord<gpuMemGenericAllocationHandle_t>(handle_), 0);
  mapped_ = true;
  gpuMemAccessDesc access = {};
  access.location.type = gpuMemLocationTypeDevice;
  access.location.id = ordinal_;
  access.flags = gpuMemAccessFlagsProtReadWrite;
  COLLECTIVED_GPU_DRIVER_CHECK(MemSetAccess, ptr, size_, &access, 1);
  return Status::Ok();
}

Status CuMemWindow::ExportFd(int* fd) const {
  int exported = -1;
  COLLECTIVED_GPU_DRIVER_CHECK(MemExportToShareableHandle, &exported,
                               gpuFromWord<gpuMemGenericAllocationHandle_t>(handle_),
                               gpuMemHandleTypePosixFileDescriptor, 0);
  *fd = exported;
  return Status::Ok();
}

CuMemWindow::~CuMemWindow() {
  const DriverApi& d = Driver();
  if (mapped_) (void)d.MemUnmap(gpuFromWord<gpuDeviceptr_t>(ptr_), size_);
  if (ptr_ != 0) (void)d.MemAddressFree(gpuFromWord<gpuDeviceptr_t>(ptr_), size_);
  if (handle_ != 0) (void)d.MemRelease(gpuFromWord<gpuMemGenericAllocationHandle_t>(handle_));
}

}  // namespace collectived::ipc
