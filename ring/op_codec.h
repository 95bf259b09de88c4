// Everything both sides of the shared memory must encode alike, in one place:
// the host barrier's phase-flag word, where a daemon-executed GPU op's buffer
// lies, the ring slot as a device post writes it, and the descriptor words
// the device-side matcher compares. Pure functions, tested in ring_test.cc.
#ifndef COLLECTIVED_RING_OP_CODEC_H_
#define COLLECTIVED_RING_OP_CODEC_H_

#include <cstdint>

#include "collectived/status.h"
#include "collectived/types.h"
#include "ring/gpu_control_layout.h"
#include "ring/segment_layout.h"

namespace collectived::ring {

// ---- host barrier flags: (index + 1) << 8 | the rank's local status code ----

constexpr unsigned kPhaseFlagShift = 8;
inline uint64_t EncodePhaseFlag(uint64_t index, StatusCode local) {
  return ((index + 1) << kPhaseFlagShift) | (static_cast<uint64_t>(local) & 0xff);
}
// The op generation (index + 1) a flag was published for.
inline uint64_t PhaseFlagGeneration(uint64_t flag) { return flag >> kPhaseFlagShift; }
// Any member writes its own flags: a code that is no status code reads as kUnknown.
inline StatusCode PhaseFlagStatus(uint64_t flag) {
  const uint64_t code = flag & 0xff;
  return code <= static_cast<uint64_t>(StatusCode::kUnauthenticated) ? static_cast<StatusCode>(code)
                                                                     : StatusCode::kUnknown;
}

// ---- where a daemon-executed GPU op's buffer lies (its descriptor's buffer-id fields) ----

// The rank's input slot (offset 0), its symmetric heap at the descriptor's
// offset, or registered buffer `id` at the offset.
enum class BufferPlace : uint8_t { kSlot = 1, kHeap = 2, kRegistered = 3 };
constexpr uint64_t kMaxRegisteredBufferId = (uint64_t{1} << 56) - 1;
// REQUIRES: id == 0 unless place is kRegistered; id <= kMaxRegisteredBufferId.
inline uint64_t EncodeBufferPlace(BufferPlace place, uint64_t id = 0) {
  return static_cast<uint64_t>(place) | id << 8;
}
// False for a word no poster writes (a slot or heap with an id, an unknown place).
bool DecodeBufferPlace(uint64_t word, BufferPlace* place, uint64_t* id);

// ---- the ring slot as a device post writes it (host-mapped memory) ----

constexpr uint32_t kRingDescriptorWords = 8;
struct RingSlotWords {
  uint32_t slot_bytes;   // stride between slots
  uint32_t desc_offset;  // of the descriptor inside a slot; ready_seq is at 0
  uint32_t desc_words;   // 64-bit words of an OpDescriptor
};
RingSlotWords RingSlotLayout();
// `desc` as the words a device post copies into the slot (kRingDescriptorWords at most).
void PackOpDescriptor(const OpDescriptor& desc, uint64_t words[kRingDescriptorWords]);

// ---- the device-side matcher's descriptor (a start flag's line carries it: gpu_control_layout.h) ----

// Kind, type, reduction, algorithm, count and, for zero-copy ops, where send
// and recv lie (tags by which peers address each other's buffers).
void PackDeviceDescriptor(CollectiveKind kind, DataType dtype, ReduceOp op, uint32_t algorithm, uint64_t count,
                          bool zero_copy, uint64_t send_tag, uint64_t recv_tag, uint64_t out[kDescriptorWords]);

}  // namespace collectived::ring

#endif  // COLLECTIVED_RING_OP_CODEC_H_
