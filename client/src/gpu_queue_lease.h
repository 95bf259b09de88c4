// Private: how many ranks of one communicator a process may hold on one GPU.
// The policy is pure host logic (unit-tested without a GPU); only
// LeaseGpuRankQueue asks the GPU runtime (gpu_device.cc, or the stub).
#ifndef COLLECTIVED_CLIENT_SRC_GPU_QUEUE_LEASE_H_
#define COLLECTIVED_CLIENT_SRC_GPU_QUEUE_LEASE_H_

#include <cstdint>
#include <memory>
#include <string>

#include "collectived/status.h"

namespace collectived {

// Every GPU rank runs kernels that spin on its peers, and a process's streams
// share its CUDA context's hardware queues (CUDA_DEVICE_MAX_CONNECTIONS: 8 by
// default, and 2 for an MPS client, as measured on the H200). Two ranks of one
// communicator whose kernels land in one queue run one after the other, so
// the first waits for the second until its deadline. Reserves a queue for one
// more rank of communicator `key` in this process on `device`, or refuses
// (FAILED_PRECONDITION, saying what to set) the rank that cannot get one.
// Necessary, not sufficient: CUDA maps streams to queues round-robin in
// creation order, the caller's other streams included. The reservation ends
// when *lease is released.
Status LeaseGpuRankQueue(int device, const std::string& key, std::shared_ptr<void>* lease);

// LeaseGpuRankQueue once the device was asked: `env` is
// CUDA_DEVICE_MAX_CONNECTIONS as read (null when unset), `mps` whether the
// context is an MPS client's. The count is per process.
Status LeaseRankQueue(int device, const std::string& key, const char* env, bool mps, std::shared_ptr<void>* lease);

// The hardware queues a context gets: CUDA_DEVICE_MAX_CONNECTIONS when set
// (`env`, 1..32), else CUDA's default (2 under MPS, 8 otherwise).
uint32_t GpuHardwareQueues(const char* env, bool mps);

}  // namespace collectived

#endif  // COLLECTIVED_CLIENT_SRC_GPU_QUEUE_LEASE_H_
