// Private: the GPU side of one rank's communicator in a client process
// (client-executed mode). It maps the communicator's device memory (the
// daemon exports it as cuMem fds), registers the segment's control page with
// the CUDA context, and enqueues each op on the caller's stream:
//
//   post      device-side index (graph replay takes a new one), mirrored to the segment
//   copy-in   staged ops only: send -> this rank's input slot
//   kernel    start barrier + device-side matcher, data, end barrier
//   copy-out  staged two-shot only: input slot -> recv
//   complete  done = index + 1; the op's verdict into the handle's host slot
//   event     what Handle::WaitOn(stream) and Handle::Wait() wait for
//
// Daemon-executed communicators replace the kernel by a ring post (the
// descriptor into the op ring, stream-ordered after the copy-in) and a wait
// kernel on the daemon's completion word; the daemon runs every rank's part
// in one fused launch.
//
// One rank's eager ops run in the order they were enqueued, even across
// streams (each waits for the previous one); graph replays must be ordered
// against that rank's other ops by the caller (one stream, or events).
//
// Ops on spans of the symmetric heap (Communicator::AllocBuffer), or of the
// callers' own cuMem buffers registered by every rank (RegisterBuffer), run
// zero-copy: peers read and write them in place. Any other device pointers
// are staged through the fixed input slots (at most max_message_bytes per rank).
// No CUDA type appears here, so the rest of the client library compiles
// without the toolkit; gpu_communicator_stub.cc stands in when it is absent.
//
// The parts, each used only by those after it: symmetric_heap and
// gpu_queue_lease (pure host logic), gpu_op (the handle and its verdict),
// registered_buffers, gpu_rank_engine (the mapped memory and Enqueue),
// daemon_poster, and gpu_communicator.cc (the ops: checks, algorithm, kernel arguments).
#ifndef COLLECTIVED_CLIENT_SRC_GPU_COMMUNICATOR_H_
#define COLLECTIVED_CLIENT_SRC_GPU_COMMUNICATOR_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "collectived/status.h"
#include "collectived/types.h"
#include "ring/segment_layout.h"

namespace collectived {

struct OpTrace;  // collectived/client.h


struct GpuOpState;     // what a Handle of a GPU op holds (gpu_op.h)
class GpuRankEngine;  // the rank's mapped memory and op pipeline (gpu_rank_engine.h)
class DaemonPoster;   // daemon-executed ops' ring posts (daemon_poster.h)

// Waits on the host for a GPU op (polls its event until the deadline).
Status GpuOpWait(const GpuOpState& op, int64_t timeout_ms);
// True when done; *status gets the op's verdict then.
bool GpuOpTest(const GpuOpState& op, Status* status);
// Makes `stream` wait for the op.
Status GpuOpWaitOn(const GpuOpState& op, void* stream);

// Fetches the fd of a window from the daemon (the caller owns it).
using FetchFd = std::function<Status(uint64_t window_id, int* fd, uint64_t* bytes)>;

struct GpuWindowRef {
  uint64_t window_id = 0;
  uint64_t bytes = 0;
  std::string device_uuid;
  std::string legacy_ipc_handle;  // set: open this cudaIpc handle, no fd to fetch
};

// What the daemon answers a registration: the buffer id every rank shares,
// and per rank its allocation (a window to fetch) and the buffer's offset in it.
struct GpuRegistrationReply {
  uint64_t buffer_id = 0;
  std::vector<GpuWindowRef> allocations;
  std::vector<uint64_t> offsets;
};

struct GpuCommSetup {
  int device = 0;  // this rank's ordinal in this process
  uint32_t rank = 0;   // in the segment (of this node's ranks, for a communicator across nodes)
  uint32_t world = 0;  // every node's ranks: an all-gather's output holds this many inputs
  ring::CommSegment seg;
  std::shared_ptr<void> seg_keep;  // keeps the segment mapped
  GpuWindowRef control;
  std::vector<GpuWindowRef> ranks;
  uint64_t slot_bytes = 0;
  uint64_t heap_bytes = 0;
  // Daemon-executed: the client posts into the op ring and waits for the
  // daemon's fused launch instead of running the kernel itself.
  bool daemon_executed = false;
  uint32_t blocks = 0;  // per rank's kernel, the same on every rank (the daemon's choice)
  bool op_trace = false;  // CommunicatorOptions::gpu_op_trace
  // Tells the daemon about an op captured into a graph (at capture time).
  std::function<Status(CollectiveKind, DataType, ReduceOp, uint64_t count)> register_plan;
  // Registers this rank's allocation (`fd`, not taken) with the daemon; returns when every rank did.
  std::function<Status(int fd, uint64_t allocation_bytes, uint64_t offset, uint64_t bytes, GpuRegistrationReply*)>
      register_buffer;
  // Gives the daemon's reference to this rank's registered allocation back.
  std::function<Status(uint64_t buffer_id)> deregister_buffer;
  std::shared_ptr<void> queue_lease;  // from LeaseGpuRankQueue, held while the communicator lives
};

// A buffer ops run zero-copy on (a heap range, or a registered buffer of the
// caller's): its pointer, what keeps it mapped, and what gives it back.
struct GpuHeapBuffer {
  uint64_t id = 0;  // registered buffers: the id every rank shares; heap: 0
  void* ptr = nullptr;
  uint64_t bytes = 0;
  std::shared_ptr<void> keep;
  std::function<Status()> release;
};

class GpuCommunicator {
 public:
  static Status Create(GpuCommSetup setup, const FetchFd& fetch, std::unique_ptr<GpuCommunicator>* out);
  ~GpuCommunicator();

  // Same sizes in the same order on every rank give every rank the same offset.
  Status AllocBuffer(uint64_t bytes, GpuHeapBuffer* out);
  // This rank's own cuMem memory [ptr, ptr + bytes), registered by every rank
  // in the same order (collective): ops on it run zero-copy.
  Status RegisterBuffer(void* ptr, uint64_t bytes, GpuHeapBuffer* out);
  Status AllReduce(const void* send, void* recv, uint64_t count, DataType dtype, ReduceOp op, void* stream,
                   std::shared_ptr<GpuOpState>* out);
  Status AllGather(const void* send, void* recv, uint64_t count, DataType dtype, void* stream,
                   std::shared_ptr<GpuOpState>* out);
  // True when ops on [p, p + bytes) run zero-copy (heap or registered buffer).
  bool ZeroCopy(const void* p, uint64_t bytes) const;
  // The failed verdict of this rank's last eager op, if it finished failing,
  // or a failure any kernel of this rank recorded (graph replays included:
  // GpuRankEngine::rank_error); else OK. No GPU call.
  Status LastOpError() const;
  // Sets the communicator's abort word in device memory from the host (a
  // private stream): every rank's spinning kernel gives up.
  Status RaiseAbort();
  // Waits for every eager op this rank enqueued, and for every op of a
  // replayed graph that has started (before Destroy unmaps anything).
  Status Quiesce(int64_t timeout_ms);
  // Gives back the hardware-queue reservation (on Destroy, once quiesced).
  void ReleaseQueueLease();
  // Every rank's trace of op `index` (client-executed; GPU clock, see OpTrace).
  Status ReadTrace(uint64_t index, std::vector<OpTrace>* per_rank) const;

 private:
  GpuCommunicator(std::unique_ptr<GpuRankEngine> engine, std::unique_ptr<DaemonPoster> daemon);
  // Until this rank's device done word reaches its op counter (every op that
  // started, graph-replayed ones too, completed) or `deadline_ns`.
  Status WaitStartedOpsDone(int64_t deadline_ns);
  std::unique_ptr<GpuRankEngine> engine_;
  std::unique_ptr<DaemonPoster> daemon_;  // daemon-executed communicators only
};

// "GPU-..." UUID of device `ordinal` (the name the daemon knows it by).
Status GpuDeviceUuid(int ordinal, std::string* uuid);

// Creates `device`'s context and loads every collective kernel, before the
// rank joins. These are a process's slow first GPU steps (seconds where
// several ranks start at once under a fresh MPS server); after the join they
// would fall between the barrier and the first op, whose kernels wait for a
// late peer only up to the op timeout.
Status WarmGpuDevice(int device);

}  // namespace collectived

#endif  // COLLECTIVED_CLIENT_SRC_GPU_COMMUNICATOR_H_
