// What a rank asks of the GPU runtime before it joins: the device's UUID, its
// context and kernels made ready, and whether the context is an MPS client's
// (for the queue lease).
#include <cstdlib>

#include "base/gpu/device_guard.h"
#include "base/gpu/gpu_check.h"
#include "client/src/gpu_communicator.h"
#include "client/src/gpu_queue_lease.h"
#include "ipc/cumem_window.h"
#include "kernels/device/device_collectives.h"

namespace collectived {

Status GpuDeviceUuid(int ordinal, std::string* uuid) { return ipc::GpuUuid(ordinal, uuid); }

Status WarmGpuDevice(int device) {
  gpu::DeviceGuard guard(device);
  COLLECTIVED_GPU_CHECK(gpuFree(nullptr));  // the runtime creates the context on its first such call
  return device::PreloadKernels();
}

Status LeaseGpuRankQueue(int device, const std::string& key, std::shared_ptr<void>* lease) {
  int mps = 0;
  COLLECTIVED_GPU_CHECK(gpuDeviceUsesMps(device, &mps));
  return LeaseRankQueue(device, key, std::getenv("CUDA_DEVICE_MAX_CONNECTIONS"), mps != 0, lease);
}

}  // namespace collectived
