#include "client/src/gpu_communicator.h"

#include "collectived/client.h"

#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "client/src/daemon_poster.h"
#include "client/src/gpu_op.h"
#include "client/src/gpu_placement.h"
#include "client/src/gpu_rank_engine.h"
#include "client/src/registered_buffers.h"
#include "client/src/symmetric_heap.h"
#include "kernels/device/device_collectives.h"
#include "base/gpu/device_guard.h"
#include "base/gpu/gpu_check.h"
#include "ring/gpu_control_layout.h"
#include "ring/matcher.h"
#include "ring/op_codec.h"
#include "ring/wait.h"

namespace collectived {

namespace {

using gpu::DeviceGuard;

// Kernels load whole elements: a buffer not aligned to its element size would fault.
Status CheckElementAlignment(const void* send, const void* recv, size_t es) {
  if (reinterpret_cast<uintptr_t>(send) % es != 0 || reinterpret_cast<uintptr_t>(recv) % es != 0) {
    return Status::InvalidArgument("send and recv must be aligned to the element size (" + std::to_string(es) +
                                   " bytes)");
  }
  return Status::Ok();
}

// The descriptor every peer compares: kind, type, op, algorithm, count and,
// for zero-copy ops, where send and recv lie (GpuRankEngine::Symmetric's tags: peers
// address each other's buffers by them).
void Describe(device::DeviceRankArgs* a, CollectiveKind kind, DataType dtype, ReduceOp op, uint32_t algo,
              bool zero_copy, uint64_t send_tag, uint64_t recv_tag) {
  ring::PackDeviceDescriptor(kind, dtype, op, algo, a->count, zero_copy, send_tag, recv_tag, a->desc);
}

}  // namespace

GpuCommunicator::GpuCommunicator(std::unique_ptr<GpuRankEngine> engine, std::unique_ptr<DaemonPoster> daemon)
    : engine_(std::move(engine)), daemon_(std::move(daemon)) {}

GpuCommunicator::~GpuCommunicator() = default;  // the poster unregisters the segment, then the engine unmaps

void GpuCommunicator::ReleaseQueueLease() { engine_->setup.queue_lease.reset(); }

Status GpuCommunicator::ReadTrace(uint64_t index, std::vector<OpTrace>* per_rank) const {
  GpuRankEngine& m = *engine_;
  if (m.setup.daemon_executed) return Status::FailedPrecondition("daemon-executed GPU ops keep no op trace");
  if (!m.setup.op_trace) {
    return Status::FailedPrecondition("this rank keeps no GPU op trace (set CommunicatorOptions.gpu_op_trace)");
  }
  if (!RanksShareOneDevice(m.setup.ranks)) {
    // Each GPU's globaltimer runs on its own: times of different GPUs do not compare.
    return Status::FailedPrecondition("the op trace compares ranks of one GPU only");
  }
  DeviceGuard guard(m.setup.device);
  void* c = m.control->device_ptr();
  // A private stream: a copy on the legacy stream could wait behind this
  // process's kernels, which may be waiting for ranks this thread posts next.
  gpuStream_t stream = nullptr;
  COLLECTIVED_GPU_CHECK(gpuStreamCreateWithFlags(&stream, gpuStreamNonBlocking));
  std::vector<uint64_t> e(m.world() * ring::kTraceEntryWords);
  Status copied = [&]() -> Status {
    for (uint32_t r = 0; r < m.world(); ++r) {
      const uint64_t* at =
          ring::GpuControlLayout::Trace(c, r) + (index % ring::kTraceDepth) * ring::kTraceEntryWords;
      COLLECTIVED_GPU_CHECK(gpuMemcpyAsync(e.data() + r * ring::kTraceEntryWords, at,
                                           ring::kTraceEntryWords * sizeof(uint64_t), gpuMemcpyDeviceToHost, stream));
    }
    COLLECTIVED_GPU_CHECK(gpuStreamSynchronize(stream));
    return Status::Ok();
  }();
  gpuStreamDestroy(stream);
  COLLECTIVED_RETURN_IF_ERROR(copied);
  per_rank->assign(m.world(), OpTrace{});
  for (uint32_t r = 0; r < m.world(); ++r) {
    const uint64_t* w = e.data() + r * ring::kTraceEntryWords;
    OpTrace& t = (*per_rank)[r];
    t.posted = w[3] == index + 1;
    // Complete: index + 1 in word 0, and the completion time it was stored after
    // (one copy may see the new word 0 with an old word 2).
    t.valid = t.posted && w[0] == index + 1 && w[2] != 0;
    t.reads_done_ns = t.posted ? static_cast<int64_t>(w[1]) : 0;
    t.output_done_ns = t.valid ? static_cast<int64_t>(w[2]) : 0;  // the complete kernel runs after any copy-out
    t.completed_ns = t.output_done_ns;
  }
  return Status::Ok();
}

Status GpuCommunicator::Create(GpuCommSetup setup, const FetchFd& fetch, std::unique_ptr<GpuCommunicator>* out) {
  std::unique_ptr<GpuRankEngine> engine;
  COLLECTIVED_RETURN_IF_ERROR(GpuRankEngine::Map(std::move(setup), fetch, &engine));
  const GpuCommSetup& s = engine->setup;
  std::unique_ptr<DaemonPoster> daemon;
  if (s.daemon_executed) COLLECTIVED_RETURN_IF_ERROR(DaemonPoster::Create(*engine, &daemon));
  // One block count for every rank (barriers pair blocks by index), chosen
  // by the daemon so that ranks sharing a GPU are all resident at once.
  if (s.blocks == 0 || s.blocks > device::kMaxBlocks) return Status::Internal("daemon sent no valid block count");
  engine->blocks = s.blocks;
  engine->heap = std::make_shared<SymmetricHeap>(s.heap_bytes, ring::kHeapAlignment);
  out->reset(new GpuCommunicator(std::move(engine), std::move(daemon)));
  return Status::Ok();
}

Status GpuCommunicator::AllocBuffer(uint64_t bytes, GpuHeapBuffer* out) {
  if (bytes == 0) return Status::InvalidArgument("buffer of 0 bytes");
  uint64_t offset = 0;
  COLLECTIVED_RETURN_IF_ERROR(engine_->heap->Alloc(bytes, &offset));
  out->ptr = engine_->heap_base(engine_->setup.rank) + offset;
  out->bytes = bytes;
  out->keep = engine_->ranks[engine_->setup.rank];
  // Like cudaFree, a Free waits for the GPU work before it: the range goes
  // back only after this rank's eager ops enqueued so far ran (peers' parts
  // of those ops passed the end barrier with them). Freeing at once would let
  // the next AllocBuffer hand the range out while an op still writes it.
  // Waiting keeps the heap symmetric: every rank frees at the same point.
  const int64_t timeout_ms = static_cast<int64_t>(engine_->setup.seg.params().op_timeout_ns / 1000000) + 5000;
  out->release = [heap = engine_->heap, offset, order = engine_->order, device = engine_->setup.device, timeout_ms] {
    COLLECTIVED_RETURN_IF_ERROR(WaitForEnqueued(order, device, timeout_ms,
                                                "a GPU op enqueued before this heap buffer's Free did not finish; "
                                                "the range stays allocated"));
    return heap->Free(offset);
  };
  return Status::Ok();
}

Status GpuCommunicator::RegisterBuffer(void* ptr, uint64_t bytes, GpuHeapBuffer* out) {
  GpuRankEngine& m = *engine_;
  if (!m.setup.register_buffer) return Status::Unimplemented("this daemon does not take registered buffers");
  if (bytes == 0) return Status::InvalidArgument("buffer of 0 bytes");
  DeviceGuard guard(m.setup.device);
  COLLECTIVED_RETURN_IF_ERROR(m.CheckPointer(ptr, "buffer"));
  if (m.Overlaps(ptr, bytes)) {
    return Status::AlreadyExists("buffer overlaps this communicator's heap or a buffer already registered");
  }
  return RegisterCallerBuffer(m.setup, m.fetch, m.registrations, m.order, ptr, bytes, out);
}

Status GpuCommunicator::AllReduce(const void* send, void* recv, uint64_t count, DataType dtype, ReduceOp op,
                                  void* stream_ptr, std::shared_ptr<GpuOpState>* out) {
  GpuRankEngine& m = *engine_;
  if (count == 0) return Status::InvalidArgument("count must be positive");
  if (!IsValidReduction(dtype, op)) {
    return Status::InvalidArgument(std::string("reduction ") + ReduceOpName(op) + " is not allowed on " +
                                   DataTypeName(dtype));
  }
  const uint64_t bytes = count * DataTypeSize(dtype);
  if (bytes / DataTypeSize(dtype) != count) return Status::InvalidArgument("count overflows");
  COLLECTIVED_RETURN_IF_ERROR(CheckElementAlignment(send, recv, DataTypeSize(dtype)));
  DeviceGuard guard(m.setup.device);
  auto stream = static_cast<gpuStream_t>(stream_ptr);
  if (m.setup.daemon_executed) {
    return daemon_->Post(CollectiveKind::kAllReduce, send, recv, count, dtype, op, stream, out);
  }
  uint64_t send_tag = 0, recv_tag = 0;
  const void* send_at[ring::kMaxDeviceRanks];
  const void* recv_at[ring::kMaxDeviceRanks];
  const bool zero_copy = m.Symmetric(send, bytes, &send_tag, send_at) && m.Symmetric(recv, bytes, &recv_tag, recv_at);
  device::DeviceRankArgs a = m.BaseArgs(count);
  a.claim_work = a.claims != nullptr && ring::TwoShotClaimsPay(bytes, m.blocks);
  const bool small = ring::ChooseAlgorithm(CollectiveKind::kAllReduce, bytes, m.setup.seg.params().one_shot_max_bytes) ==
                     ring::Algorithm::kOneShot;
  device::DeviceAlgorithm algo = small ? device::DeviceAlgorithm::kOneShot : device::DeviceAlgorithm::kTwoShotPush;
  std::function<Status()> copy_in, copy_out;
  if (zero_copy) {
    for (uint32_t k = 0; k < m.world(); ++k) {
      a.inputs[k] = send_at[k];
      a.outputs[k] = const_cast<void*>(recv_at[k]);
    }
    if (send == recv) algo = device::DeviceAlgorithm::kTwoShotPush;  // the launcher's in-place rule, said up front
  } else {
    // Staged through the fixed input slots.
    COLLECTIVED_RETURN_IF_ERROR(m.CheckStaged(send, recv, bytes, "message", "send and recv"));
    for (uint32_t k = 0; k < m.world(); ++k) a.inputs[k] = m.staging(k, bytes);
    uint8_t* mine = m.staging(m.setup.rank, bytes);
    copy_in = CopyLater(mine, send, bytes, stream);
    if (algo == device::DeviceAlgorithm::kOneShot) {
      a.own_output_only = true;  // peers' recv buffers are not mapped here
      a.outputs[m.setup.rank] = recv;
    } else {
      // Two-shot in place over the slots (only rank r touches chunk r of any
      // slot), then this rank's slot to recv. The next op's copy-in into the
      // slot runs after this kernel's end barrier: no peer reads it then.
      for (uint32_t k = 0; k < m.world(); ++k) a.outputs[k] = m.staging(k, bytes);
      copy_out = CopyLater(recv, mine, bytes, stream);
    }
  }
  Describe(&a, CollectiveKind::kAllReduce, dtype, op, static_cast<uint32_t>(algo), zero_copy, send_tag, recv_tag);
  // Checked before anything is enqueued: a refused op must not take an index.
  COLLECTIVED_RETURN_IF_ERROR(device::ValidateAllReduce(dtype, op, algo, a, m.blocks));
  auto kernel = [&](const GpuRankEngine::KernelCompletion& c) {
    c.ApplyTo(&a);
    return device::LaunchAllReduce(dtype, op, algo, a, m.blocks, stream);
  };
  return m.Enqueue(stream, {CollectiveKind::kAllReduce, dtype, op, count}, copy_in, kernel, copy_out, out);
}

Status GpuCommunicator::AllGather(const void* send, void* recv, uint64_t count, DataType dtype, void* stream_ptr,
                                  std::shared_ptr<GpuOpState>* out) {
  GpuRankEngine& m = *engine_;
  const size_t es = DataTypeSize(dtype);
  if (es == 0) return Status::InvalidArgument("unknown data type");
  if (count == 0) return Status::InvalidArgument("count must be positive");
  const uint64_t bytes = count * es;
  if (bytes / es != count) return Status::InvalidArgument("count overflows");
  COLLECTIVED_RETURN_IF_ERROR(CheckElementAlignment(send, recv, es));
  const uint64_t out_bytes = bytes * m.world();
  DeviceGuard guard(m.setup.device);
  auto stream = static_cast<gpuStream_t>(stream_ptr);
  if (m.setup.daemon_executed) {
    return daemon_->Post(CollectiveKind::kAllGather, send, recv, count, dtype, ReduceOp::kUnspecified, stream, out);
  }
  uint64_t recv_tag = 0;
  const void* recv_at[ring::kMaxDeviceRanks];
  const bool zero_copy = m.Symmetric(recv, out_bytes, &recv_tag, recv_at);
  device::DeviceRankArgs a = m.BaseArgs(count);
  device::GatherAlgorithm algo = device::GatherAlgorithm::kPush;
  std::function<Status()> copy_in;
  if (zero_copy) {
    uint64_t unused_tag = 0;
    const void* unused_at[ring::kMaxDeviceRanks];
    if (!m.Symmetric(send, bytes, &unused_tag, unused_at)) COLLECTIVED_RETURN_IF_ERROR(m.CheckPointer(send, "send"));
    for (uint32_t k = 0; k < m.world(); ++k) {
      a.outputs[k] = const_cast<void*>(recv_at[k]);
      // Push reads only this rank's input; a peer's is named as its own
      // output chunk (never read), which keeps the launcher's overlap checks exact.
      a.inputs[k] = k == m.setup.rank ? send : static_cast<const uint8_t*>(recv_at[k]) + k * bytes;
    }
  } else {
    COLLECTIVED_RETURN_IF_ERROR(m.CheckStaged(send, recv, bytes, "input", "recv"));
    algo = device::GatherAlgorithm::kPull;
    a.own_output_only = true;
    for (uint32_t k = 0; k < m.world(); ++k) a.inputs[k] = m.staging(k, bytes);
    a.outputs[m.setup.rank] = recv;
    uint8_t* mine = m.staging(m.setup.rank, bytes);
    copy_in = CopyLater(mine, send, bytes, stream);
  }
  // Peers do not address this rank's input: only recv's place is compared.
  Describe(&a, CollectiveKind::kAllGather, dtype, ReduceOp::kUnspecified, static_cast<uint32_t>(algo), zero_copy, 0,
           recv_tag);
  COLLECTIVED_RETURN_IF_ERROR(device::ValidateAllGather(dtype, a, m.blocks, algo));
  auto kernel = [&](const GpuRankEngine::KernelCompletion& c) {
    c.ApplyTo(&a);
    return device::LaunchAllGather(dtype, a, m.blocks, stream, algo);
  };
  return m.Enqueue(stream, {CollectiveKind::kAllGather, dtype, ReduceOp::kUnspecified, count}, copy_in, kernel,
                   nullptr, out);
}

bool GpuCommunicator::ZeroCopy(const void* p, uint64_t bytes) const {
  uint64_t tag = 0;
  const void* at[ring::kMaxDeviceRanks];
  return engine_->Symmetric(p, bytes, &tag, at);
}

Status GpuCommunicator::LastOpError() const {
  std::shared_ptr<GpuOpState> last;
  {
    std::lock_guard<std::mutex> lock(engine_->order->mu);
    last = engine_->order->last;
  }
  if (last && !last->captured && last->status_slot != nullptr) {
    // Written once; until then it reads kSlotUnset (GpuOpState::Code).
    const int32_t code = last->Code();
    if (code != kSlotUnset && code != ring::kDeviceOk) return VerdictStatus(code, last->seg, last->timeout_ns);
  }
  const int32_t mine = *reinterpret_cast<volatile const int32_t*>(engine_->rank_error_host);
  if (mine == ring::kDeviceOk) return Status::Ok();
  return VerdictStatus(mine, engine_->setup.seg, engine_->setup.seg.params().op_timeout_ns);
}

Status GpuCommunicator::RaiseAbort() {
  DeviceGuard guard(engine_->setup.device);
  // A private non-blocking stream: the legacy stream would queue behind the
  // very kernels this is meant to stop.
  gpuStream_t stream = nullptr;
  COLLECTIVED_GPU_CHECK(gpuStreamCreateWithFlags(&stream, gpuStreamNonBlocking));
  static const uint64_t kOne = 1;
  const gpuError_t copied = gpuMemcpyAsync(engine_->abort_word, &kOne, sizeof(kOne), gpuMemcpyHostToDevice, stream);
  const gpuError_t synced = copied == gpuSuccess ? gpuStreamSynchronize(stream) : copied;
  gpuStreamDestroy(stream);
  if (synced != gpuSuccess) return gpu::GpuErrorStatus(synced, "setting the abort word", __FILE__, __LINE__);
  return Status::Ok();
}

Status GpuCommunicator::Quiesce(int64_t timeout_ms) {
  std::shared_ptr<GpuOpState> last;
  {
    std::lock_guard<std::mutex> lock(engine_->order->mu);
    engine_->order->closed = true;
    last.swap(engine_->order->last);
  }
  const int64_t deadline_ns = ring::NowNs() + timeout_ms * 1'000'000;
  DeviceGuard guard(engine_->setup.device);
  if (last) COLLECTIVED_RETURN_IF_ERROR(WaitRan(*last, timeout_ms, "this rank's GPU ops did not finish before destroy"));
  return WaitStartedOpsDone(deadline_ns);
}

// Graph-replayed ops are in no handle (a graph outlives them): a replay
// still running when Destroy unmaps the windows would fault. This rank's
// device words know it: every op that started took an index (the counter)
// and publishes its completion when it completes, failed or not (done, or
// a word per block: ring::CompletedOps counts both). A replay
// launched but not started yet is not seen; launching a graph of a destroyed
// communicator is the caller's error (client.h, Destroy).
Status GpuCommunicator::WaitStartedOpsDone(int64_t deadline_ns) {
  if (engine_->setup.daemon_executed) return Status::Ok();  // the daemon's `completed` covers those (Destroy)
  if (engine_->post_without_complete.load(std::memory_order_acquire)) return Status::Ok();  // done stays behind
  void* c = engine_->control->device_ptr();
  const uint32_t rank = engine_->setup.rank, blocks = engine_->blocks;
  const uint64_t* counter = ring::GpuControlLayout::Counter(c, rank);
  const uint64_t* done = ring::GpuControlLayout::Done(c, rank);
  const uint64_t* block_done = ring::GpuControlLayout::BlockDone(c, rank);
  // A private stream: the legacy one would queue behind the kernels waited for.
  gpuStream_t stream = nullptr;
  COLLECTIVED_GPU_CHECK(gpuStreamCreateWithFlags(&stream, gpuStreamNonBlocking));
  Status result = Status::Ok();
  std::vector<uint64_t> words(2 + blocks);  // counter, done, the block words
  for (;;) {
    gpuError_t e = gpuMemcpyAsync(&words[0], counter, sizeof(uint64_t), gpuMemcpyDeviceToHost, stream);
    if (e == gpuSuccess) e = gpuMemcpyAsync(&words[1], done, sizeof(uint64_t), gpuMemcpyDeviceToHost, stream);
    if (e == gpuSuccess) e = gpuMemcpyAsync(&words[2], block_done, blocks * sizeof(uint64_t), gpuMemcpyDeviceToHost, stream);
    if (e == gpuSuccess) e = gpuStreamSynchronize(stream);
    if (e != gpuSuccess) {
      result = gpu::GpuErrorStatus(e, "reading this rank's op counter", __FILE__, __LINE__);
      break;
    }
    const uint64_t completed = ring::CompletedOps(words[1], &words[2], blocks);
    if (completed >= words[0]) break;
    if (ring::NowNs() >= deadline_ns) {
      result = Status::DeadlineExceeded("this rank's graph-replayed GPU ops did not finish before destroy (" +
                                        std::to_string(words[0] - completed) + " running)");
      break;
    }
    std::this_thread::sleep_for(std::chrono::microseconds(100));
  }
  gpuStreamDestroy(stream);
  return result;
}

}  // namespace collectived
