// GPU memory shared between processes: a cuMem (VMM) allocation exported as a
// POSIX file descriptor, which travels over the fd socket like a memfd
// window. An importer maps it into its own address space; the physical
// memory lives while any process keeps it mapped, so the exporter exiting
// never leaves an importer with a dangling mapping. Devices are named by UUID.
#ifndef COLLECTIVED_IPC_CUMEM_WINDOW_H_
#define COLLECTIVED_IPC_CUMEM_WINDOW_H_

#include <cstdint>
#include <memory>
#include <string>

#include "collectived/status.h"
#include "ipc/gpu_window.h"

namespace collectived::ipc {

// "GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx" of CUDA device `ordinal` (nvidia-smi's form).
Status GpuUuid(int ordinal, std::string* uuid);
// The ordinal of the device named `uuid` in this process.
Status GpuOrdinalByUuid(const std::string& uuid, int* ordinal);

// Whether device `ordinal` can export cuMem allocations as POSIX fds (what
// CuMemWindow needs); false with the reason when it cannot.
bool CuMemFdExportSupported(int ordinal, std::string* why_not);

// The cuMem allocation behind a caller's own buffer [ptr, ptr + bytes), shared
// zero-copy with the ranks of a communicator: an fd for it (the caller owns
// it), the allocation's size and ptr's offset in it. `retained` holds a
// reference to the allocation until released (what peers import stays the
// same physical memory). INVALID_ARGUMENT, saying why, when the range is not
// cuMem memory exportable as a POSIX fd (cudaMalloc memory is not) or does
// not lie inside one mapping.
struct CallerRangeExport {
  int fd = -1;
  uint64_t allocation_bytes = 0;
  uint64_t offset = 0;
  std::shared_ptr<void> retained;
};
Status ExportCallerRange(const void* ptr, uint64_t bytes, CallerRangeExport* out);

class CuMemWindow : public GpuWindow {
 public:
  // Allocates at least `bytes` on device `ordinal`, exportable as an fd,
  // mapped read/write here. The size is rounded up to the allocation granularity.
  static Status Create(int ordinal, uint64_t bytes, std::unique_ptr<CuMemWindow>* out);
  // Maps an exported allocation of `bytes` on device `ordinal` (takes `fd`).
  static Status Import(int fd, int ordinal, uint64_t bytes, std::unique_ptr<CuMemWindow>* out);
  // Allocates like Create, with no POSIX-fd export allowed (as cudaMalloc
  // memory): what registration must refuse, for tests.
  static Status CreateUnexportable(int ordinal, uint64_t bytes, std::unique_ptr<CuMemWindow>* out);
  ~CuMemWindow() override;
  CuMemWindow(const CuMemWindow&) = delete;
  CuMemWindow& operator=(const CuMemWindow&) = delete;

  // A new fd for the allocation (the caller owns it; send it, then close it).
  Status ExportFd(int* fd) const;
  void* device_ptr() const override { return reinterpret_cast<void*>(ptr_); }
  uint64_t size() const override { return size_; }
  int ordinal() const override { return ordinal_; }

 private:
  CuMemWindow() = default;
  static Status CreateWith(int ordinal, uint64_t bytes, bool exportable, std::unique_ptr<CuMemWindow>* out);
  Status MapHere();

  int ordinal_ = 0;
  uint64_t size_ = 0;
  unsigned long long handle_ = 0;  // CUmemGenericAllocationHandle
  unsigned long long ptr_ = 0;     // CUdeviceptr
  bool mapped_ = false;
};

}  // namespace collectived::ipc

#endif  // COLLECTIVED_IPC_CUMEM_WINDOW_H_
