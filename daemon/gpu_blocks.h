// How many blocks each rank's kernel of a GPU communicator launches.
//
// Every block of every rank of an op must be resident at once: blocks pair
// up by index across ranks in the op's barriers and spin until their peers
// arrive (ring/op_ring_device.cuh). One communicator sized at one block per
// SM leaves room for the rest of the card's work. Several communicators busy
// at once on one GPU need room together: under MPS, the kernels of
// communicators whose ranks live in different processes were seen to leave
// each other no SM (the NCCL split test, two 2-rank halves of 66 blocks each
// on a 132-SM H100: a half's rank waited for its peer until the op's
// deadline, in 2 of 6 runs; capped at 33 blocks, 0 of 6; docs/operating.md,
// "Several communicators on one GPU").
#ifndef COLLECTIVED_DAEMON_GPU_BLOCKS_H_
#define COLLECTIVED_DAEMON_GPU_BLOCKS_H_

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace collectived::daemon {

// One device that a communicator about to form has ranks on.
struct GpuDeviceLoad {
  std::string name;         // how the log names it (its uuid)
  uint32_t sms = 0;         // the device's multiprocessors
  uint32_t ranks = 0;       // the new communicator's ranks on it
  uint32_t live_ranks = 0;  // ranks of the daemon's other live GPU communicators on it
  uint32_t live_most = 0;   // the most ranks any one of those has on it
  uint32_t live_blocks = 0; // their blocks on it: ranks x blocks per rank, summed
};

// True where the rule below counts the other communicators: the new one or
// a live one has several ranks on the device, each rank a process of its
// own (under MPS) or one process's.
inline bool CountsOtherCommunicators(const GpuDeviceLoad& d) { return d.ranks > 1 || d.live_most > 1; }

// A live GPU communicator of the daemon, as the sizing sees it.
struct LiveGpuCommunicator {
  std::vector<std::string> devices;  // each rank's device uuid
  uint32_t blocks = 0;               // per rank's kernel
};

// The load on each device of a communicator about to form (its ranks'
// uuids, `devices`), by uuid: name, ranks, and what `live` has there;
// sms is left 0 for the caller, who can query the device.
std::map<std::string, GpuDeviceLoad> GpuLoadOf(const std::vector<std::string>& devices,
                                               const std::vector<LiveGpuCommunicator>& live);

// The live ranks that shaped the blocks (those on devices where
// CountsOtherCommunicators holds), for the log.
uint32_t GpuRanksBeside(const std::map<std::string, GpuDeviceLoad>& load);

// Blocks per rank for a new communicator: on each device, `blocks_per_sm` x
// SMs shared by its ranks and, where processes share that device (the new
// communicator or a live one has several ranks on it), by every live rank of
// the daemon's other GPU communicators there too; the least over the devices
// (blocks pair by index, so every rank launches the same number), at most
// `max_blocks_per_rank` where that is not 0, and within [1, ring::kMaxBlocks].
// With one rank per device, as when each process has a GPU of its own, the
// blocks do not depend on other communicators: their kernels are then
// usually one process's and share SMs (two blocks of any op kernel fit one,
// kernels/device/device_collectives.cu). Not covered: independent jobs
// with one rank per GPU each, sharing GPUs under MPS; ranks are counted,
// not the processes behind them.
uint32_t GpuBlocksPerRank(const std::vector<GpuDeviceLoad>& devices, uint32_t blocks_per_sm,
                          uint32_t max_blocks_per_rank);

// Where processes share a device and the new communicator's kernels
// (`blocks` per rank) with every live one's would need more than
// `blocks_per_sm` x SMs blocks there if all were busy at the same time
// (only then can they stall each other): what to tell
// the operator (each such device's name, the blocks wanted and the
// slots it has). Empty where every device has room. Communicators formed earlier
// keep their blocks, so a parent sized alone and its split halves can add up
// to more than a device has.
std::string GpuCrowding(const std::vector<GpuDeviceLoad>& devices, uint32_t blocks, uint32_t blocks_per_sm);

}  // namespace collectived::daemon

#endif  // COLLECTIVED_DAEMON_GPU_BLOCKS_H_
