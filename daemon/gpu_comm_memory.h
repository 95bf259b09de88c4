// The device memory of one GPU communicator, owned by the daemon: a control
// window on the first rank's device and one rank window (input slot, then
// symmetric heap) per rank on that rank's device, all cuMem allocations that
// members import by fd (ring/gpu_control_layout.h has the layout), or,
// where cuMem memory cannot be exported, cudaMalloc memory that members open
// by legacy cudaIpc handle.
// Built with the CUDA toolkit; elsewhere Create() says the backend is absent.
#ifndef COLLECTIVED_DAEMON_GPU_COMM_MEMORY_H_
#define COLLECTIVED_DAEMON_GPU_COMM_MEMORY_H_

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "collectived/status.h"
#include "daemon/gpu_blocks.h"

namespace collectived::daemon {

// Ranks of one GPU communicator (the kernels' kMaxDeviceRanks).
constexpr uint32_t kMaxGpuRanks = 16;

// True when this build has the CUDA backend and at least one GPU is visible.
bool CudaBackendAvailable(std::string* why_not);

// How the windows are shared: "cumem" (fds), "legacy-ipc" (cudaIpc handles),
// or "auto" (cumem where every device can export it, else legacy-ipc).
enum class GpuMemoryExport { kAuto, kCuMem, kLegacyIpc };

class GpuCommMemory {
 public:
  // `device_uuids[r]` is rank r's device. slot_bytes and heap_bytes are
  // rounded up to the heap alignment. Blocks per rank: GpuBlocksPerRank
  // (daemon/gpu_blocks.h) over `load` (GpuLoadOf: the devices and the
  // daemon's other live GPU communicators there; this adds their SMs), at
  // most `max_blocks_per_rank` where that is not 0; crowding() from the same.
  static Status Create(const std::vector<std::string>& device_uuids, uint64_t slot_bytes, uint64_t heap_bytes,
                       GpuMemoryExport how, uint32_t max_blocks_per_rank, std::map<std::string, GpuDeviceLoad> load,
                       std::unique_ptr<GpuCommMemory>* out);
  ~GpuCommMemory();

  // Window w: 0 is the control window, 1 + r rank r's. A new fd the caller closes.
  Status ExportFd(uint32_t w, int* fd) const;
  // Legacy windows: the cudaIpc handle of window w (members open it). Such
  // memory must outlive every member's mapping: keep this object until every
  // member session ended.
  bool legacy_ipc() const { return legacy_ipc_; }
  const std::string& legacy_handle(uint32_t w) const;
  uint32_t window_count() const;
  uint64_t window_bytes(uint32_t w) const;
  const std::string& window_device(uint32_t w) const;
  // The daemon's own mapping of window w, and its device ordinal here.
  void* window_ptr(uint32_t w) const;
  int window_ordinal(uint32_t w) const;
  uint64_t slot_bytes() const { return slot_bytes_; }
  uint64_t heap_bytes() const { return heap_bytes_; }
  // Blocks of every rank's kernel (Create), the same for every rank:
  // barriers pair blocks by index.
  uint32_t blocks() const { return blocks_; }
  // Empty, or where this and the other live communicators would need more
  // blocks at once than a shared device has (GpuCrowding).
  const std::string& crowding() const { return crowding_; }
  // True when every window is on one device.
  bool single_device() const;
  // Sets the control window's abort word: every kernel of the communicator
  // gives up its spins (after the segment's abort reason was written).
  Status SetAbort() const;
  // The device-side counts: ops posted and finished per rank, the error and abort words.
  struct Counts {
    std::vector<uint64_t> posted, completed;
    int32_t error = 0;
    uint64_t abort = 0;
  };
  Status ReadCounts(uint32_t world, Counts* out) const;
  // The abort word alone (what the daemon's executor checks before each launch).
  Status ReadAbort(uint64_t* out) const;

 private:
  struct Windows;
  GpuCommMemory() = default;
  std::unique_ptr<Windows> windows_;
  uint64_t slot_bytes_ = 0;
  uint64_t heap_bytes_ = 0;
  uint32_t blocks_ = 1;
  std::string crowding_;
  bool legacy_ipc_ = false;
};

}  // namespace collectived::daemon

#endif  // COLLECTIVED_DAEMON_GPU_COMM_MEMORY_H_
