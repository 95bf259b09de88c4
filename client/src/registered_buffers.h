// Private: the callers' own cuMem buffers every rank of a GPU communicator
// registered (GpuCommunicator::RegisterBuffer): the table of where each
// rank's copy lies in this process, and the export and import that fill it.
#ifndef COLLECTIVED_CLIENT_SRC_REGISTERED_BUFFERS_H_
#define COLLECTIVED_CLIENT_SRC_REGISTERED_BUFFERS_H_

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <vector>

#include "client/src/gpu_communicator.h"
#include "ipc/cumem_window.h"

namespace collectived {

struct OpOrder;  // client/src/gpu_op.h

// Callers' buffers every rank registered (RegisterBuffer): where each rank's
// copy of a buffer lies in this process. Shared with the buffers' release.
struct RegisteredBuffers {
  struct Entry {
    uint64_t id = 0;
    uint64_t bytes = 0;
    std::vector<uint8_t*> at;  // per rank: the buffer's address here
    std::vector<std::shared_ptr<ipc::CuMemWindow>> peers;  // peers' allocations, mapped here
  };
  std::mutex mu;
  std::map<uintptr_t, Entry> by_address;  // this rank's buffer address ->
};

// RegisterBuffer once [ptr, ptr + bytes) was checked (device memory of this
// rank's device, clear of the heap and of other registrations), with that
// device current: exports the range's allocation to the daemon, which answers
// when every rank registered; maps every peer's allocation; enters the buffer
// in `table`. *out's release waits for the ops `order` saw enqueued before
// it, then drops the entry and the daemon's reference.
Status RegisterCallerBuffer(const GpuCommSetup& setup, const FetchFd& fetch,
                            const std::shared_ptr<RegisteredBuffers>& table, const std::shared_ptr<OpOrder>& order,
                            void* ptr, uint64_t bytes, GpuHeapBuffer* out);

}  // namespace collectived

#endif  // COLLECTIVED_CLIENT_SRC_REGISTERED_BUFFERS_H_
