// The GPU half of the op protocol's shared memory: the layout of a GPU
// communicator's control window and the words in it, shared by the daemon
// (which allocates and zeroes it), the client library (which maps it) and the
// kernels (which post, meet in barriers and complete through it). Like the
// host segment (ring/segment_layout.h), every offset depends only on values
// fixed when the communicator forms (docs/design.md, rule 3).
//
// Control window (one, on the first rank's device):
//   barrier flags      kFlagWords words: [phase][block][rank], one 128-byte
//                      line each; a start flag's line carries the rank's op
//                      descriptor beside the flag, in words tagged with the
//                      generation (the device-side matcher)
//   per rank           counter, op index, done, finished (one 128-byte line each rank)
//   per rank, block    a block's completion: the generation its last op
//                      completed with (single-launch ops keep them instead
//                      of done: docs/latency.md, the fifth cut)
//   error word         first DeviceError of the communicator (sticky)
//   abort word         nonzero: every spin gives up (kernels on a deadline or
//                      mismatch; the daemon when a member leaves)
//   op traces          kTraceDepth entries per rank
//   claim counters     two 32-bit counters on lines of their own: two-shot
//                      push's units of work, claimed by every rank's blocks
//                      (DeviceOpArgs::claims); op gen uses counter gen % 2
// A change to this layout bumps ring::kLayoutVersion (segment_layout.h),
// which a client compares with its daemon's when a communicator forms.
// Nothing a client-executed kernel touches lives in host memory: device reads
// and system-scope fences on host-mapped words cost far more than the
// collective itself (measured: 150 us per op with the abort word there).
// Rank window (one per rank, on that rank's device):
//   input slot         slot_bytes: staged ops copy their input here
//   symmetric heap     heap_bytes: Communicator::AllocBuffer; zero-copy ops
#ifndef COLLECTIVED_RING_GPU_CONTROL_LAYOUT_H_
#define COLLECTIVED_RING_GPU_CONTROL_LAYOUT_H_

#include <cstdint>

namespace collectived::ring {

constexpr uint32_t kMaxDeviceRanks = 16;  // ranks of one GPU communicator
constexpr uint32_t kMaxBlocks = 128;      // blocks of one rank's kernel
constexpr uint32_t kBarrierPhases = 2;    // start, end
// Words of one flag's line. Each (phase, block, rank) flag has a 128-byte line
// of its own, as the reference kernel's do: with 16 flags to a line, a line
// was written by 16 blocks and polled by every peer's 16 (docs/latency.md).
constexpr uint32_t kFlagLineWords = 16;
// Words of barrier flags a communicator needs.
constexpr uint64_t kFlagWords = uint64_t{kBarrierPhases} * kMaxBlocks * kMaxDeviceRanks * kFlagLineWords;

#if defined(__CUDACC__) || defined(__HIPCC__)
#define COLLECTIVED_LAYOUT_FN __host__ __device__ constexpr
#else
#define COLLECTIVED_LAYOUT_FN constexpr
#endif
// The word of rank `rank`'s flag of block `block` and phase `phase`: word 0
// of its line. The kernels publish and poll there; tests read it.
COLLECTIVED_LAYOUT_FN uint64_t FlagWord(uint32_t phase, uint32_t block, uint32_t rank) {
  return ((uint64_t{phase} * kMaxBlocks + block) * kMaxDeviceRanks + rank) * kFlagLineWords;
}
// A start flag's descriptor word: `half` (32 bits of a descriptor word)
// with op `gen`'s tag above it; TagMatches says whether a word read is op
// `gen`'s, TaggedHalf gives back its half.
COLLECTIVED_LAYOUT_FN uint64_t TagHalf(uint64_t gen, uint32_t half) { return gen << 32 | half; }
COLLECTIVED_LAYOUT_FN bool TagMatches(uint64_t word, uint64_t gen) {
  return static_cast<uint32_t>(word >> 32) == static_cast<uint32_t>(gen);
}
COLLECTIVED_LAYOUT_FN uint32_t TaggedHalf(uint64_t word) { return static_cast<uint32_t>(word); }
#undef COLLECTIVED_LAYOUT_FN

// Verdicts left in the error word (first one wins).
enum DeviceError : int32_t { kDeviceOk = 0, kDeviceDeadline = 1, kDeviceAborted = 2, kDeviceMismatch = 3 };

// Words of one rank's op descriptor (PackDeviceDescriptor), compared by
// every peer in the start barrier (the device-side matcher).
constexpr uint32_t kDescriptorWords = 3;
// Where a start flag's line carries it: word 0 is the flag (the generation);
// words 1..6 hold the descriptor's six 32-bit halves, each in a word of its
// own tagged with the generation's low 32 bits (TagHalf). The flag is stored
// without a release (docs/latency.md, the eighth cut), so a peer may see it
// before the words: the tags tell it which of the words it read are this
// op's, and it reads again until all are. Every op of a rank rewrites the
// line of each block it runs (the client library runs every op of a
// communicator with its fixed block count), so a stale word carries the tag
// of an op a few ops old, never of one 2^32 ops back, the one it could be
// taken for.
constexpr uint32_t kTaggedDescriptorWord = 1;
constexpr uint32_t kTaggedDescriptorWords = 2 * kDescriptorWords;

// Op trace, per rank, of the last kTraceDepth ops (entry index % depth), in
// the GPU's own clock (globaltimer ns): word 0 = index + 1 once complete,
// 1 = when the kernel's last block finished reading peers, 2 = when the op
// completed (after any copy-out), 3 = index + 1 once posted. A stress harness
// proves a race window open from it; comparable only between ranks of one GPU.
constexpr uint64_t kTraceDepth = 64;
constexpr uint64_t kTraceEntryWords = 4;

constexpr uint64_t kRankWordsStride = 16;  // words: 128 bytes per rank
constexpr uint64_t kClaimStrideWords = 16;  // words: a claim counter's line
constexpr uint64_t kHeapAlignment = 256;   // bytes: heap buffers and the slot keep 16-byte packs aligned

struct GpuControlLayout {
  static constexpr uint64_t kFlagsWord = 0;
  static constexpr uint64_t kRankWordsWord = kFlagWords;
  static constexpr uint64_t kBlockDoneWord = kRankWordsWord + kMaxDeviceRanks * kRankWordsStride;
  static constexpr uint64_t kErrorWord = kBlockDoneWord + uint64_t{kMaxDeviceRanks} * kMaxBlocks;
  static constexpr uint64_t kAbortWord = kErrorWord + 8;  // its own 64-byte line
  static constexpr uint64_t kTraceWord = kAbortWord + 8;  // kMaxDeviceRanks op traces (kTraceDepth entries each)
  static constexpr uint64_t kClaimWord = kTraceWord + uint64_t{kMaxDeviceRanks} * kTraceDepth * kTraceEntryWords;
  static constexpr uint64_t kBytes = (kClaimWord + 2 * kClaimStrideWords) * 8;

  static uint64_t* Flags(void* base) { return static_cast<uint64_t*>(base) + kFlagsWord; }
  static uint64_t* Counter(void* base, uint32_t rank) { return RankWords(base, rank) + 0; }
  static uint64_t* OpIndex(void* base, uint32_t rank) { return RankWords(base, rank) + 1; }
  static uint64_t* Done(void* base, uint32_t rank) { return RankWords(base, rank) + 2; }
  static uint32_t* Finished(void* base, uint32_t rank) {
    return reinterpret_cast<uint32_t*>(RankWords(base, rank) + 3);
  }
  // Rank `rank`'s kMaxBlocks block completion words (see CompletedOps).
  static uint64_t* BlockDone(void* base, uint32_t rank) {
    return static_cast<uint64_t*>(base) + kBlockDoneWord + uint64_t{rank} * kMaxBlocks;
  }
  static int32_t* Error(void* base) { return reinterpret_cast<int32_t*>(static_cast<uint64_t*>(base) + kErrorWord); }
  static uint64_t* Abort(void* base) { return static_cast<uint64_t*>(base) + kAbortWord; }
  static uint64_t* Trace(void* base, uint32_t rank) {
    return static_cast<uint64_t*>(base) + kTraceWord + rank * kTraceDepth * kTraceEntryWords;
  }
  // The two claim counters (ClaimCounter picks an op's).
  static uint32_t* Claims(void* base) {
    return reinterpret_cast<uint32_t*>(static_cast<uint64_t*>(base) + kClaimWord);
  }

 private:
  static uint64_t* RankWords(void* base, uint32_t rank) {
    return static_cast<uint64_t*>(base) + kRankWordsWord + rank * kRankWordsStride;
  }
};

// Ops of a rank completed, from its words as read from the window: `done`
// and its first `blocks` block completion words (`blocks`: the communicator's
// blocks per kernel). Post/complete ops publish done; single-launch ops of
// the client library publish a word per block, each once its block is
// through; a rank's ops run one after another, so the later of the two is
// its count, and an op of `blocks` blocks completes when its slowest does.
inline uint64_t CompletedOps(uint64_t done, const uint64_t* block_done, uint32_t blocks) {
  uint64_t least = blocks == 0 ? 0 : block_done[0];
  for (uint32_t b = 1; b < blocks; ++b) least = block_done[b] < least ? block_done[b] : least;
  return done > least ? done : least;
}

inline constexpr uint64_t AlignUp(uint64_t v, uint64_t a) { return (v + a - 1) / a * a; }

}  // namespace collectived::ring

#endif  // COLLECTIVED_RING_GPU_CONTROL_LAYOUT_H_
