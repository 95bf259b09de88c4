// Layout of a GPU communicator's device memory, shared by the daemon (which
// allocates and zeroes it) and the client library (which maps it and points
// the kernels at it). Like the host segment, every offset depends only on
// values fixed when the communicator forms (rule 3).
//
// Control window (one, on the first rank's device):
//   barrier flags      kFlagWords words           [phase][rank][block]
//   per rank           counter, op index, done, finished (one 128-byte line each rank)
//   descriptor table   kDescriptorTableWords words (the device-side matcher)
//   error word         first DeviceError of the communicator (sticky)
//   abort word         nonzero: every spin gives up (kernels on a deadline or
//                      mismatch; the daemon when a member leaves)
// Nothing a client-executed kernel touches lives in host memory: device
// reads and system-scope fences on host-mapped words cost far more than the
// collective itself (measured: 150 us per op with the abort word there).
// Rank window (one per rank, on that rank's device):
//   input slot         slot_bytes: staged ops copy their input here
//   symmetric heap     heap_bytes: Communicator::AllocBuffer; zero-copy ops
#ifndef COLLECTIVED_KERNELS_DEVICE_GPU_COMM_LAYOUT_H_
#define COLLECTIVED_KERNELS_DEVICE_GPU_COMM_LAYOUT_H_

#include <cstdint>

#include "kernels/device/device_collectives.h"

namespace collectived::device {

constexpr uint64_t kRankWordsStride = 16;  // words: 128 bytes per rank
constexpr uint64_t kHeapAlignment = 256;   // bytes: heap buffers and the slot keep 16-byte packs aligned

struct GpuControlLayout {
  static constexpr uint64_t kFlagsWord = 0;
  static constexpr uint64_t kRankWordsWord = kFlagWords;
  static constexpr uint64_t kDescriptorsWord = kRankWordsWord + kMaxDeviceRanks * kRankWordsStride;
  static constexpr uint64_t kErrorWord = kDescriptorsWord + kDescriptorTableWords;
  static constexpr uint64_t kAbortWord = kErrorWord + 8;  // its own 64-byte line
  static constexpr uint64_t kTraceWord = kAbortWord + 8;  // kMaxDeviceRanks op traces (kTraceDepth entries each)
  static constexpr uint64_t kBytes = (kTraceWord + uint64_t{kMaxDeviceRanks} * kTraceDepth * kTraceEntryWords) * 8;

  static uint64_t* Flags(void* base) { return static_cast<uint64_t*>(base) + kFlagsWord; }
  static uint64_t* Counter(void* base, uint32_t rank) { return RankWords(base, rank) + 0; }
  static uint64_t* OpIndex(void* base, uint32_t rank) { return RankWords(base, rank) + 1; }
  static uint64_t* Done(void* base, uint32_t rank) { return RankWords(base, rank) + 2; }
  static uint32_t* Finished(void* base, uint32_t rank) {
    return reinterpret_cast<uint32_t*>(RankWords(base, rank) + 3);
  }
  static uint64_t* Descriptors(void* base) { return static_cast<uint64_t*>(base) + kDescriptorsWord; }
  static int32_t* Error(void* base) { return reinterpret_cast<int32_t*>(static_cast<uint64_t*>(base) + kErrorWord); }
  static uint64_t* Abort(void* base) { return static_cast<uint64_t*>(base) + kAbortWord; }
  static uint64_t* Trace(void* base, uint32_t rank) {
    return static_cast<uint64_t*>(base) + kTraceWord + rank * kTraceDepth * kTraceEntryWords;
  }

 private:
  static uint64_t* RankWords(void* base, uint32_t rank) {
    return static_cast<uint64_t*>(base) + kRankWordsWord + rank * kRankWordsStride;
  }
};

// How a daemon-executed op's descriptor names a buffer (its buffer-id fields):
// the rank's input slot, its heap at the descriptor's offset, or a registered
// buffer (kGpuPlaceRegistered | buffer id << 8) at the offset.
enum GpuBufferPlace : uint64_t { kGpuPlaceSlot = 1, kGpuPlaceHeap = 2, kGpuPlaceRegistered = 3 };

inline uint64_t AlignUp(uint64_t v, uint64_t a) { return (v + a - 1) / a * a; }

}  // namespace collectived::device

#endif  // COLLECTIVED_KERNELS_DEVICE_GPU_COMM_LAYOUT_H_
