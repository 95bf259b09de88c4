// What a rank asks the GPU runtime about its device before it joins: the
// device's UUID, and whether its context is an MPS client's (for the queue lease).
#include <cstdlib>

#include "base/gpu/gpu_check.h"
#include "client/src/gpu_communicator.h"
#include "client/src/gpu_queue_lease.h"
#include "ipc/cumem_window.h"

namespace collectived {

Status GpuDeviceUuid(int ordinal, std::string* uuid) { return ipc::GpuUuid(ordinal, uuid); }

Status LeaseGpuRankQueue(int device, const std::string& key, std::shared_ptr<void>* lease) {
  int mps = 0;
  COLLECTIVED_GPU_CHECK(gpuDeviceUsesMps(device, &mps));
  return LeaseRankQueue(device, key, std::getenv("CUDA_DEVICE_MAX_CONNECTIONS"), mps != 0, lease);
}

}  // namespace collectived
