// Private: how a daemon-executed rank runs its ops. Instead of the kernel the
// rank's stream gets a ring post (the descriptor into the op ring, after any
// copy-in) and a wait on the daemon's completion word; the daemon runs every
// rank's part in one fused launch. A class, not free functions, so that it
// uses the engine without the engine knowing it (GpuCommunicator owns both).
#ifndef COLLECTIVED_CLIENT_SRC_DAEMON_POSTER_H_
#define COLLECTIVED_CLIENT_SRC_DAEMON_POSTER_H_

#include <cstdint>
#include <memory>

#include "base/gpu/gpu_runtime.h"
#include "client/src/gpu_rank_engine.h"

namespace collectived {

class DaemonPoster {
 public:
  // Registers the segment's control page with the GPU runtime, so that ring
  // posts can write the op ring and the wait kernel can poll `completed`.
  static Status Create(GpuRankEngine& engine, std::unique_ptr<DaemonPoster>* out);
  ~DaemonPoster();
  DaemonPoster(const DaemonPoster&) = delete;
  DaemonPoster& operator=(const DaemonPoster&) = delete;

  // One op (validated by the caller): where each buffer lies for the daemon,
  // staged through this rank's slot when it lies in neither the heap nor a
  // registered buffer, then the engine's pipeline with PostAndWaitForDaemon.
  Status Post(CollectiveKind kind, const void* send, void* recv, uint64_t count, DataType dtype, ReduceOp op,
              void* stream, std::shared_ptr<GpuOpState>* out);

 private:
  explicit DaemonPoster(GpuRankEngine& engine);
  // Daemon-executed: the descriptor into the ring (after the copy-in), then a
  // wait on the daemon's completion word.
  Status PostAndWaitForDaemon(const ring::OpDescriptor& d, gpuStream_t stream);

  GpuRankEngine& engine;
  // The engine's, by the names PostAndWaitForDaemon reads them by.
  const GpuCommSetup& setup;
  const std::unique_ptr<ipc::GpuWindow>& control;
  uint64_t* const abort_word;
  void* registered = nullptr;  // the segment's control page, registered with the GPU runtime
  // Device views of the segment's words.
  uint64_t* posted_mirror = nullptr;
  uint64_t* completed_mirror = nullptr;
  uint8_t* ring = nullptr;  // device view of this rank's op ring
};

}  // namespace collectived

#endif  // COLLECTIVED_CLIENT_SRC_DAEMON_POSTER_H_
