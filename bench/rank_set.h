// What collective-bench drives: the ranks this process owns, their streams,
// and one op on each of them. Two kinds: the in-process baseline (virtual
// ranks straight on the kernels, no daemon) and ranks through collectived
// (client library, daemon-owned memory), as threads of this process or one
// per MPI process.
#ifndef COLLECTIVED_BENCH_RANK_SET_H_
#define COLLECTIVED_BENCH_RANK_SET_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "collectived/status.h"
#include "collectived/types.h"
#include "kernels/device/device_collectives.h"

namespace collectived::bench {

struct OpSpec {
  bool gather = false;
  DataType dtype = DataType::kFloat32;
  ReduceOp op = ReduceOp::kSum;
  std::string algo = "auto";  // auto | oneshot | twoshot | fused (in-process only)
};

class RankSet {
 public:
  virtual ~RankSet() = default;
  virtual uint32_t world() const = 0;
  virtual const std::vector<uint32_t>& local() const = 0;  // ranks driven by this process
  virtual gpuStream_t stream(uint32_t r) const = 0;
  // Exact inputs for the local ranks, outputs poisoned.
  virtual Status Prepare(const OpSpec& spec, uint64_t seed, uint64_t count, bool in_place) = 0;
  // One op on every local rank, each on its own stream.
  virtual Status Enqueue(const OpSpec& spec, uint64_t count, bool in_place) = 0;
  // Waits for the local ranks' streams; an op's failure becomes the status.
  virtual Status Sync() = 0;
  // Waits for the last op as its caller would: through the client's handle
  // (Handle::Wait, what Python's synchronize() calls) where there is one.
  virtual Status WaitLast() { return Sync(); }
  virtual uint64_t Wrong(const OpSpec& spec, uint64_t seed, uint64_t count) = 0;
  virtual std::string Describe() const = 0;
};

// n virtual ranks on one GPU, no daemon. blocks_per_sm: see kResidentBlocksPerSm;
// blocks (nonzero): that many blocks per rank instead. bench_skip: the
// latency breakdown's parts left out (VirtualRanks::SetBenchSkip).
// `per_block` 1: single-launch ops complete a word per block, with no verdict
// copy, as the client library's captured ops do; 2: and store their
// generation in a word as its eager zero-copy ops do (DeviceOpArgs::gen_mirror).
Status MakeInProcessRanks(uint32_t n, uint64_t in_bytes, uint64_t out_bytes, bool single_launch, int blocks_per_sm,
                          uint32_t blocks, uint32_t bench_skip, int per_block, std::unique_ptr<RankSet>* out);
// The yardstick (bench/reference_ranks.cu, collective-bench -r 1): n virtual
// ranks on one GPU running a plain one-shot float32 sum, out of place.
Status MakeReferenceRanks(uint32_t n, uint64_t in_bytes, uint64_t out_bytes, std::unique_ptr<RankSet>* out);
// Where the buffers of ranks through collectived live (collective-bench -z).
enum class Placement {
  kStaged = 0,      // cudaMalloc'd: staged through the fixed slots
  kHeap = 1,        // the communicator's symmetric heap: zero-copy
  kRegistered = 2,  // each rank's own cuMem allocation, registered: zero-copy
};
// Ranks through collectived at `socket`: `local` of `world` in this process
// (threads' sessions), buffers placed as `placement` says. `key` names the communicator.
Status MakeDaemonRanks(const std::string& socket, const std::string& key, uint32_t world,
                       const std::vector<uint32_t>& local, uint64_t in_bytes, uint64_t out_bytes, Placement placement,
                       bool daemon_executed, std::unique_ptr<RankSet>* out);

}  // namespace collectived::bench

#endif  // COLLECTIVED_BENCH_RANK_SET_H_
