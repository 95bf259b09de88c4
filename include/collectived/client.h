// collectived client library.
//
//   std::unique_ptr<collectived::Client> client;
//   Status s = Client::Connect({.socket_path = "/run/collectived/collectived.sock"}, &client);
//   Buffer buf;  client->AllocBuffer(bytes, &buf);          // daemon-owned, mapped here
//   std::unique_ptr<Communicator> comm;
//   client->CreateCommunicator({.key = "job-42", .world_size = 4, .rank = r}, &comm);
//   Handle h;  comm->AllReduce(buf, buf, count, DataType::kFloat32, ReduceOp::kSum, &h);
//   h.Wait();                                               // polls shared memory, no RPC
//
// Ops are posted into the communicator's shared op ring (no RPC on the hot
// path). Do not touch a send buffer until its op completed, nor read a receive
// buffer before. Ops on one communicator must be posted in the same order by
// every rank, from one thread at a time per communicator (as with NCCL).
//
// GPU communicators (CommunicatorOptions.device >= 0, a daemon on the cuda
// backend) run on the caller's CUDA stream and capture into CUDA graphs:
//
//   client->CreateCommunicator({.key = "job-42", .world_size = 4, .rank = r, .device = 0,
//                               .gpu_heap_bytes = 1 << 30}, &comm);
//   Buffer x;  comm->AllocBuffer(bytes, &x);                // symmetric heap: zero-copy
//   comm->AllReduce(x.data(), x.data(), count, DataType::kBFloat16, ReduceOp::kSum, stream, &h);
//   h.WaitOn(other_stream);                                 // any stream, any number of times
//
// Any other device pointers work too, staged through the communicator's
// fixed slots (up to max_message_bytes per rank).
#ifndef COLLECTIVED_CLIENT_H_
#define COLLECTIVED_CLIENT_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "collectived/api_version.h"
#include "collectived/status.h"
#include "collectived/types.h"

namespace collectived {

// A GPU stream (cudaStream_t or hipStream_t), opaque so that this header
// needs no GPU runtime.
using GpuStream = void*;
// Handle::op_index() of a GPU op: its index is taken on the device.
constexpr uint64_t kIndexOnDevice = UINT64_MAX;

class ClientImpl;
class CommunicatorImpl;
struct GpuHeapBuffer;
struct HandleState;
struct BufferState;

struct ClientOptions {
  std::string socket_path;  // the daemon's gRPC Unix socket
  std::string client_name = "client";
  int rpc_timeout_ms = 10000;  // deadline of every control-plane call
};

struct VersionInfo {
  std::string daemon_version;
  uint32_t api_major = 0;
  uint32_t api_minor = 0;
  std::vector<std::string> backends;
  std::string active_backend;
  std::vector<std::string> capabilities;
  uint64_t max_message_bytes = 0;
};

// Daemon-owned shared memory mapped into this process. Move-only; freed (in
// the daemon too) on destruction or Free().
class Buffer {
 public:
  Buffer();
  ~Buffer();
  Buffer(Buffer&&) noexcept;
  Buffer& operator=(Buffer&&) noexcept;

  void* data() const;  // device memory for a GPU communicator's buffer
  uint64_t size() const;
  uint64_t id() const;  // 0 for a GPU communicator's buffer
  bool valid() const { return state_ != nullptr; }
  // FAILED_PRECONDITION while a posted op still uses the buffer.
  Status Free();

  template <typename T>
  T* as() const { return static_cast<T*>(data()); }

 private:
  friend class ClientImpl;
  friend class Communicator;
  std::shared_ptr<BufferState> state_;
};

// A byte offset into a Buffer.
struct BufferSpan {
  BufferSpan(const Buffer& b, uint64_t off = 0) : buffer(&b), offset(off) {}  // NOLINT: implicit on purpose
  const Buffer* buffer;
  uint64_t offset;
};

// Completion of one op: (communicator, rank, op index). Copyable; every copy
// observes the same completion, any number of times, from any thread.
class Handle {
 public:
  Handle() = default;
  bool valid() const { return state_ != nullptr; }
  uint64_t op_index() const;
  // Waits until the op completed (all of it, copy-out included) and returns
  // its status. timeout_ms < 0: the communicator's op timeout plus a margin.
  Status Wait(int timeout_ms = -1) const;
  // True when complete; *status gets the op's status then.
  bool Test(Status* status) const;
  // GPU ops: `stream` waits for the whole op (copy-out included) without
  // blocking the host; any stream, any number of times, inside a graph
  // capture too. Host ops: waits on the host, like Wait().
  Status WaitOn(GpuStream stream) const;
  // Drops this reference. Idempotent.
  void Release() { state_.reset(); }

 private:
  friend class CommunicatorImpl;
  std::shared_ptr<HandleState> state_;
};

// When each rank finished an op's phases (CLOCK_MONOTONIC ns): lets a stress
// harness prove that a race window was open. valid == false when the op is
// older than the status history. GPU communicators (client-executed) trace
// in the GPU's own clock (ns): compare them only with each other, for ranks
// of one GPU; index k is the rank's k-th op, eager or graph-replayed.
struct OpTrace {
  bool valid = false;          // the rank completed this op
  bool posted = false;         // the rank took this op (its trace entry is this op's)
  int64_t reads_done_ns = 0;   // finished reading peers' data (0: not yet)
  int64_t output_done_ns = 0;  // last write to its output (0: not yet)
  int64_t completed_ns = 0;    // published completion
};

struct CommunicatorOptions {
  std::string key;          // shared by all members (like an NCCL unique id)
  uint32_t world_size = 0;
  uint32_t rank = 0;
  ExecutionMode mode = ExecutionMode::kDefault;
  uint32_t op_timeout_ms = 0;   // 0: the daemon's default; all members must agree
  int join_timeout_ms = 60000;  // how long to wait for every member to join
  // GPU communicator: this rank's CUDA device ordinal (in this process); -1: host.
  int device = -1;
  // GPU communicator: bytes of each rank's symmetric heap (AllocBuffer); all members must agree.
  uint64_t gpu_heap_bytes = 0;
  // GPU communicator, client-executed: this rank's kernels keep the per-op
  // trace GetOpTrace reads (a stress harness proving a race window open).
  // Off, an op saves the trace's writes and the release fences that order
  // them (docs/latency.md), and GetOpTrace is FAILED_PRECONDITION. Set it on
  // every rank of the communicator: a trace holds every rank's entries, and a
  // rank without it shows as not posted. Host communicators always keep theirs.
  bool gpu_op_trace = false;
};

class Communicator {
 public:
  ~Communicator();  // Destroy(), ignoring its status

  uint32_t rank() const;
  uint32_t world_size() const;
  uint64_t id() const;
  ExecutionMode mode() const;
  uint64_t max_message_bytes() const;

  // recv[j] = op over ranks of send[j], j < count. In place when send and recv
  // are the same span.
  Status AllReduce(BufferSpan send, BufferSpan recv, uint64_t count, DataType dtype, ReduceOp op, Handle* handle);
  // recv[k * count + j] = send of rank k [j]. In place when send is recv's
  // rank-th chunk.
  Status AllGather(BufferSpan send, BufferSpan recv, uint64_t count, DataType dtype, Handle* handle);
  // GPU communicators. Collective in effect: every rank allocates the same
  // sizes in the same order, so a buffer sits at the same heap offset on
  // every rank and ops on it run zero-copy. Freed by the Buffer: Free waits
  // (up to the op timeout) for the collective ops this rank enqueued before
  // it, not for the caller's own kernels on the buffer (order those, e.g. by
  // synchronizing their stream, before freeing). Keep a buffer alive while a
  // CUDA graph that uses it may still be launched.
  Status AllocBuffer(uint64_t bytes, Buffer* out);
  // GPU communicators, client-executed: registers this rank's own device
  // memory [ptr, ptr + bytes) (a framework's tensor, say) so that ops on it
  // run zero-copy, as on heap buffers. It must be cuMem memory exportable as
  // a POSIX fd (cuMemCreate with requestedHandleTypes =
  // CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR); cudaMalloc and pool memory are
  // refused (INVALID_ARGUMENT) and stay staged. Collective: every rank
  // registers buffers of the same size in the same order, and the call
  // returns once all did (or the join timeout passed). The Buffer stands for
  // the registration (data() is ptr, id() the buffer id every rank shares);
  // Free waits for this rank's ops enqueued before it, then deregisters.
  // Keep the memory mapped while it is registered, and while a CUDA graph
  // that uses it may still be launched.
  Status RegisterBuffer(void* ptr, uint64_t bytes, Buffer* out);
  // Enqueued on `stream` (eager or captured). send/recv: device memory of this
  // rank's device; heap buffers (AllocBuffer) and registered buffers
  // (RegisterBuffer) run zero-copy, anything else is staged through the fixed slots. In place when send == recv (all-gather:
  // send is recv's rank-th chunk). Every rank's op at the same index must
  // agree (kind, type, op, count, buffers and offsets): the kernels check it.
  Status AllReduce(const void* send, void* recv, uint64_t count, DataType dtype, ReduceOp op, GpuStream stream,
                   Handle* handle);
  Status AllGather(const void* send, void* recv, uint64_t count, DataType dtype, GpuStream stream, Handle* handle);
  bool on_gpu() const;

  // The same ops posted by the daemon through the Submit RPC, for callers that
  // do not post into the ring themselves. Needs a daemon-executed communicator.
  Status SubmitAllReduce(BufferSpan send, BufferSpan recv, uint64_t count, DataType dtype, ReduceOp op,
                         Handle* handle);
  Status SubmitAllGather(BufferSpan send, BufferSpan recv, uint64_t count, DataType dtype, Handle* handle);

  // GPU communicators: true when ops on [ptr, ptr + bytes) run zero-copy
  // (a heap or registered buffer of this rank), false when they are staged
  // (and then limited to max_message_bytes per rank).
  bool ZeroCopy(const void* ptr, uint64_t bytes) const;

  // The communicator's first failure, cheaply (no RPC, no GPU call) and from
  // any thread: an abort (a peer died, a node was lost, Abort), the verdict
  // of this rank's last eager GPU op (a deadline, a mismatch), or the failure
  // a kernel of this rank recorded (a graph-replayed op's too). A peer that
  // destroyed its communicator when done (its own ops all succeeded) is not
  // a failure by itself: it
  // becomes one here when an op of this rank fails for want of that peer
  // (a host op: once waited for). OK while the communicator is healthy.
  Status AsyncError() const;
  // Ends every rank's ops now and leaves without waiting for them: this
  // rank's in-flight and stalled ops give up (their streams move on), peers'
  // ops end ABORTED naming this rank and `reason`, and later ops here fail.
  // From any thread, also while another thread posts ops or waits; returns
  // within the RPC timeout plus a bounded wait for this rank's kernels
  // (their memory stays mapped if they did not stop). Idempotent.
  Status Abort(const std::string& reason);

  // Per-rank timestamps of op `index` (debugging and stress testing).
  Status GetOpTrace(uint64_t index, std::vector<OpTrace>* per_rank) const;

  // Waits for this rank's posted ops, then leaves. Peers that still post ops
  // get ABORTED. Idempotent. GPU: waits for this rank's eager ops and for
  // its graph-replayed ops that have started; do not launch graphs that
  // captured its ops afterwards.
  Status Destroy();

 private:
  friend class ClientImpl;
  explicit Communicator(std::unique_ptr<CommunicatorImpl> impl);
  static void WrapGpuBuffer(GpuHeapBuffer b, Buffer* out);
  std::unique_ptr<CommunicatorImpl> impl_;
};

class Client {
 public:
  // Checks the daemon's API major version, attaches a session and opens the
  // fd socket (the session's lease).
  static Status Connect(const ClientOptions& options, std::unique_ptr<Client>* out);
  ~Client();  // detaches; the daemon frees what the session held

  Status GetVersion(VersionInfo* out);
  Status AllocBuffer(uint64_t bytes, Buffer* out);
  // Blocks until every member joined (or join_timeout_ms passed).
  Status CreateCommunicator(const CommunicatorOptions& options, std::unique_ptr<Communicator>* out);
  uint64_t session_id() const;
  // The session's secret: a gRPC call of one's own that names this session
  // must carry it as kSessionTokenMetadata (api_version.h). Keep it private.
  uint64_t session_token() const;

 private:
  explicit Client(std::shared_ptr<ClientImpl> impl);
  std::shared_ptr<ClientImpl> impl_;
};

}  // namespace collectived

#endif  // COLLECTIVED_CLIENT_H_
