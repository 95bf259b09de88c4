// The op protocol on the GPU (host-callable half; the device functions are in
// ring/op_ring_device.cuh). Per op and rank, on the caller's stream:
//
//   LaunchPost      index = atomicAdd(counter, 1) on the device; writes it to
//                   the rank's index word (graph replay takes a new index).
//   [the collective kernel: gen = index + 1; start barrier; data; end barrier]
//   LaunchComplete  done = gen, published with system-scope release, after the
//                   whole kernel (stream order): completion covers all.
//   LaunchWait      (any stream) spins until done >= gen, with a deadline.
//
// Single-launch mode folds post and complete into the collective kernel (see
// DeviceOpArgs). Daemon-executed ops post into the host op ring instead
// (LaunchRingPost) and the daemon publishes completion (LaunchPublish).
// Every launch captures into CUDA graphs: no value chosen on the host is a
// generation. Barrier flags are 64-bit words [phase][block][rank], a 128-byte
// line each, written with
// system-scope release and polled with system-scope acquire; every spin reads
// the GPU timer and the abort word and gives up with a DeviceError.
#ifndef COLLECTIVED_RING_OP_RING_GPU_H_
#define COLLECTIVED_RING_OP_RING_GPU_H_

#include <cstdint>

#include "base/gpu/gpu_runtime.h"
#include "collectived/status.h"
#include "ring/gpu_control_layout.h"
#include "ring/op_codec.h"

namespace collectived::ring {

// The protocol words one rank's collective kernel works with. Plain data,
// passed by value to the kernel (the kernels' DeviceRankArgs extends it with
// the buffers).
struct DeviceOpArgs {
  uint32_t rank = 0;
  uint32_t world = 0;
  uint64_t* flags = nullptr;  // kFlagWords words, zeroed once, shared by the ranks
  // Post/complete mode: the rank's index word (LaunchPost writes it; LaunchComplete publishes done).
  // Single-launch mode (op_index == nullptr): gen = *done + 1, and the kernel's last block to
  // finish publishes *done = gen; `finished` counts finished blocks (zero between ops). Use it
  // when nothing follows the kernel in the op (no epilogue) and waits are stream-ordered.
  // A failed op (deadline, abort, mismatch) is completed all the same: done = gen, verdict in the
  // error word, as LaunchComplete does in post/complete mode.
  const uint64_t* op_index = nullptr;
  uint64_t* done = nullptr;
  uint32_t* finished = nullptr;
  // Single-launch mode, optional: this rank's block completion words
  // (GpuControlLayout::BlockDone). Each block then publishes its own
  // completion, block_done[block] = gen, instead of the last block to finish
  // publishing done after counting itself: no block waits for a count's
  // round trip (docs/latency.md, the fifth cut). gen = max(done,
  // block_done[block]) + 1. REQUIRES: every op of the rank runs the same
  // number of blocks (the client library's are the communicator's), so each
  // block's word follows every op; readers take CompletedOps. The count still
  // runs where the last block has more to publish (status_mirror, trace).
  uint64_t* block_done = nullptr;
  uint64_t* counter = nullptr;  // single-launch mode advances it too, so the modes mix on one rank
  // Single-launch mode (optional): the op's index (gen - 1) is written here when the kernel
  // starts, as LaunchPost writes it (LaunchWait reads it), and the error word is copied to
  // `status_mirror` (host-mapped) before done, as LaunchComplete copies it.
  uint64_t* index_word = nullptr;
  int32_t* status_mirror = nullptr;
  // Single-launch mode with block_done (optional, host-mapped): block 0
  // stores the op's generation here when the op begins, instead of a last
  // block copying the verdict to status_mirror after a count of finished
  // blocks (docs/latency.md, the ninth cut). The host's verdict for the op,
  // once the op's stream passed it: failed iff failed_gen != 0 and
  // failed_gen <= the generation here (the rank's failures are monotone: a
  // failed op aborts the communicator, and every later op fails at begin).
  uint64_t* gen_mirror = nullptr;
  uint64_t* abort_word = nullptr;  // nonzero: every spin gives up
  int32_t* error_word = nullptr;   // first DeviceError of this communicator
  // Optional, host-mapped: this rank's own record of a failure. Every
  // DeviceError a kernel of this rank records lands here too, so the host
  // learns of a failed graph-replayed op (it has no verdict of its own)
  // without a GPU call (Communicator::AsyncError). Written on failure only.
  int32_t* rank_error = nullptr;
  // Optional, host-mapped, zero until then: the lowest generation of an op
  // of this rank that failed (collective kernels only; a LaunchWait's
  // failure records rank_error alone, and the ops after it fail themselves).
  // Stored after rank_error and a system fence: a host that reads it
  // nonzero reads the code there too. With gen_mirror, the op's verdict.
  uint64_t* failed_gen = nullptr;
  uint64_t timeout_ns = 0;         // per spin
  // Device-side matcher (optional): each block publishes desc[0..2]
  // (PackDeviceDescriptor) beside its start flag, in the flag's line (tagged
  // words, ring/gpu_control_layout.h); in the start barrier every block
  // compares each peer's with its own, and a difference fails the op on every
  // rank (kDeviceMismatch) instead of reducing mismatched buffers.
  bool match_descriptors = false;
  uint64_t desc[kDescriptorWords] = {};
  // Publish start flags with a release (ring::kGpuStartFlagRelease, a
  // daemon option): HIP always does.
  bool start_flag_release = false;
  // Every rank of the communicator is on this rank's GPU, with every window
  // and buffer its peers read or write (GpuCommSetup's placement): the end
  // flag's fence is then at GPU scope, not system scope (docs/latency.md,
  // the thirteenth cut; docs/proof.md, "What rests on the hardware's
  // behaviour"). The client library sets it unless the daemon keeps system
  // scope (ring::kGpuSystemEndFence). HIP keeps system scope.
  bool end_fence_gpu_scope = false;
  // Two-shot push's work claimed from a shared counter
  // (GpuControlLayout::Claims): every rank's blocks take units of the whole
  // op in turn, so blocks on faster SMs take more and all end together,
  // where a static split left the op waiting on its slowest block (up to 17
  // us of 98 at 8 ranks, 16 MiB: docs/latency.md, "Claimed work"). Any
  // block may reduce any pack: the sum's order is the same whoever computes
  // it. Op gen claims from counter gen % 2; rank 0's block 0 zeroes the other
  // after the start barrier (RunOp), when no rank still runs op gen - 1.
  // Only where every rank shares this GPU (the client library's placement),
  // and not under ring::kGpuStaticTwoShot. Set, every op of the communicator
  // keeps the counters reset; two-shot push claims only where claim_work is
  // set too (ring::TwoShotClaimsPay, the same answer on every rank).
  uint32_t* claims = nullptr;
  bool claim_work = false;
  // Negative control for seed bug 2 (AITER): leave without the end barrier,
  // so a fast rank's caller may reuse its input while a peer still reads it.
  bool unsafe_skip_end_barrier = false;
  // Optional: this rank's op trace (kTraceDepth entries).
  uint64_t* trace = nullptr;
  // The latency breakdown (collective-bench -S, in-process ranks): kSkip*
  // bits, each leaving one part of the op protocol out to time what it costs;
  // and the device tests' hooks (kDelayDescriptorWords, kIgnoreDescriptorTags).
  // Nothing else sets it: the client library and the daemon leave it 0.
  uint32_t bench_skip = 0;
};

// bench_skip bits (docs/latency.md).
// 1: the system fences before each flag and around the completion count, in
// the kernel before they were cut (docs/latency.md).
constexpr uint32_t kSkipDescriptorMatch = 2; // the device-side matcher in the start barrier
constexpr uint32_t kSkipDeadlinePoll = 4;    // the deadline and abort polls inside spins
constexpr uint32_t kSkipAbortChecks = 8;     // the abort word at op begin and before the end flag
constexpr uint32_t kSkipCompletionCount = 16; // the last-block count: block 0 publishes done alone
// 64: the start flag as a release store, as before the eighth cut
// (docs/latency.md): not a part left out but one put back, to time what the
// start flag's fence cost in the same run. (Benches built before the cut
// read 64 the other way, as the release left out.)
constexpr uint32_t kBenchStartRelease = 64;
// Device tests only. 128: the start flag's writer stores the flag, waits
// kDescriptorDelayNs, then stores the tagged descriptor words, so peers see
// the flag with the previous op's words. 256 (negative control, with 128):
// peers take the words without looking at their tags, as an untagged
// descriptor would be taken.
constexpr uint32_t kDelayDescriptorWords = 128;
constexpr uint32_t kIgnoreDescriptorTags = 256;
// 512 (bench and tests only): the data kernels' launchers launch the op
// plainly where they would launch it as a programmatic dependent launch, and
// the kernel skips its wait for the grids before it: the launch as before the
// tenth cut, to time it in the same run (docs/latency.md, "The tenth cut").
// Where a programmatic launch is possible (ProgrammaticLaunches() in
// kernels/device/device_collectives.h), an op kernel's blocks may be placed
// before the kernel before it on the stream has finished, and the kernel
// waits for that grid (griddepcontrol.wait) before it reads anything.
constexpr uint32_t kBenchPlainLaunch = 512;
// 1024 (bench and tests only): the op's blocks do not trigger the launch of
// the op after them (griddepcontrol.launch_dependents, RunOp) once they are
// past the start barrier; the next op's blocks are then placed only as this
// op's blocks exit, as in the tenth cut (docs/latency.md, "The eleventh cut").
constexpr uint32_t kBenchLateTrigger = 1024;
// 2048 (bench and tests only): the end flag's fence at system scope where
// end_fence_gpu_scope would put it at GPU scope, as before the thirteenth
// cut (docs/latency.md): one put back, to time what it costs in the same
// run. (Benches built before the cut read 2048 the other way, as GPU scope
// put in.)
constexpr uint32_t kBenchSystemEndFence = 2048;
constexpr uint64_t kDescriptorDelayNs = 200'000;

// `posted_mirror` (optional, host-mapped): index + 1, for the daemon's stats.
// `trace` (optional): this rank's op trace; the post clears the op's entry.
Status LaunchPost(uint64_t* counter, uint64_t* op_index, gpuStream_t stream, uint64_t* posted_mirror = nullptr,
                  uint64_t* trace = nullptr);
// Optional host-mapped mirrors, written after done: `completed_mirror` = index
// + 1 (the daemon's stats) and `status_mirror` = the error word (a host wait
// reads the op's verdict without a device copy).
// `trace` (optional): the op's entry gets its completion time and index + 1.
Status LaunchComplete(const uint64_t* op_index, uint64_t* done_word, gpuStream_t stream,
                      uint64_t* completed_mirror = nullptr, const int32_t* error_word = nullptr,
                      int32_t* status_mirror = nullptr, uint64_t* trace = nullptr);
// Spins on `stream` until *done_word >= *op_index + 1, the abort word, or the deadline.
// Not for single-launch ops with block_done: they leave done as it was (the
// client library waits for its ops with events; readers take CompletedOps).
// `rank_error` (optional, host-mapped; DeviceOpArgs::rank_error): gets the
// wait's failure (deadline or abort). The daemon-executed mode's waits:
// the daemon publishes `done` only for ops that succeeded.
Status LaunchWait(const uint64_t* op_index, const uint64_t* done_word, uint64_t* abort_word, int32_t* error_word,
                  uint64_t timeout_ns, gpuStream_t stream, int32_t* rank_error = nullptr);

// ---- daemon-executed ops: the client posts into the op ring, the daemon runs them ----

// Where a rank's op ring lives (host memory registered with the GPU runtime)
// and what the post writes there.
struct RingPostArgs {
  uint64_t* counter = nullptr;        // device: the rank's op counter
  uint64_t* op_index = nullptr;       // device: the index this post took
  uint64_t* posted_mirror = nullptr;  // host-mapped: index + 1, for stats
  uint8_t* ring = nullptr;            // host-mapped: this rank's ring slots
  uint32_t depth = 0;
  RingSlotWords slot = {};            // RingSlotLayout()
  uint64_t desc[kRingDescriptorWords] = {};  // PackOpDescriptor
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

// Loads this file's kernels now (gpu::PreloadKernel says why).
Status PreloadOpRingKernels();

}  // namespace collectived::ring

#endif  // COLLECTIVED_RING_OP_RING_GPU_H_
