// The op protocol on the GPU, device half (MSCCL++ style: the device API
// beside its host half, ring/op_ring_gpu.h and ring/op_ring.h): system-scope
// flags, bounded spins, the generation barrier with the device-side matcher,
// an op's begin and finish, and the op envelope RunOp that every collective
// kernel runs its data movement in. Header-only (no -rdc): include it from
// .cu files.
#ifndef COLLECTIVED_RING_OP_RING_DEVICE_CUH_
#define COLLECTIVED_RING_OP_RING_DEVICE_CUH_

#include <cstdint>
#include <type_traits>

#include "base/gpu/gpu_runtime.h"
#include "ring/gpu_control_layout.h"
#include "ring/op_ring_gpu.h"

namespace collectived::ring {

// ---- system-scope flags, timer ------------------------------------------------

__device__ __forceinline__ void StoreRelease(uint64_t* p, uint64_t v) {
#if defined(COLLECTIVED_USE_HIP) || defined(__HIP_PLATFORM_AMD__)
  __hip_atomic_store(p, v, __ATOMIC_RELEASE, __HIP_MEMORY_SCOPE_SYSTEM);
#else
  asm volatile("st.release.sys.global.u64 [%0], %1;" ::"l"(p), "l"(v) : "memory");
#endif
}

// A strong store at system scope without the release's fence (on sm_90 a
// release store is MEMBAR.ALL.SYS then the store, about 0.7 us on the H100:
// docs/latency.md, the seventh cut). Where a fence just before, in the same
// thread, already ordered what it vouches for (StoreEndFlag, FinishOp), and
// for the start flag and its tagged words, which vouch for no write of the
// kernel (Barrier).
__device__ __forceinline__ void StoreRelaxed(uint64_t* p, uint64_t v) {
#if defined(COLLECTIVED_USE_HIP) || defined(__HIP_PLATFORM_AMD__)
  __hip_atomic_store(p, v, __ATOMIC_RELAXED, __HIP_MEMORY_SCOPE_SYSTEM);
#else
  asm volatile("st.relaxed.sys.global.u64 [%0], %1;" ::"l"(p), "l"(v) : "memory");
#endif
}

// The end flag: a release fence, then a strong store. For the flag this is
// what a release store is (a fence followed by a strong write is a release
// pattern in PTX's memory model; sm_90 compiles a release store to
// MEMBAR.ALL.SYS and a strong store, and this is expected to be the same,
// not yet checked in SASS); unlike a release store, the fence also releases
// later strong stores of this thread, the block's completion word among
// them (FinishOp). The fence is at system scope unless `gpu_scope`
// (DeviceOpArgs::end_fence_gpu_scope: every rank, window and buffer on this
// GPU), where the system scope cost 0.4-1.6 us an op (docs/latency.md, the
// thirteenth cut). HIP: a release store at system scope.
__device__ __forceinline__ void StoreEndFlag(uint64_t* p, uint64_t v, bool gpu_scope) {
#if defined(COLLECTIVED_USE_HIP) || defined(__HIP_PLATFORM_AMD__)
  (void)gpu_scope;
  StoreRelease(p, v);
#else
  if (gpu_scope) {
    asm volatile("fence.acq_rel.gpu;" ::: "memory");
  } else {
    asm volatile("fence.acq_rel.sys;" ::: "memory");
  }
  StoreRelaxed(p, v);
#endif
}

// A strong load at system scope without acquire: a start flag's tagged
// descriptor words, whose tags say whether they are the op's (Barrier).
__device__ __forceinline__ uint64_t LoadRelaxed(const uint64_t* p) {
#if defined(COLLECTIVED_USE_HIP) || defined(__HIP_PLATFORM_AMD__)
  return __hip_atomic_load(p, __ATOMIC_RELAXED, __HIP_MEMORY_SCOPE_SYSTEM);
#else
  uint64_t v;
  asm volatile("ld.relaxed.sys.global.u64 %0, [%1];" : "=l"(v) : "l"(p) : "memory");
  return v;
#endif
}

__device__ __forceinline__ uint64_t LoadAcquire(const uint64_t* p) {
#if defined(COLLECTIVED_USE_HIP) || defined(__HIP_PLATFORM_AMD__)
  return __hip_atomic_load(p, __ATOMIC_ACQUIRE, __HIP_MEMORY_SCOPE_SYSTEM);
#else
  uint64_t v;
  asm volatile("ld.acquire.sys.global.u64 %0, [%1];" : "=l"(v) : "l"(p) : "memory");
  return v;
#endif
}

__device__ __forceinline__ uint64_t NowNs() {
#if defined(COLLECTIVED_USE_HIP) || defined(__HIP_PLATFORM_AMD__)
  return __builtin_amdgcn_s_memrealtime() * 10;  // 100 MHz constant clock
#else
  uint64_t t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
#endif
}

// A failure, recorded once per rank in host memory (DeviceOpArgs::rank_error):
// a plain store, since atomics on host memory need PCIe atomics, which not
// every platform has. Concurrent blocks may each store theirs; any one of
// them says the op failed. `op_gen` (nonzero in collective kernels): the
// failed op's generation, kept in failed_gen unless a lower one is there.
// Only one op of a rank runs at a time (its ops are stream-ordered), so the
// racing stores carry one generation; a LaunchWait passes 0.
__device__ inline void RecordRankError(const DeviceOpArgs& a, int32_t code, uint64_t op_gen) {
  if (code == 0) return;
  if (a.rank_error != nullptr) {
    volatile int32_t* w = a.rank_error;
    if (*w == 0) {
      *w = code;
      __threadfence_system();
    }
  }
  if (a.failed_gen != nullptr && op_gen != 0) {
    // After the code and its fence: a host that reads this reads the code.
    volatile uint64_t* f = a.failed_gen;
    const uint64_t was = *f;
    if (was == 0 || op_gen < was) *f = op_gen;
    __threadfence_system();
  }
}

__device__ inline void RecordError(const DeviceOpArgs& a, int32_t code, uint64_t op_gen = 0) {
  atomicCAS_system(a.error_word, 0, code);  // ranks on several GPUs share the word
  RecordRankError(a, code, op_gen);
  if (code != kDeviceAborted) {
    __threadfence_system();
    StoreRelease(a.abort_word, 1);  // release every other spinner of this communicator
  }
}

// Spins until ready() (which loads what it waits for, an acquire among
// them); false (error recorded, for op `op_gen` where nonzero) on abort or
// deadline.
template <typename Ready>
__device__ inline bool SpinUntil(const DeviceOpArgs& a, uint64_t op_gen, Ready ready) {
  if (a.bench_skip & kSkipDeadlinePoll) {
    while (!ready()) {
    }
    return true;
  }
  const uint64_t deadline = NowNs() + a.timeout_ns;
  uint32_t spins = 0;
  while (!ready()) {
    if ((++spins & 255) == 0) {
      if (LoadAcquire(a.abort_word) != 0) {
        RecordError(a, kDeviceAborted, op_gen);
        return false;
      }
      if (NowNs() > deadline) {
        RecordError(a, kDeviceDeadline, op_gen);
        return false;
      }
    }
  }
  return true;
}

// Spins until *word >= target; false (error recorded) on abort or deadline.
__device__ inline bool SpinAtLeast(const DeviceOpArgs& a, const uint64_t* word, uint64_t target,
                                   uint64_t op_gen = 0) {
  return SpinUntil(a, op_gen, [&] { return LoadAcquire(word) >= target; });
}

// Rank `rank`'s flag of this block and `phase`: word 0 of a 128-byte line of
// its own (ring/gpu_control_layout.h); a start flag's words 1..6 hold the
// rank's descriptor, tagged with the generation.
__device__ __forceinline__ uint64_t* FlagLine(const DeviceOpArgs& a, uint32_t phase, uint32_t rank) {
  return a.flags + FlagWord(phase, blockIdx.x, rank);
}

// This rank's descriptor for op `gen` into its start flag's line: strong
// stores, each word tagged (TagHalf), in no order a peer relies on.
__device__ inline void StoreDescriptor(const DeviceOpArgs& a, uint64_t* line, uint64_t gen) {
  for (uint32_t k = 0; k < kDescriptorWords; ++k) {
    StoreRelaxed(line + kTaggedDescriptorWord + 2 * k, TagHalf(gen, static_cast<uint32_t>(a.desc[k])));
    StoreRelaxed(line + kTaggedDescriptorWord + 2 * k + 1, TagHalf(gen, static_cast<uint32_t>(a.desc[k] >> 32)));
  }
}

// A peer's start flag and descriptor for op `gen` (the device-side
// matcher): spins until the flag is at least gen and every tagged word is op
// gen's, then compares. A poll loads the words, then the flag, all on one
// line, so they are in flight together: one round trip a poll (the words'
// serial loads after the flag cost 0.13-0.20 us: docs/latency.md). The flag
// is exactly gen once reached: the peer publishes gen + 1 only after this
// rank's end flag of gen, and its words stay until then too (one past gen,
// as under the negative control that skips the end barrier, fails the
// compare at once). A word read
// before the peer stored it carries an older op's tag (its line is
// rewritten by every op its block runs: a stale word would have to be 2^32
// ops old to pass). False, error recorded, on a mismatch, abort or deadline.
__device__ inline bool AwaitDescriptor(const DeviceOpArgs& a, const uint64_t* line, uint64_t gen) {
  const bool check_tags = (a.bench_skip & kIgnoreDescriptorTags) == 0;
  uint64_t w[kTaggedDescriptorWords];
  uint64_t flag = 0;
  const bool arrived = SpinUntil(a, gen, [&] {
    for (uint32_t k = 0; k < kTaggedDescriptorWords; ++k) w[k] = LoadRelaxed(line + kTaggedDescriptorWord + k);
    flag = LoadAcquire(line);
    if (flag != gen) return flag > gen;  // past gen: a mismatch, not a wait
    bool fresh = true;
    if (check_tags) {
      for (uint32_t k = 0; k < kTaggedDescriptorWords; ++k) fresh &= TagMatches(w[k], gen);
    }
    return fresh;
  });
  if (!arrived) return false;
  bool same = flag == gen;
  for (uint32_t k = 0; k < kDescriptorWords; ++k) {
    same &= (TaggedHalf(w[2 * k]) | uint64_t{TaggedHalf(w[2 * k + 1])} << 32) == a.desc[k];
  }
  if (!same) RecordError(a, kDeviceMismatch, gen);
  return same;
}

// Same-index blocks of every rank meet: thread t < world publishes (t == rank)
// or waits for rank t's flag of this block and phase. Before the end flag,
// every write of this block is ordered (bar.sync, then the publisher's
// release); the start flag orders none (see below).
// `abort_before_flag` (end barrier): see EndBarrier.
__device__ inline bool Barrier(const DeviceOpArgs& a, uint32_t phase, uint64_t gen, bool abort_before_flag = false) {
  // The verdict is a __syncthreads_or, not a shared word: a shared word reset
  // at the next barrier's start raced with slower threads still reading this
  // one's (compute-sanitizer racecheck, 2026-12-05).
  int failed = 0;
  __syncthreads();
  if (threadIdx.x < a.world) {
    const bool match = phase == 0 && a.match_descriptors && (a.bench_skip & kSkipDescriptorMatch) == 0;
    if (threadIdx.x == a.rank) {
      uint64_t* line = FlagLine(a, phase, a.rank);
      // The words go out even where peers do not compare them
      // (match_descriptors off), so every op rewrites the line
      // (AwaitDescriptor's tags).
      const bool words = phase == 0 && (a.bench_skip & kSkipDescriptorMatch) == 0;
      const bool late_words = words && (a.bench_skip & kDelayDescriptorWords) != 0;
      if (words && !late_words) StoreDescriptor(a, line, gen);
      // No fence before the flag but the end flag's own (StoreEndFlag): it
      // orders this thread's writes, and through the bar.sync above every
      // write and read of its block (cumulativity in PTX's memory model),
      // which is what peers that acquire the end flag rely on. The start
      // flag is a strong store without a fence (the eighth cut,
      // docs/latency.md): peers read nothing this block wrote before it but
      // the descriptor, whose tags make it exact without ordering. What else
      // the flag vouches for was done by stream work before this kernel,
      // which completed and flushed its writes to this device's memory
      // before the kernel began (the kernel boundary): the input peers read
      // was written (a copy-in, the caller's kernels), and, where peers push
      // into this rank's output (two-shot push, all-gather push), earlier
      // reads of it are over (the previous op's copy-out) and earlier writes
      // to it landed (a caller's memset). Peers read and write that memory
      // where it lives, after their acquire of the flag (docs/proof.md,
      // "What rests on the hardware's behaviour"). The fence that stood here
      // cost 1.0 us at 2 ranks and 2.1 at 8 (the daemon option
      // --gpu-start-flag-release puts it back, DeviceOpArgs::start_flag_release,
      // and so does the bench bit kBenchStartRelease).
      // HIP keeps a fence before either flag: nothing has checked AMD's
      // model here.
#if defined(COLLECTIVED_USE_HIP) || defined(__HIP_PLATFORM_AMD__)
      __threadfence_system();
#endif
      // Reads that end after an abort may have overlapped a peer's next op:
      // a peer that left its end barrier on the abort word rewrites its slot
      // (or its caller its buffer). The op then fails (docs/proof.md, the
      // abort rule): the abort word is read after the block's reads, before
      // or after its end flag (EndBarrier says which).
      const bool check_abort = phase == 1 && (a.bench_skip & kSkipAbortChecks) == 0;
      if (check_abort && abort_before_flag && LoadAcquire(a.abort_word) != 0) {
        RecordError(a, kDeviceAborted, gen);
        failed = 1;
      } else {
        if (phase == 1) {
          StoreEndFlag(line, gen, a.end_fence_gpu_scope && (a.bench_skip & kBenchSystemEndFence) == 0);
        } else {
#if defined(COLLECTIVED_USE_HIP) || defined(__HIP_PLATFORM_AMD__)
          StoreRelease(line, gen);
#else
          if (a.start_flag_release || (a.bench_skip & kBenchStartRelease) != 0) {
            StoreRelease(line, gen);
          } else {
            StoreRelaxed(line, gen);
          }
#endif
          if (late_words) {  // the device tests' hook: peers see the flag first
            const uint64_t until = NowNs() + kDescriptorDelayNs;
            while (NowNs() < until) {
            }
            StoreDescriptor(a, line, gen);
          }
        }
        if (check_abort && !abort_before_flag && LoadAcquire(a.abort_word) != 0) {
          RecordError(a, kDeviceAborted, gen);
          failed = 1;
        }
      }
    } else {
      const uint64_t* line = FlagLine(a, phase, threadIdx.x);
      // (Not under the negative control that skips the end barrier: a peer
      // a whole op ahead would read as a mismatch, as with the row this
      // replaced.)
      if (match ? !AwaitDescriptor(a, line, gen) : !SpinAtLeast(a, line, gen, gen)) failed = 1;
    }
  }
  return __syncthreads_or(failed) == 0;
}

// This rank's op trace entry for index `gen - 1`.
__device__ inline uint64_t* TraceEntry(uint64_t* trace, uint64_t gen) {
  return trace + ((gen - 1) % kTraceDepth) * kTraceEntryWords;
}

// The end barrier, unless the negative control skips it. Before it, each
// block records when it finished reading (the trace keeps the latest).
// The abort check after the block's reads comes just after its end flag
// when the flag vouches only for those reads (true either way): the read
// then overlaps the wait for the peers' flags instead of delaying them by a
// round trip (docs/latency.md, the fourth cut). `pushes_reduced`: the kernel
// also wrote what it reduced from peers' inputs into peers' outputs (two-shot
// push), so its flag vouches for that data too, which reads overlapping a
// peer's leave could have spoiled: then the check comes first and an aborted
// op publishes no end flag, and a peer waiting for it leaves on the abort
// word instead of passing with the spoiled chunk.
__device__ inline bool EndBarrier(const DeviceOpArgs& a, uint64_t gen, bool pushes_reduced) {
  if (a.trace != nullptr) {
    __syncthreads();
    if (threadIdx.x == 0) {
      atomicMax(reinterpret_cast<unsigned long long*>(TraceEntry(a.trace, gen) + 1),
                static_cast<unsigned long long>(NowNs()));
    }
  }
  return a.unsafe_skip_end_barrier || Barrier(a, 1, gen, pushes_reduced);
}

// The op's generation in *gen; false when the communicator is already aborted
// (a failed op leaves flags that a later op with the same generation must not
// trust), and the op only completes. One thread per block reads the abort
// word: it lives in the control window on the first rank's GPU
// (ring/gpu_control_layout.h), a peer-GPU read for ranks elsewhere; when it
// lived in host memory a read by every thread of every block cost
// milliseconds of PCIe round trips (measured: 2.2 ms per op). Single-launch mode posts here: block 0 publishes
// the index and the count of posted ops, as LaunchPost would.
__device__ inline bool BeginOp(const DeviceOpArgs& a, uint64_t* gen_out) {
  __shared__ uint64_t gen;
  __shared__ int live;
  if (threadIdx.x == 0) {
    if (a.op_index != nullptr) {
      gen = *a.op_index + 1;
    } else {
      const uint64_t done = *a.done;
      const uint64_t mine = a.block_done != nullptr ? a.block_done[blockIdx.x] : 0;
      gen = (done > mine ? done : mine) + 1;
    }
    live = (a.bench_skip & kSkipAbortChecks) != 0 || LoadAcquire(a.abort_word) == 0;
    if (!live) RecordError(a, kDeviceAborted, gen);
    if (a.op_index == nullptr && blockIdx.x == 0) {
      if (a.index_word != nullptr) *a.index_word = gen - 1;
      // The op's host word (an eager op's verdict, with failed_gen): a
      // posted store, issued long before this thread's next fence.
      if (a.gen_mirror != nullptr) *static_cast<volatile uint64_t*>(a.gen_mirror) = gen;
      // Words 0-2 of the entry were cleared when the op before completed
      // (ClearNextTraceEntry): clearing them here would race with other
      // blocks' atomicMax, which do not wait for this block.
      if (a.trace != nullptr) TraceEntry(a.trace, gen)[3] = gen;
      if (a.counter != nullptr) *a.counter = gen;  // LaunchPost would have taken index gen - 1
    }
  }
  __syncthreads();
  *gen_out = gen;
  return live != 0;
}

// Op `gen` completes: clear words 0-2 of the next op's entry (an op of 64
// ago), so a single-launch next op, which cannot clear its own, starts from
// zeros: "not read yet", "not complete".
__device__ inline void ClearNextTraceEntry(uint64_t* trace, uint64_t gen) {
  uint64_t* next = TraceEntry(trace, gen + 1);
  for (uint64_t w = 0; w < kTraceEntryWords - 1; ++w) next[w] = 0;
}

// Counts a finished block; true for the last of `blocks`. The count wraps to
// 0 on the last block: it is ready for the next op even if a wrongly ordered
// launch ever counted into this one. Acquire-release at GPU scope: each block's
// writes (ordered by its bar.sync) are visible to the last block, whose
// release store of done then carries them to any observer (cumulativity).
__device__ __forceinline__ bool CountFinishedBlock(uint32_t* finished, uint32_t blocks) {
#if defined(COLLECTIVED_USE_HIP) || defined(__HIP_PLATFORM_AMD__)
  __threadfence_system();
  const bool last = atomicInc(finished, blocks - 1) == blocks - 1;
  if (last) __threadfence_system();
  return last;
#else
  uint32_t old;
  asm volatile("atom.acq_rel.gpu.global.inc.u32 %0, [%1], %2;" : "=r"(old) : "l"(finished), "r"(blocks - 1) : "memory");
  return old == blocks - 1;
#endif
}

// Single-launch mode: the last block to finish completes the op, after every
// block's writes, whether it succeeded or not: the verdict, the trace's
// completion, then done. With block_done each block publishes its own word
// instead of done, and only counts itself when a last block has a verdict or
// a trace to publish. `synced`: the block's threads have just met in a
// bar.sync (every step of RunOp but the unsafe skip ends in one), which
// orders their writes before thread 0's count as this one would. `fenced`:
// besides, the block passed an end barrier, whose flag thread `a.rank`
// stored after a release fence (StoreEndFlag), after the bar.sync that
// followed the block's last write.
__device__ inline void FinishOp(const DeviceOpArgs& a, uint64_t gen, bool synced = false, bool fenced = false) {
  if (a.op_index != nullptr) return;  // LaunchComplete publishes
  if (!synced) __syncthreads();
  if (a.block_done != nullptr && a.status_mirror == nullptr && a.trace == nullptr) {
    // Nothing for a last block to publish: this block is through (its
    // writes, and its peers' reads of its part by the end barrier).
#if !defined(COLLECTIVED_USE_HIP) && !defined(__HIP_PLATFORM_AMD__)
    // After a passed end barrier the word needs no fence of its own: the
    // thread that stored the end flag stores it, and the fence before that
    // flag (StoreEndFlag) followed by this strong store is a release pattern
    // on the word in PTX's model: the block's writes, ordered before the
    // fence by the bar.sync, are ordered before the word; every read had
    // returned (its value was consumed before the bar.sync). The end flag's
    // own store is ordered before the word only in program order:
    // the one reader that unmaps memory on the word (Destroy's wait for
    // graph replays) sees it through a GPU copy and a stream
    // synchronization, tens of microseconds after that store issued, an
    // operational argument, not the model's. The readers: the next op of
    // this rank, after the kernel boundary, and the host's copies
    // (CompletedOps), both on this GPU, which is all a fence at GPU scope
    // (end_fence_gpu_scope) reaches. The fence cost about a microsecond at the tail of
    // every op (the seventh cut, docs/latency.md). HIP keeps the release:
    // nothing has checked AMD's model here.
    if (fenced) {
      if (threadIdx.x == a.rank) StoreRelaxed(a.block_done + blockIdx.x, gen);
      return;
    }
#else
    (void)fenced;
#endif
    if (threadIdx.x == 0) StoreRelease(a.block_done + blockIdx.x, gen);
    return;
  }
  if (threadIdx.x == 0) {
    const bool per_block = a.block_done != nullptr;
    const bool last = (a.bench_skip & kSkipCompletionCount) != 0 ? blockIdx.x == 0
                                                                  : CountFinishedBlock(a.finished, gridDim.x);
    if (last) {
      if (a.trace != nullptr) {
        ClearNextTraceEntry(a.trace, gen);
        uint64_t* e = TraceEntry(a.trace, gen);
        e[2] = NowNs();
        StoreRelease(e, gen);  // after the words above (release)
      }
      if (a.status_mirror != nullptr) {
        *static_cast<volatile int32_t*>(a.status_mirror) = *static_cast<const volatile int32_t*>(a.error_word);
      }
      if (!per_block) StoreRelease(a.done, gen);
    }
    // After the last block's verdict and trace, so a reader that finds
    // every block's word finds those written too.
    if (per_block) StoreRelease(a.block_done + blockIdx.x, gen);
  }
}

// Under a programmatic dependent launch (the op launchers' default where the
// device and the build allow it), waits until the grids this one depends on
// completed and their writes are visible; without one it returns at once.
__device__ __forceinline__ void GridDependencyWait() {
#if !defined(COLLECTIVED_USE_HIP) && !defined(__HIP_PLATFORM_AMD__) && defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}

// Lets the grid after this one on the stream, where it was launched as a
// programmatic dependent launch, be placed once every block of this grid has
// called this (or exited); it still waits for this grid to complete
// (GridDependencyWait) before it reads anything. Without a dependent launch
// it does nothing.
__device__ __forceinline__ void GridDependentsLaunch() {
#if !defined(COLLECTIVED_USE_HIP) && !defined(__HIP_PLATFORM_AMD__) && defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

// Op gen's claim counter (DeviceOpArgs::claims): one of two, on lines of
// their own.
__device__ __forceinline__ uint32_t* ClaimCounter(const DeviceOpArgs& a, uint64_t gen) {
  return a.claims + (gen & 1) * (kClaimStrideWords * 2);
}

// One rank's op around its data movement `data`: start barrier, data, end
// barrier, and the completion, which every block reaches on every path.
// kPushesReduced: `data` writes what it reduced from peers' inputs into
// peers' outputs (EndBarrier).
template <bool kPushesReduced = false, typename Data>
__device__ inline void RunOp(const DeviceOpArgs& a, Data data) {
  // Before the first read or write of anything: the op before this one on
  // the stream may still be running.
  if ((a.bench_skip & kBenchPlainLaunch) == 0) GridDependencyWait();
  uint64_t gen = 0;
  bool synced = true;  // BeginOp and Barrier end in a bar.sync
  bool fenced = false;
  if (BeginOp(a, &gen) && Barrier(a, 0, gen)) {
    // The next op's blocks may now be placed beside this op's, to wait for
    // its end there instead of being launched after it (docs/latency.md,
    // the eleventh cut). Not before the start barrier: past it every block
    // of this op, on every rank, is resident, so blocks placed early cannot
    // keep a peer's block of this op from the slot its barrier needs; and a
    // block of the next op holds its slot only until this op, which needs
    // no more slots, ends.
    // (Triggering after the data instead, the bench bit 2048 of c79f2e6, was
    // 0.2-22 % slower at 256 MiB-1 GiB: docs/latency.md, "The eleventh cut".)
    if ((a.bench_skip & kBenchLateTrigger) == 0) GridDependentsLaunch();
    // Every rank's op gen - 1 is over (each rank's block 0 reached this
    // op's start barrier, past its wait for the grid before it): the counter
    // op gen - 1 claimed from is op gen + 1's, zeroed here. Rank 0's end
    // flag, stored by this thread after its fence, carries the store to every
    // rank before its op gen + 1 begins (each waits for that flag in op gen).
    // Every op zeroes it, of whatever kind, so op gen + 1 finds it zero.
    if (a.claims != nullptr && a.rank == 0 && blockIdx.x == 0 && threadIdx.x == 0) *ClaimCounter(a, gen + 1) = 0;
    if constexpr (std::is_invocable_v<Data, uint64_t>) {
      data(gen);  // a data phase that claims work needs the op's generation
    } else {
      data();
    }
    fenced = EndBarrier(a, gen, kPushesReduced) && !a.unsafe_skip_end_barrier;
    synced = !a.unsafe_skip_end_barrier;
  }
  FinishOp(a, gen, synced, fenced);
}

}  // namespace collectived::ring

#endif  // COLLECTIVED_RING_OP_RING_DEVICE_CUH_
