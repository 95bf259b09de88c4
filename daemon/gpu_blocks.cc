#include "daemon/gpu_blocks.h"

#include <algorithm>

#include "ring/gpu_control_layout.h"

namespace collectived::daemon {

std::map<std::string, GpuDeviceLoad> GpuLoadOf(const std::vector<std::string>& devices,
                                               const std::vector<LiveGpuCommunicator>& live) {
  std::map<std::string, GpuDeviceLoad> load;
  for (const std::string& uuid : devices) {
    GpuDeviceLoad& d = load[uuid];
    d.name = uuid;
    ++d.ranks;
  }
  for (const LiveGpuCommunicator& c : live) {
    std::map<std::string, uint32_t> ranks;
    for (const std::string& uuid : c.devices) ++ranks[uuid];
    for (const auto& [uuid, n] : ranks) {
      auto it = load.find(uuid);
      if (it == load.end()) continue;  // not a device of the new communicator
      it->second.live_ranks += n;
      it->second.live_most = std::max(it->second.live_most, n);
      it->second.live_blocks += n * c.blocks;
    }
  }
  return load;
}

uint32_t GpuRanksBeside(const std::map<std::string, GpuDeviceLoad>& load) {
  uint32_t beside = 0;
  for (const auto& [uuid, d] : load) beside += CountsOtherCommunicators(d) ? d.live_ranks : 0;
  return beside;
}

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
