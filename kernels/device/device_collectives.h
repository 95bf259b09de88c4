// GPU collectives for ranks that can address each other's buffers (one GPU
// shared by several ranks, or peers over NVLink): device-side op indices,
// generation barriers, and the data kernels. Host-callable launchers; every
// launch goes on the caller's stream and captures into CUDA graphs (no value
// chosen on the host is a generation).
//
// Per op and rank, on one stream (post/complete mode; single-launch mode folds
// post and complete into the collective kernel, see DeviceRankArgs):
//   LaunchPost      index = atomicAdd(counter, 1) on the device; writes it to
//                   the rank's index word (graph replay takes a new index).
//   LaunchAllReduce / LaunchAllGather
//                   gen = index + 1; start barrier (every rank's same-index
//                   block published gen); data; end barrier. No rank returns
//                   while a peer may still read its input or write its output.
//   LaunchComplete  done = gen, published with system-scope release, after
//                   the whole kernel (stream order): completion covers all.
//   LaunchWait      (any stream) spins until done >= gen, with a deadline.
// Barrier flags are 64-bit words [phase][rank][block] written with
// st.release.sys and polled with ld.acquire.sys; every spin reads
// %globaltimer and the abort word and gives up with an error code.
#ifndef COLLECTIVED_KERNELS_DEVICE_DEVICE_COLLECTIVES_H_
#define COLLECTIVED_KERNELS_DEVICE_DEVICE_COLLECTIVES_H_

#include <cstdint>

#include "collectived/status.h"
#include "collectived/types.h"
#include "base/gpu/gpu_runtime.h"

namespace collectived::device {

constexpr uint32_t kMaxDeviceRanks = 16;
constexpr uint32_t kMaxBlocks = 128;
// Blocks per SM that ranks sharing a GPU may launch together: every block of
// every rank must be resident at once, since they spin on each other. One per
// SM is the tested setting. Two per SM measured +9 points of the copy ceiling
// at 1 GiB (bench/RESULTS.md), but with the ranks filling every slot the GPU
// tests hit their deadline: not every block was resident. Until the real
// residency is queried (cudaOccupancyMaxActiveBlocksPerMultiprocessor) and
// some slack kept, the default stays 1.
constexpr uint32_t kResidentBlocksPerSm = 1;
constexpr uint32_t kBarrierPhases = 2;  // start, end
// Words of barrier flags a communicator needs.
constexpr uint64_t kFlagWords = uint64_t{kBarrierPhases} * kMaxDeviceRanks * kMaxBlocks;

// Error codes left in the error word (first one wins).
enum DeviceError : int32_t { kDeviceOk = 0, kDeviceDeadline = 1, kDeviceAborted = 2, kDeviceMismatch = 3 };

// Words of one rank's op descriptor, compared by every peer after the start
// barrier (the device-side matcher). Word 0 is the generation.
constexpr uint32_t kDescriptorWords = 4;
// Words of the descriptor table: kMaxDeviceRanks rows of kDescriptorWords.
constexpr uint64_t kDescriptorTableWords = uint64_t{kMaxDeviceRanks} * kDescriptorWords;

// Op trace, per rank, of the last kTraceDepth ops (entry index % depth), in
// the GPU's own clock (globaltimer ns): word 0 = index + 1 once complete,
// 1 = when the kernel's last block finished reading peers, 2 = when the op
// completed (after any copy-out), 3 = index + 1 once posted. A stress harness
// proves a race window open from it; comparable only between ranks of one GPU.
constexpr uint64_t kTraceDepth = 64;
constexpr uint64_t kTraceEntryWords = 4;

enum class DeviceAlgorithm : uint32_t {
  kOneShot = 1,      // every rank reads every input, writes its own output
  kTwoShotPush = 2,  // rank r reduces chunk r of every input, writes it to every output
};

// What one rank's kernel needs. Plain data, passed by value to the kernel.
struct DeviceRankArgs {
  uint32_t rank = 0;
  uint32_t world = 0;
  uint64_t count = 0;  // elements of each rank's input
  const void* inputs[kMaxDeviceRanks] = {};
  void* outputs[kMaxDeviceRanks] = {};
  uint64_t* flags = nullptr;          // kFlagWords words, zeroed once, shared by the ranks
  // Post/complete mode: the rank's index word (LaunchPost writes it; LaunchComplete publishes done).
  // Single-launch mode (op_index == nullptr): gen = *done + 1, and the kernel's last block to
  // finish publishes *done = gen; `finished` counts finished blocks (zero between ops). Use it
  // when nothing follows the kernel in the op (no epilogue) and waits are stream-ordered.
  // A failed op (deadline, abort, mismatch) is completed all the same: done = gen, verdict in the
  // error word, as LaunchComplete does in post/complete mode.
  const uint64_t* op_index = nullptr;
  uint64_t* done = nullptr;
  uint32_t* finished = nullptr;
  uint64_t* counter = nullptr;  // single-launch mode advances it too, so the modes mix on one rank
  // Single-launch mode (optional): the op's index (gen - 1) is written here when the kernel
  // starts, as LaunchPost writes it (LaunchWait reads it), and the error word is copied to
  // `status_mirror` (host-mapped) before done, as LaunchComplete copies it.
  uint64_t* index_word = nullptr;
  int32_t* status_mirror = nullptr;
  uint64_t* abort_word = nullptr;     // nonzero: every spin gives up
  int32_t* error_word = nullptr;      // first DeviceError of this communicator
  uint64_t timeout_ns = 0;            // per spin
  // Device-side matcher (optional): before the start barrier each rank writes
  // {gen, desc[0..2]} to its row of `descriptors`; after it, every rank
  // compares every peer's row with its own, and a difference fails the op on
  // every rank (kDeviceMismatch) instead of reducing mismatched buffers.
  uint64_t* descriptors = nullptr;
  uint64_t desc[kDescriptorWords - 1] = {};
  // Only outputs[rank] is written (one-shot all-reduce, pull all-gather), so
  // peers' outputs may be null: they live in other processes, unmapped here.
  bool own_output_only = false;
  // Debug hook: this rank waits this long after the start barrier before
  // reading peers (a slow reader, so a race window is really open).
  uint64_t debug_read_delay_ns = 0;
  // Negative control for seed bug 2 (AITER): leave without the end barrier,
  // so a fast rank's caller may reuse its input while a peer still reads it.
  bool unsafe_skip_end_barrier = false;
  // Post/complete mode (optional): this rank's op trace (kTraceDepth entries).
  uint64_t* trace = nullptr;
};

// Loads every kernel of this file now. With lazy module loading (the CUDA
// default) the first launch of a kernel loads it, and that can block the host
// until running kernels finish: a rank spinning in a barrier for a peer that
// the blocked host has not launched yet never finishes (seen on the H200:
// the first op of a process hit its deadline). Call once per device before
// the first collective.
Status PreloadKernels();

// `posted_mirror` (optional, host-mapped): index + 1, for the daemon's stats.
// `trace` (optional): this rank's op trace; the post clears the op's entry.
Status LaunchPost(uint64_t* counter, uint64_t* op_index, gpuStream_t stream, uint64_t* posted_mirror = nullptr,
                  uint64_t* trace = nullptr);
// In place (inputs[k] == outputs[k]) always runs two-shot push: one-shot
// would overwrite an input a peer is still reading. INVALID_ARGUMENT for
// buffers that partially overlap.
Status LaunchAllReduce(DataType dtype, ReduceOp op, DeviceAlgorithm algo, const DeviceRankArgs& args, uint32_t blocks,
                       gpuStream_t stream);
enum class GatherAlgorithm : uint32_t {
  kPush = 1,  // outputs[k][rank * count + j] = inputs[rank][j] for every k
  kPull = 2,  // outputs[rank][k * count + j] = inputs[k][j] for every k (own output only)
};
Status LaunchAllGather(DataType dtype, const DeviceRankArgs& args, uint32_t blocks, gpuStream_t stream,
                       GatherAlgorithm algo = GatherAlgorithm::kPush);
// Optional host-mapped mirrors, written after done: `completed_mirror` = index
// + 1 (the daemon's stats) and `status_mirror` = the error word (a host wait
// reads the op's verdict without a device copy).
// `trace` (optional): the op's entry gets its completion time and index + 1.
Status LaunchComplete(const uint64_t* op_index, uint64_t* done_word, gpuStream_t stream,
                      uint64_t* completed_mirror = nullptr, const int32_t* error_word = nullptr,
                      int32_t* status_mirror = nullptr, uint64_t* trace = nullptr);
// Spins on `stream` until *done_word >= *op_index + 1, the abort word, or the deadline.
Status LaunchWait(const uint64_t* op_index, const uint64_t* done_word, uint64_t* abort_word, int32_t* error_word,
                  uint64_t timeout_ns, gpuStream_t stream);

// The launchers' argument checks alone (nothing is launched): callers that
// enqueue other work before the kernel (a post that takes an op index) check
// first, so a refused op leaves no trace on the stream.
Status ValidateAllReduce(DataType dtype, ReduceOp op, DeviceAlgorithm algo, const DeviceRankArgs& args,
                         uint32_t blocks);
Status ValidateAllGather(DataType dtype, const DeviceRankArgs& args, uint32_t blocks, GatherAlgorithm algo);
// Type and placement checks of a fused (or copy-engine) all-gather / all-reduce.
Status ValidateFusedAllGather(DataType dtype, const DeviceRankArgs& args);
Status ValidateFusedAllReduce(DataType dtype, ReduceOp op, const DeviceRankArgs& args);

// Fused all-reduce for ranks that share one device and one launcher (the
// daemon): a single kernel reads each input once and writes each output once.
// A kernel that only waits `ns` on the device: the race windows of tests and
// debug hooks (a delayed rank, a delayed epilogue).
Status LaunchDelay(uint64_t ns, gpuStream_t stream);

Status LaunchFusedAllReduce(DataType dtype, ReduceOp op, const DeviceRankArgs& args, uint32_t blocks,
                            gpuStream_t stream);
// Fused all-gather for ranks served by one launcher: outputs[j][k * count + i]
// = inputs[k][i] for every j, k (each input read once, each output written once).
Status LaunchFusedAllGather(DataType dtype, const DeviceRankArgs& args, uint32_t blocks, gpuStream_t stream);

// ---- daemon-executed ops: the client posts into the op ring, the daemon runs them ----

constexpr uint32_t kRingDescriptorWords = 8;

// Where a rank's op ring lives (host memory registered with CUDA) and what
// the post writes there.
struct RingPostArgs {
  uint64_t* counter = nullptr;        // device: the rank's op counter
  uint64_t* op_index = nullptr;       // device: the index this post took
  uint64_t* posted_mirror = nullptr;  // host-mapped: index + 1, for stats
  uint8_t* ring = nullptr;            // host-mapped: this rank's ring slots
  uint32_t depth = 0;
  uint32_t slot_bytes = 0;
  uint32_t desc_offset = 0;           // of the descriptor inside a slot; ready_seq is at 0
  uint32_t desc_words = 0;
  uint64_t desc[kRingDescriptorWords] = {};
  const uint64_t* completed = nullptr;  // host-mapped: the daemon's count of this rank's finished ops
  uint64_t* abort_word = nullptr;
  int32_t* error_word = nullptr;
  uint64_t timeout_ns = 0;
};
// index = atomicAdd(counter); waits (deadline, abort) until slot index % depth
// is free (the daemon finished op index - depth); writes the descriptor; then
// publishes ready_seq = index + 1. Stream order makes everything before it on
// the stream (the input's copy-in) visible to the daemon first.
Status LaunchRingPost(const RingPostArgs& args, gpuStream_t stream);
// The daemon's side: *words[k] = value for k < n (system-scope release), after
// the op's kernel on the daemon's stream.
constexpr uint32_t kMaxPublishWords = 64;
struct PublishArgs {
  uint64_t* words[kMaxPublishWords] = {};
  uint32_t n = 0;
  uint64_t value = 0;
};
Status LaunchPublish(const PublishArgs& args, gpuStream_t stream);

}  // namespace collectived::device

#endif  // COLLECTIVED_KERNELS_DEVICE_DEVICE_COLLECTIVES_H_
