#include "daemon/gpu_blocks.h"

#include <algorithm>

#include "ring/gpu_control_layout.h"

namespace collectived::daemon {

uint32_t GpuBlocksPerRank(const std::vector<GpuDeviceLoad>& devices, uint32_t blocks_per_sm,
                          uint32_t max_blocks_per_rank) {
  uint32_t blocks = ring::kMaxBlocks;
  for (const GpuDeviceLoad& d : devices) {
    if (d.ranks == 0) continue;
    uint32_t sharing = d.ranks;
    if (CountsOtherCommunicators(d)) sharing += d.live_ranks;
    blocks = std::min(blocks, blocks_per_sm * d.sms / sharing);
  }
  if (max_blocks_per_rank != 0) blocks = std::min(blocks, max_blocks_per_rank);
  return std::max<uint32_t>(1, blocks);
}

std::string GpuCrowding(const std::vector<GpuDeviceLoad>& devices, uint32_t blocks, uint32_t blocks_per_sm) {
  std::string out;
  for (const GpuDeviceLoad& d : devices) {
    if (d.ranks == 0 || !CountsOtherCommunicators(d)) continue;
    const uint64_t want = uint64_t{d.ranks} * blocks + d.live_blocks;
    const uint64_t have = uint64_t{blocks_per_sm} * d.sms;
    if (want <= have) continue;
    if (!out.empty()) out += "; ";
    out += d.name + ": " + std::to_string(want) + " blocks for " + std::to_string(have) +
           " SM slots";
  }
  return out;
}

}  // namespace collectived::daemon
