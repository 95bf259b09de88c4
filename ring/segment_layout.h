// Layout of a communicator's shared segment: header, per-rank control words,
// op rings, status history and the fixed data slots.
//
// Every offset depends only on (world_size, ring_depth, max_message_bytes),
// fixed when the communicator is created: a slot's position never depends on
// the size of the message in it (docs/design.md, rule 3).
#ifndef COLLECTIVED_RING_SEGMENT_LAYOUT_H_
#define COLLECTIVED_RING_SEGMENT_LAYOUT_H_

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <string>

#include "collectived/status.h"
#include "collectived/types.h"

namespace collectived::ring {

constexpr uint64_t kSegmentMagic = 0x3156434c4c4f43ULL;  // "COLLCV1"
// Covers the GPU control window's layout too (ring/gpu_control_layout.h):
// every communicator attaches this segment, so client and daemon of
// different layouts meet here. 5: OpCounters, RingSlot::posted_ns; 6: the
// GPU control window's block completion words; 7: a start flag's descriptor
// in tagged words; 8: CommHeader::gpu_flags; 9: RankControl::lead; 10:
// RankControl::executor_cpu and poster_cpu; 11: the GPU control window's
// claim counters.
constexpr uint32_t kLayoutVersion = 11;
constexpr size_t kCacheLine = 64;
constexpr uint32_t kMaxRanks = 64;
constexpr uint32_t kStatusHistory = 4096;  // per rank: statuses kept for handles
constexpr size_t kMessageBytes = 176;      // status text kept per ring slot

static_assert(std::atomic<uint64_t>::is_always_lock_free, "64-bit atomics must be lock free");

// Barrier phases; each has its own flag word per rank.
enum Phase : uint32_t { kPhaseStart = 0, kPhaseMid = 1, kPhaseEnd = 2, kNumPhases = 3 };

// Plan of an op, chosen by the poster from the communicator's thresholds and
// checked by the matcher like the other descriptor fields.
enum class Algorithm : uint32_t { kUnspecified = 0, kOneShot = 1, kTwoShot = 2, kGather = 3 };
const char* AlgorithmName(Algorithm a);

// What a rank posts for one op. Plain data: it lives in shared memory.
struct OpDescriptor {
  CollectiveKind kind;
  DataType dtype;
  ReduceOp reduce_op;  // kUnspecified for all-gather
  Algorithm algorithm;
  uint64_t count;  // elements of this rank's input
  uint64_t send_buffer_id;
  uint64_t send_offset;  // bytes
  uint64_t recv_buffer_id;
  uint64_t recv_offset;  // bytes
};

// A 64-bit word alone on its cache line (one word per flag, docs/design.md rule 4).
struct alignas(kCacheLine) PaddedWord {
  std::atomic<uint64_t> value;
};

// One ring entry. `ready_seq` = index + 1 once `desc` is valid for op `index`.
struct alignas(kCacheLine) RingSlot {
  std::atomic<uint64_t> ready_seq;
  OpDescriptor desc;
  int32_t status_code;  // written by the executor before `completed` moves
  char status_message[kMessageBytes];
  int64_t posted_ns;  // when the poster published it (CLOCK_MONOTONIC): the op's latency starts here
};

struct StatusRecord {
  std::atomic<uint64_t> seq;  // op index + 1 this record belongs to
  std::atomic<int32_t> code;
  int32_t pad;
  // Timestamps (CLOCK_MONOTONIC ns, comparable across processes of a node)
  // that let the stress harness show a race window was open.
  std::atomic<int64_t> reads_done_ns;    // this rank finished reading peers' slots
  std::atomic<int64_t> output_done_ns;   // this rank's last write to its output
  std::atomic<int64_t> completed_ns;     // this rank published completion
};

// Switches that re-create the seed bug classes, for the stress harness's
// negative controls only (daemon flags --unsafe-*, logged loudly).
enum UnsafeFlags : uint32_t {
  kUnsafeSkipEndBarrier = 1u << 0,       // AITER: leave before peers finished reading
  kUnsafeEventBeforeEpilogue = 1u << 1,  // DeepEP: publish completion before the output is written
  kUnsafeSizeDependentSlots = 1u << 2,   // mori: staging slots placed by the current message size
};

// How the client library's GPU kernels of a communicator run (daemon flags
// --gpu-*, in the segment so every member runs the same).
enum GpuFlags : uint32_t {
  // Publish each start flag with a release (a fence at system scope before
  // it) instead of a plain strong store: what the flag then vouches for no
  // longer rests on the kernel boundary (docs/proof.md, "What rests on the
  // hardware's behaviour"). For a platform where that is in doubt; costs
  // 0.7-2 us an op on one GPU (docs/latency.md, the eighth cut).
  kGpuStartFlagRelease = 1u << 0,
  // Keep each end flag's fence at system scope also where every rank of the
  // communicator shares one GPU (DeviceOpArgs::end_fence_gpu_scope), for a
  // platform where a GPU-scope fence is in doubt across processes
  // (docs/proof.md, "What rests on the hardware's behaviour"); costs
  // 0.4-1.6 us an op on one GPU (docs/latency.md, the thirteenth cut).
  kGpuSystemEndFence = 1u << 1,
  // Two-shot push keeps its static split (rank r's blocks reduce chunk r)
  // where every rank of the communicator shares one GPU, instead of claiming
  // its work from a shared counter (DeviceOpArgs::claims): a measurement
  // switch, and a way back should the claims ever be in doubt.
  kGpuStaticTwoShot = 1u << 2,
};

struct alignas(kCacheLine) RankControl {
  PaddedWord next_index;             // op counter: the poster takes indices here
  PaddedWord completed;              // ops of this rank finished (index + 1 of the last)
  PaddedWord phase_flag[kNumPhases]; // generation flags: EncodePhaseFlag (ring/op_codec.h)
  // Daemon-executed GPU communicators (op_ring.h, AnnounceDevicePost): eager
  // ops the rank's client enqueued, and whether the daemon's executor sleeps
  // on that count.
  PaddedWord announced;
  PaddedWord executor_asleep;
  // Daemon-executed host communicators, rank 0's only: what its executor
  // decided for each op it may run alone for every rank (executor/, LeadWord).
  PaddedWord lead;
  // Host communicators: 1 + the CPU the thread that last ran this rank's op
  // (its executor; rank 0's for an op it led) and the thread that last posted
  // one ran on; 0 = not known. A waiter on the CPU of the thread it waits for
  // skips its spin, which would hold that thread off (WaitContext::writer_cpus).
  PaddedWord executor_cpu;
  PaddedWord poster_cpu;
};

// The operating counters of a host communicator (the daemon's metrics read
// them; daemon/metrics.h): rank 0's executor counts each op once, at its
// completion, with relaxed adds. Indexed by CollectiveKind and DataType
// values; anything out of range counts as 0 (unspecified).
constexpr uint32_t kCountedKinds = 3;
constexpr uint32_t kCountedTypes = 8;
// Latency bucket k counts ops that took less than 2^k us from rank 0's post
// to its completion (the last bucket: the rest).
constexpr uint32_t kLatencyBuckets = 24;
struct OpCounters {
  std::atomic<uint64_t> completed[kCountedKinds][kCountedTypes];
  std::atomic<uint64_t> failed[kCountedKinds][kCountedTypes];
  std::atomic<uint64_t> bytes[kCountedKinds][kCountedTypes];  // each rank's input of completed ops
  std::atomic<uint64_t> latency[kLatencyBuckets];
  std::atomic<uint64_t> latency_sum_ns;
};
// The bucket of a latency (ns).
uint32_t LatencyBucket(int64_t ns);

struct alignas(kCacheLine) CommHeader {
  uint64_t magic;
  uint32_t layout_version;
  uint32_t world_size;
  uint32_t ring_depth;
  uint32_t mode;  // ExecutionMode
  uint64_t max_message_bytes;
  uint64_t one_shot_max_bytes;  // all-reduce above this uses two-shot
  uint64_t op_timeout_ns;
  uint64_t segment_bytes;
  uint64_t comm_id;
  uint32_t unsafe_flags;            // UnsafeFlags; 0 in every normal run
  int32_t debug_delay_rank;         // -1: none; else this rank's reads start late
  uint32_t debug_delay_us;          // how late
  uint32_t debug_delay_copyout_us;  // output writes start this late (GPU copy-outs: rank r (r + 1) times)
  uint32_t gpu_flags;               // GpuFlags of the client library's kernels
  alignas(kCacheLine) std::atomic<uint64_t> abort_claim;  // 0 until someone aborts; then an AbortCause
  std::atomic<uint64_t> abort_code;                       // StatusCode; set after the reason
  char abort_reason[256];
  alignas(kCacheLine) std::atomic<uint64_t> ops_matched;
  std::atomic<uint64_t> ops_completed;
  std::atomic<uint64_t> ops_failed;
  alignas(kCacheLine) OpCounters counters;
};

struct SegmentParams {
  uint32_t world_size = 0;
  uint32_t ring_depth = 64;
  uint64_t max_message_bytes = 0;
  uint64_t one_shot_max_bytes = 256 * 1024;
  uint64_t op_timeout_ns = 30ull * 1000 * 1000 * 1000;
  ExecutionMode mode = ExecutionMode::kClient;
  uint64_t comm_id = 0;
  uint32_t unsafe_flags = 0;
  int32_t debug_delay_rank = -1;
  uint32_t debug_delay_us = 0;
  uint32_t debug_delay_copyout_us = 0;
  uint32_t gpu_flags = 0;
};

// Byte offsets of every region; computed once from SegmentParams.
struct SegmentLayout {
  uint64_t rank_control_offset;
  uint64_t ring_offset;  // world_size rings of ring_depth slots
  uint64_t status_offset;
  uint64_t in_slot_offset;  // world_size input slots of in_slot_bytes
  uint64_t in_slot_bytes;
  uint64_t shard_slot_offset;  // world_size reduced-shard slots of shard_slot_bytes
  uint64_t shard_slot_bytes;
  uint64_t total_bytes;

  static Status Compute(const SegmentParams& params, SegmentLayout* out);
};

// Typed view of a mapped segment. Does not own the mapping.
class CommSegment {
 public:
  CommSegment() = default;
  // Writes the header and zeroes control words; the memory must be zeroed.
  static Status Initialize(void* base, uint64_t bytes, const SegmentParams& params, CommSegment* out);
  // Checks magic, version and size of a segment mapped from elsewhere.
  static Status Attach(void* base, uint64_t bytes, CommSegment* out);

  CommHeader& header() const { return *reinterpret_cast<CommHeader*>(base_); }
  const SegmentLayout& layout() const { return layout_; }
  // The parameters as this process initialized or first read them. Members
  // can write the header; code that indexes, loops or times with these values
  // uses this copy, never header() (docs/security.md).
  const SegmentParams& params() const { return params_; }
  uint32_t world_size() const { return params_.world_size; }
  uint32_t ring_depth() const { return params_.ring_depth; }
  RankControl& control(uint32_t rank) const;
  RingSlot& slot(uint32_t rank, uint64_t index) const;
  StatusRecord& status_record(uint32_t rank, uint64_t index) const;
  uint8_t* in_slot(uint32_t rank) const;
  uint8_t* shard_slot(uint32_t rank) const;
  // Bytes from the segment's start through the rings (header, rank controls,
  // rings): what a GPU communicator registers with its CUDA contexts.
  uint64_t control_bytes() const;

  // Why a communicator was aborted. kCleanLeave: a member destroyed its
  // communicator (done with it) while the others still had it; ops that
  // need that member fail, but nothing failed yet (Communicator::AsyncError
  // stays OK for a rank until one of its own ops fails).
  enum class AbortCause : uint64_t { kFault = 1, kCleanLeave = 2 };
  // First abort wins; later calls keep the first reason and cause, but for a
  // fault after a clean leave, which takes both over. Wakes every waiter.
  void Abort(StatusCode code, const char* reason, AbortCause cause = AbortCause::kFault) const;
  bool aborted_by_clean_leave() const {
    return aborted() && header().abort_claim.load(std::memory_order_acquire) ==
                            static_cast<uint64_t>(AbortCause::kCleanLeave);
  }
  // Wakes every thread of every process sleeping on a word of this segment
  // (after an abort, or an in-process stop request a waiter must see).
  void WakeAll() const;
  bool aborted() const { return header().abort_code.load(std::memory_order_acquire) != 0; }
  Status AbortStatus() const;  // OK when not aborted

 private:
  uint8_t* base_ = nullptr;
  SegmentLayout layout_{};
  SegmentParams params_{};
};

// A status code read from shared memory, mapped to one that exists
// (kUnknown otherwise): a member must not choose arbitrary codes for its peers.
StatusCode SharedStatusCode(uint64_t code);
// A C string read from shared memory: at most `capacity` bytes, control
// characters replaced, so an unterminated or forged text cannot overrun or
// forge log lines.
std::string SharedText(const char* text, size_t capacity);

}  // namespace collectived::ring

#endif  // COLLECTIVED_RING_SEGMENT_LAYOUT_H_
