#include "client/src/gpu_placement.h"

namespace collectived {

bool RanksShareOneDevice(const std::vector<GpuWindowRef>& ranks) {
  if (ranks.empty() || ranks[0].device_uuid.empty()) return false;
  for (const GpuWindowRef& w : ranks) {
    if (w.device_uuid != ranks[0].device_uuid) return false;
  }
  return true;
}

bool EndFenceAtGpuScope(const std::vector<GpuWindowRef>& ranks, uint32_t gpu_flags) {
  return (gpu_flags & ring::kGpuSystemEndFence) == 0 && RanksShareOneDevice(ranks);
}

}  // namespace collectived
