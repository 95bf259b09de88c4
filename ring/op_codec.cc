#include "ring/op_codec.h"

#include <cstddef>
#include <cstring>

namespace collectived::ring {

bool DecodeBufferPlace(uint64_t word, BufferPlace* place, uint64_t* id) {
  const uint64_t p = word & 0xff, i = word >> 8;
  if (p == static_cast<uint64_t>(BufferPlace::kRegistered)) {
    *place = BufferPlace::kRegistered;
  } else if ((p == static_cast<uint64_t>(BufferPlace::kSlot) || p == static_cast<uint64_t>(BufferPlace::kHeap)) &&
             i == 0) {
    *place = static_cast<BufferPlace>(p);
  } else {
    return false;
  }
  *id = i;
  return true;
}

static_assert(sizeof(OpDescriptor) % 8 == 0 && sizeof(OpDescriptor) / 8 <= kRingDescriptorWords,
              "a device post copies the descriptor as whole words");

RingSlotWords RingSlotLayout() {
  return {static_cast<uint32_t>(sizeof(RingSlot)), static_cast<uint32_t>(offsetof(RingSlot, desc)),
          static_cast<uint32_t>(sizeof(OpDescriptor) / 8)};
}

void PackOpDescriptor(const OpDescriptor& desc, uint64_t words[kRingDescriptorWords]) {
  std::memset(words, 0, kRingDescriptorWords * sizeof(uint64_t));
  std::memcpy(words, &desc, sizeof(desc));
}

void PackDeviceDescriptor(CollectiveKind kind, DataType dtype, ReduceOp op, uint32_t algorithm, uint64_t count,
                          bool zero_copy, uint64_t send_tag, uint64_t recv_tag, uint64_t out[kDescriptorWords]) {
  out[0] = static_cast<uint64_t>(kind) | static_cast<uint64_t>(dtype) << 8 | static_cast<uint64_t>(op) << 16 |
           static_cast<uint64_t>(algorithm) << 24 | static_cast<uint64_t>(zero_copy) << 32;
  out[1] = count;
  out[2] = zero_copy ? (send_tag * 0x9E3779B97F4A7C15ull) ^ recv_tag : 0;
}

}  // namespace collectived::ring
