// Private: one rank of an NCCL communicator. It owns a collectived client
// session and a GPU communicator on it, and composes NCCL's collectives from
// the communicator's all-reduce and all-gather, enqueued on the caller's
// stream (so they capture into CUDA graphs):
//
//   all-reduce      one op; staged buffers above the staging slot in
//                   slot-sized pieces, one op each (every rank cuts the same)
//   all-gather      one op; 1-byte and fp8 types as 32-bit words; staged
//                   outputs above the slot through a temporary, one 2D copy
//                   per piece
//   broadcast       an in-place integer sum of the root's words and zeros on
//                   the other ranks: exact for any bits, no extra memory
//   reduce-scatter  all-reduce into a temporary, this rank's share copied out
//   reduce          all-reduce into a temporary, copied out on the root
//
// Temporaries come from the stream-ordered allocator (cudaMallocAsync), which
// a graph capture records as allocation nodes. Every rank makes the same
// choices from the same arguments, so their ops agree; a rank that passes a
// registered buffer where a peer passes a staged one gets a mismatch
// (ncclInvalidUsage), as with any op whose arguments differ between ranks.
#ifndef COLLECTIVED_NCCL_SRC_COMM_H_
#define COLLECTIVED_NCCL_SRC_COMM_H_

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <shared_mutex>
#include <string>
#include <utility>
#include <vector>

#include "collectived/client.h"
#include "nccl.h"

namespace collectived::nccl {

struct CommParams {
  std::string key;     // the collectived communicator's key
  std::string socket;  // the daemon's
  int world = 0;
  int rank = 0;
  int device = 0;
  bool blocking = true;
  std::string name;  // config->commName, for the session's name
};

class Comm {
 public:
  explicit Comm(CommParams p);
  ~Comm();

  // Connects and joins; returns when every rank joined (or the join timeout
  // passed). Once: blocking init calls it in place, non-blocking init on a
  // thread of its own.
  void Init();
  // Waits (bounded) for Init; its status.
  Status WaitReady();
  const CommParams& params() const { return params_; }

  Status AllReduce(const void* send, void* recv, size_t count, int datatype, int op, cudaStream_t s);
  Status AllGather(const void* send, void* recv, size_t count, int datatype, cudaStream_t s);
  Status Broadcast(const void* send, void* recv, size_t count, int datatype, int root, cudaStream_t s);
  Status ReduceScatter(const void* send, void* recv, size_t recvcount, int datatype, int op, cudaStream_t s);
  Status Reduce(const void* send, void* recv, size_t count, int datatype, int op, int root, cudaStream_t s);

  // (color, key) of every rank, by an all-gather on this communicator (ncclCommSplit).
  Status ExchangeColorKey(int color, int key, std::vector<std::pair<int, int>>* all);
  // The how-many-th split of this communicator (every rank splits in the same order).
  uint32_t NextSplit() { return splits_.fetch_add(1); }

  // ncclCommRegister: zero-copy registration of cuMem memory (collective);
  // other memory gets a handle too and stays staged.
  Status Register(void* buff, size_t size, void** handle);
  Status Deregister(void* handle);

  // Waits for this rank's ops and leaves.
  Status Finalize();
  // Ends every rank's ops now and leaves (any thread, ops in flight).
  Status Abort();
  // ncclInProgress while forming; else the communicator's first failure.
  ncclResult_t AsyncError(Status* why);

 private:
  // Shared lock held by callers of every op; ready or a status why not.
  Status Usable() const;
  // Usable, and the kernel type and reduction of an NCCL (datatype, op).
  Status UsableReduction(int datatype, int op, DataType* dt, ReduceOp* rop) const;
  Status ReduceIn(const void* send, void* recv, uint64_t count, DataType dt, ReduceOp op, cudaStream_t s);
  // Rank k's `count` elements of `dt` land at recv + k * pitch, `valid` bytes of each.
  Status GatherPieces(const void* send, uint64_t count, DataType dt, void* recv, uint64_t pitch, uint64_t valid,
                      cudaStream_t s);

  const CommParams params_;
  std::unique_ptr<Client> client_;
  std::unique_ptr<Communicator> comm_;
  uint64_t slot_bytes_ = 0;

  enum class State { kForming, kReady, kFailed, kClosed };
  mutable std::mutex state_mu_;
  std::condition_variable state_cv_;
  State state_ = State::kForming;  // guarded by state_mu_
  Status init_status_;             // guarded by state_mu_
  std::atomic<bool> abort_requested_{false};

  // Ops hold it shared; Finalize and Abort take it alone to tear down.
  mutable std::shared_mutex use_mu_;
  std::atomic<uint32_t> splits_{0};
};

}  // namespace collectived::nccl

#endif  // COLLECTIVED_NCCL_SRC_COMM_H_
