// Daemon-executed GPU communicators: one progress thread per communicator
// consumes every rank's op ring in index order (clients' ring-post kernels
// fill it, stream-ordered after their inputs), matches the descriptors, runs
// every rank's part in one fused launch on the daemon's stream, and publishes
// each rank's completion from that stream. It also hosts the copy-engine
// paths (Paths). The clients' wait kernels spin on
// it. Built with the CUDA toolkit; elsewhere Start() refuses.
#ifndef COLLECTIVED_DAEMON_GPU_EXECUTOR_H_
#define COLLECTIVED_DAEMON_GPU_EXECUTOR_H_

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "collectived/status.h"
#include "collectived/types.h"
#include "daemon/gpu_comm_memory.h"
#include "executor/host_executor.h"
#include "ring/segment_layout.h"

namespace collectived::daemon {

class GpuExecutor {
 public:
  struct Paths {
    bool copy_engine_gather = false;  // all-gathers as peer copies on the copy engines
    bool copy_engine_reduce = false;  // all-reduces: copy-engine movement, SM reduction
    uint64_t scratch_bytes = 256ull << 20;  // the copy-engine all-reduce's scratch, at most
  };
  // `memory` must outlive the executor. `exchange` (may be null; outlives
  // the executor): a communicator across nodes (docs/multinode.md). Each op
  // then reduces (or gathers) this node's ranks on the GPU, copies the
  // node's part to pinned host memory on the copy engines, exchanges it
  // with the other nodes over the network (this thread: the proxy that sees
  // every device-posted op, eager or replayed from a graph), and copies the
  // result back into every rank's output before publishing completion.
  static Status Start(ring::CommSegment seg, std::shared_ptr<GpuCommMemory> memory, const Paths& paths,
                      host::NodeExchange* exchange, std::unique_ptr<GpuExecutor>* out);
  ~GpuExecutor();  // Stop()
  void Stop();

  // A buffer every rank registered (RegisterGpuBuffer): rank r's allocation
  // is `fds[r]` (borrowed; a dup is imported here) of `allocation_bytes[r]`,
  // the buffer at `offsets[r]` in it. Ops name it by `buffer_id`.
  Status AddCallersBuffer(uint64_t buffer_id, const std::vector<int>& fds, const std::vector<uint64_t>& allocation_bytes,
                          const std::vector<uint64_t>& offsets, uint64_t bytes);
  // Unmaps it here: every rank deregistered it, after its ops on it finished.
  void RemoveCallersBuffer(uint64_t buffer_id);

  // A rank captured an op into a graph (RegisterPlan): its replays post from
  // the device unannounced, so from now on the executor polls while idle
  // instead of sleeping until an eager op is announced (op_ring.h).
  void NoteCapturedPlan();

  uint64_t ops() const { return ops_.load(); }
  // Mean time from the last rank's ready to the fused launch being enqueued.
  double handoff_us_mean() const;

 private:
  GpuExecutor() = default;
  void Run();
  Status RunOp(uint64_t index);
  bool Aborted() const;  // the segment's abort, or a kernel's give-up (the device abort word)
  // RunOp's end for a communicator across nodes: `inputs`/`outputs` are the
  // ranks' buffers (device pointers in the daemon's mappings).
  Status RunAcrossNodes(uint64_t index, const ring::OpDescriptor& d, const void* const* inputs,
                        void* const* outputs);
  // RunAcrossNodes's all-reduce: the node's `part` (device) through `host`,
  // pipelined in chunks, into every rank's output.
  Status PipelineAllReduce(uint64_t index, const ring::OpDescriptor& d, const uint8_t* part, uint8_t* host,
                           void* const* outputs);
  static constexpr uint64_t kStageChunkBytes = 4ull << 20;
  static constexpr uint64_t kMaxStageChunks = 64;
  host::NodeExchange* exchange_ = nullptr;
  void* pinned_ = nullptr;  // host staging of the exchange, grown on demand
  uint64_t pinned_bytes_ = 0;
  std::vector<void*> stage_events_;  // one per chunk in flight (PipelineAllReduce)

  ring::CommSegment seg_;
  std::shared_ptr<GpuCommMemory> memory_;
  // Enqueues a copy-engine all-reduce of rank k's `inputs[k]` into every
  // `outputs[r]` (device pointers in the daemon's mappings).
  Status CopyEngineAllReduce(DataType dtype, ReduceOp op, const void* const* inputs, void* const* outputs,
                             uint32_t world, uint64_t count);

  Status PrepareCopyEngineAllReduce(uint32_t world);  // scratch and lanes, at the first such op
  void ReleaseCopyEngineAllReduce();                 // after the daemon's stream drained

  Paths paths_;
  void* scratch_ = nullptr;
  uint64_t scratch_size_ = 0;
  // Streams the copies are spread over, so several copy engines work at once
  // (one stream runs its copies one after another), and an event per lane
  // plus one to fork them from the daemon's stream.
  std::vector<void*> lanes_;
  std::vector<void*> lane_done_;
  void* fork_ = nullptr;
  // The longest an idle executor sleeps unwoken (a safety net: every
  // announcement, abort and Stop wakes it).
  static constexpr int64_t kIdleSliceNs = 1'000'000'000;
  // Within this of its last op the executor keeps polling (5 us sleeps), so
  // back-to-back ops never pay a futex wake-up; only then it sleeps.
  static constexpr int64_t kHotNs = 100'000'000;
  int64_t last_op_ns_ = 0;  // the executor thread's only
  std::atomic<bool> stop_{false};
  std::atomic<bool> captured_plans_{false};
  std::atomic<uint64_t> ops_{0};
  std::atomic<uint64_t> handoff_ns_{0};
  void* stream_ = nullptr;
  void* registered_ = nullptr;
  // Callers' registered buffers, mapped here: per rank the buffer's address.
  struct CallersBuffer {
    uint64_t bytes = 0;
    std::vector<uint8_t*> at;
    std::vector<std::shared_ptr<void>> mappings;
  };
  std::mutex callers_mu_;
  std::map<uint64_t, CallersBuffer> callers_buffers_;
  std::thread thread_;
};

}  // namespace collectived::daemon

#endif  // COLLECTIVED_DAEMON_GPU_EXECUTOR_H_
