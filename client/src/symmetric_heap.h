// Private: the allocator of a GPU communicator's symmetric heap. Pure host
// logic (offsets only, no GPU), so it is unit-tested without one.
#ifndef COLLECTIVED_CLIENT_SRC_SYMMETRIC_HEAP_H_
#define COLLECTIVED_CLIENT_SRC_SYMMETRIC_HEAP_H_

#include <cstdint>
#include <map>
#include <mutex>

#include "collectived/status.h"

namespace collectived {

// First fit over [0, size), in `alignment` units: ranks that allocate the
// same sizes in the same order get the same offsets (symmetric buffers).
class SymmetricHeap {
 public:
  // `alignment` rounds every range up (the communicator passes ring::kHeapAlignment).
  SymmetricHeap(uint64_t size, uint64_t alignment);
  // The offset of a free range of `bytes` (0 counts as 1), rounded up to the
  // alignment; RESOURCE_EXHAUSTED when no free range is that large.
  Status Alloc(uint64_t bytes, uint64_t* offset);
  // Gives back the range Alloc returned at `offset` (merged with free
  // neighbours); NOT_FOUND when no allocated range starts there.
  Status Free(uint64_t offset);

 private:
  const uint64_t alignment_;
  std::mutex mu_;
  std::map<uint64_t, uint64_t> free_;  // offset -> bytes
  std::map<uint64_t, uint64_t> used_;
};

}  // namespace collectived

#endif  // COLLECTIVED_CLIENT_SRC_SYMMETRIC_HEAP_H_
