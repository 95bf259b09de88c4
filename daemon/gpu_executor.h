// Daemon-executed GPU communicators: one progress thread per communicator
// consumes every rank's op ring in index order (clients' ring-post kernels
// fill it, stream-ordered after their inputs), matches the descriptors, runs
// every rank's part in one fused launch on the daemon's stream, and publishes
// each rank's completion from that stream. The clients' wait kernels spin on
// it. Built with the CUDA toolkit; elsewhere Start() refuses.
#ifndef COLLECTIVED_DAEMON_GPU_EXECUTOR_H_
#define COLLECTIVED_DAEMON_GPU_EXECUTOR_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <thread>

#include "collectived/status.h"
#include "daemon/gpu_comm_memory.h"
#include "ring/segment_layout.h"

namespace collectived::daemon {

class GpuExecutor {
 public:
  // `memory` must outlive the executor.
  // copy_engine_gather: all-gathers as peer copies on the copy engines.
  static Status Start(ring::CommSegment seg, std::shared_ptr<GpuCommMemory> memory, bool copy_engine_gather,
                      std::unique_ptr<GpuExecutor>* out);
  ~GpuExecutor();  // Stop()
  void Stop();

  uint64_t ops() const { return ops_.load(); }
  // Mean time from the last rank's ready to the fused launch being enqueued.
  double handoff_us_mean() const;

 private:
  GpuExecutor() = default;
  void Run();
  Status RunOp(uint64_t index);
  bool Aborted() const;  // the segment's abort, or a kernel's give-up (the device abort word)

  ring::CommSegment seg_;
  std::shared_ptr<GpuCommMemory> memory_;
  bool copy_engine_gather_ = false;
  std::atomic<bool> stop_{false};
  std::atomic<uint64_t> ops_{0};
  std::atomic<uint64_t> handoff_ns_{0};
  void* stream_ = nullptr;
  void* registered_ = nullptr;
  std::thread thread_;
};

}  // namespace collectived::daemon

#endif  // COLLECTIVED_DAEMON_GPU_EXECUTOR_H_
