// Private: where a GPU communicator's ranks are, read from the windows the
// daemon sent (each rank's window lives on that rank's device), and what
// the kernels' flags need from it. Pure host logic, unit-tested without a GPU.
#ifndef COLLECTIVED_CLIENT_SRC_GPU_PLACEMENT_H_
#define COLLECTIVED_CLIENT_SRC_GPU_PLACEMENT_H_

#include <cstdint>
#include <vector>

#include "client/src/gpu_communicator.h"

namespace collectived {

// Every rank's window names the same device (a nonempty UUID): the ranks
// share one GPU, and so do their windows and their registered buffers,
// which must lie on their rank's device (GpuRankEngine::CheckPointer).
bool RanksShareOneDevice(const std::vector<GpuWindowRef>& ranks);

// ring::DeviceOpArgs::end_fence_gpu_scope for these ranks under the
// segment's ring::GpuFlags: where they share one GPU, unless the daemon
// keeps system scope (ring::kGpuSystemEndFence).
bool EndFenceAtGpuScope(const std::vector<GpuWindowRef>& ranks, uint32_t gpu_flags);

}  // namespace collectived

#endif  // COLLECTIVED_CLIENT_SRC_GPU_PLACEMENT_H_
