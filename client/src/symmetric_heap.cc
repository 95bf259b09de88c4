#include "client/src/symmetric_heap.h"

#include <algorithm>
#include <iterator>
#include <cstdint>
#include <string>

#include "ring/gpu_control_layout.h"

namespace collectived {

SymmetricHeap::SymmetricHeap(uint64_t size, uint64_t alignment) : alignment_(alignment) {
  if (size > 0) free_[0] = size;
}

Status SymmetricHeap::Alloc(uint64_t bytes, uint64_t* offset) {
  const uint64_t want = std::max<uint64_t>(bytes, 1);
  // Rounding up must not wrap to a small size: a request within one alignment
  // of 2^64 fits no heap.
  const uint64_t need = want > UINT64_MAX - (alignment_ - 1) ? UINT64_MAX : ring::AlignUp(want, alignment_);
  std::lock_guard<std::mutex> lock(mu_);
  for (auto it = free_.begin(); it != free_.end(); ++it) {
    if (it->second < need) continue;
    *offset = it->first;
    const uint64_t rest = it->second - need;
    const uint64_t rest_at = it->first + need;
    free_.erase(it);
    if (rest > 0) free_[rest_at] = rest;
    used_[*offset] = need;
    return Status::Ok();
  }
  return Status::ResourceExhausted("symmetric heap has no free range of " + std::to_string(need) +
                                   " bytes; raise CommunicatorOptions.gpu_heap_bytes");
}

Status SymmetricHeap::Free(uint64_t offset) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = used_.find(offset);
  if (it == used_.end()) return Status::NotFound("no heap buffer at offset " + std::to_string(offset));
  uint64_t start = offset, len = it->second;
  used_.erase(it);
  auto next = free_.lower_bound(start);
  if (next != free_.end() && next->first == start + len) {
    len += next->second;
    next = free_.erase(next);
  }
  if (next != free_.begin()) {
    auto prev = std::prev(next);
    if (prev->first + prev->second == start) {
      start = prev->first;
      len += prev->second;
      free_.erase(prev);
    }
  }
  free_[start] = len;
  return Status::Ok();
}

}  // namespace collectived
