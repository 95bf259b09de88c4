#include "client/src/gpu_queue_lease.h"

#include <algorithm>
#include <cstdlib>
#include <map>
#include <mutex>
#include <utility>

namespace collectived {

uint32_t GpuHardwareQueues(const char* env, bool mps) {
  if (env != nullptr && *env != '\0') {
    char* end = nullptr;
    const long v = std::strtol(env, &end, 10);
    if (*end == '\0' && v >= 1) return static_cast<uint32_t>(std::min(v, 32L));
  }
  return mps ? 2 : 8;
}

Status LeaseRankQueue(int device, const std::string& key, const char* env, bool mps, std::shared_ptr<void>* lease) {
  // Never destroyed: a communicator freed during static destruction still finds them.
  static auto* mu = new std::mutex;
  static auto* ranks_of = new std::map<std::pair<int, std::string>, uint32_t>;  // live ranks per (device, key)
  const uint32_t queues = GpuHardwareQueues(env, mps);
  std::lock_guard<std::mutex> lock(*mu);
  const auto slot = std::make_pair(device, key);
  const uint32_t want = (*ranks_of)[slot] + 1;
  if (want > queues) {
    return Status::FailedPrecondition(
        "this process would hold " + std::to_string(want) + " ranks of communicator '" + key + "' on device " +
        std::to_string(device) + ", but its CUDA context has " + std::to_string(queues) + " hardware queues (" +
        (env != nullptr && *env != '\0' ? std::string("CUDA_DEVICE_MAX_CONNECTIONS=") + env
                                        : std::string(mps ? "an MPS client's default" : "CUDA's default")) +
        "): ranks whose kernels share a queue run one after another and never meet. Set "
        "CUDA_DEVICE_MAX_CONNECTIONS to at least " + std::to_string(want) +
        " (at most 32) before the process first uses CUDA, or run one rank per process");
  }
  (*ranks_of)[slot] = want;
  *lease = std::shared_ptr<void>(nullptr, [slot](void*) {
    std::lock_guard<std::mutex> lock(*mu);
    if (--(*ranks_of)[slot] == 0) ranks_of->erase(slot);
  });
  return Status::Ok();
}

}  // namespace collectived
