#include "daemon/gpu_executor.h"

#include <pthread.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <vector>

#include "daemon/copy_engine_plan.h"
#include "kernels/host/reduce.h"
#include "ring/matcher.h"
#include "ring/op_codec.h"
#include "ring/op_ring.h"
#include "ring/wait.h"

#ifdef COLLECTIVED_HAVE_GPU
#include "kernels/device/device_collectives.h"
#include "kernels/device/device_reduce.h"
#include "base/gpu/gpu_check.h"
#include "ring/gpu_control_layout.h"
#include "ipc/cumem_window.h"
#endif

namespace collectived::daemon {

double GpuExecutor::handoff_us_mean() const {
  const uint64_t n = ops_.load();
  return n == 0 ? 0.0 : static_cast<double>(handoff_ns_.load()) / 1000.0 / static_cast<double>(n);
}

GpuExecutor::~GpuExecutor() { Stop(); }

void GpuExecutor::NoteCapturedPlan() {
  if (!captured_plans_.exchange(true)) seg_.WakeAll();  // from sleeping to polling
}

bool GpuExecutor::Aborted() const {
  if (seg_.aborted()) return true;
  uint64_t abort = 0;  // a kernel that gave up set the device abort word
  return memory_->ReadAbort(&abort).ok() && abort != 0;
}

void GpuExecutor::Stop() {
  stop_.store(true);
  seg_.WakeAll();  // the thread may sleep waiting for an announcement
  if (thread_.joinable()) thread_.join();
}

void GpuExecutor::RemoveCallersBuffer(uint64_t buffer_id) {
  std::lock_guard<std::mutex> lock(callers_mu_);
  callers_buffers_.erase(buffer_id);
}

#ifdef COLLECTIVED_HAVE_GPU

static_assert(device::kMaxReduceOwners >= ring::kMaxDeviceRanks, "the reduce-slots kernel serves every rank");

Status GpuExecutor::Start(ring::CommSegment seg, std::shared_ptr<GpuCommMemory> memory, const Paths& paths,
                          host::NodeExchange* exchange, std::unique_ptr<GpuExecutor>* out) {
  if (!memory->single_device()) {
    // The daemon maps each rank window for its own device only; one fused
    // launch reaching several GPUs needs peer access set up first (issue 5).
    return Status::Unimplemented("daemon-executed GPU communicators serve ranks of one GPU for now; use "
                                 "client-executed mode across GPUs");
  }
  auto ex = std::unique_ptr<GpuExecutor>(new GpuExecutor());
  ex->paths_ = paths;
  ex->exchange_ = exchange;
  ex->seg_ = seg;
  ex->memory_ = std::move(memory);
  COLLECTIVED_GPU_CHECK(gpuSetDevice(ex->memory_->window_ordinal(0)));
  COLLECTIVED_RETURN_IF_ERROR(device::PreloadKernels());
  gpuStream_t stream;
  COLLECTIVED_GPU_CHECK(gpuStreamCreateWithFlags(&stream, gpuStreamNonBlocking));
  ex->stream_ = stream;
  // The publish kernel writes each rank's `completed` word in the segment.
  const uint64_t page = static_cast<uint64_t>(sysconf(_SC_PAGESIZE));
  void* base = &seg.header();
  const gpuError_t reg = gpuHostRegister(base, ring::AlignUp(seg.control_bytes(), page),
                                         gpuHostRegisterMapped | gpuHostRegisterPortable);
  if (reg != gpuSuccess) {
    (void)gpuStreamDestroy(stream);
    return gpu::GpuErrorStatus(reg, "gpuHostRegister", __FILE__, __LINE__);
  }
  ex->registered_ = base;
  ex->thread_ = std::thread([e = ex.get()] { e->Run(); });
  *out = std::move(ex);
  return Status::Ok();
}

void GpuExecutor::Run() {
  pthread_setname_np(pthread_self(), "cd-gpu-executor");
  (void)gpuSetDevice(memory_->window_ordinal(0));
  for (uint64_t index = 0; !stop_.load(); ++index) {
    Status s = RunOp(index);
    if (s.code() == StatusCode::kCancelled) {  // stopping, or the communicator aborted
      if (!stop_.load() && !seg_.aborted()) {
        // A kernel gave up (deadline, or the device abort word): end the
        // clients' host-side waits too, or Destroy would wait out its timeout.
        seg_.Abort(StatusCode::kAborted, "a GPU kernel of this communicator gave up (deadline or abort)");
      }
      if (!stop_.load() && exchange_ != nullptr) {
        // Aborted from the host (a node lost): the clients' wait kernels
        // watch the device abort word, not the segment's.
        Status set = memory_->SetAbort();
        if (!set.ok()) spdlog::error("could not set the abort word: {}", set.ToString());
      }
      break;
    }
    if (!s.ok()) {
      spdlog::error("communicator {}: daemon-executed GPU op {} failed: {}", seg_.params().comm_id, index,
                    s.ToString());
      // Copies of the failed op may still run: let them land before the
      // clients hear of the abort and reuse their buffers.
      for (void* l : lanes_) (void)gpuStreamSynchronize(static_cast<gpuStream_t>(l));
      (void)gpuStreamSynchronize(static_cast<gpuStream_t>(stream_));
      seg_.Abort(s.code(), ("op " + std::to_string(index) + ": " + s.message()).c_str());
      Status set = memory_->SetAbort();  // after the reason: the clients' kernels stop spinning
      if (!set.ok()) spdlog::error("could not set the abort word: {}", set.ToString());
      break;
    }
  }
  (void)gpuStreamSynchronize(static_cast<gpuStream_t>(stream_));
  ReleaseCopyEngineAllReduce();
  if (pinned_ != nullptr) (void)gpuFreeHost(pinned_);
  for (void* e : stage_events_) (void)gpuEventDestroy(static_cast<gpuEvent_t>(e));
  (void)gpuStreamDestroy(static_cast<gpuStream_t>(stream_));
  (void)gpuHostUnregister(registered_);
}

Status GpuExecutor::RunOp(uint64_t index) {
  const uint32_t world = seg_.world_size();
  // Every rank's descriptor for this index, published by its ring-post kernel.
  for (uint32_t r = 0; r < world; ++r) {
    const ring::RingSlot& slot = seg_.slot(r, index);
    for (uint32_t polls = 0; slot.ready_seq.load(std::memory_order_acquire) != index + 1; ++polls) {
      if (stop_.load() || seg_.aborted()) return Status(StatusCode::kCancelled, "stopping");
      if (polls % 4096 == 4095 && Aborted()) return Status(StatusCode::kCancelled, "aborted");
      if (polls <= 1000) continue;
      if (!captured_plans_.load() && !ring::DevicePostAnnounced(seg_, r, index) &&
          ring::NowNs() - last_op_ns_ > kHotNs) {
        // Idle, nothing on its way, and no graph can post unannounced: sleep
        // until the client announces an op (or an abort or Stop wakes).
        ring::SleepUntilAnnounced(seg_, r, index, kIdleSliceNs);
        polls = 0;
        continue;
      }
      std::this_thread::sleep_for(std::chrono::microseconds(polls > 100000 ? 200 : 5));
    }
  }
  const int64_t ready_ns = ring::NowNs();
  last_op_ns_ = ready_ns;
  std::vector<ring::OpDescriptor> descs(world);
  std::vector<const ring::OpDescriptor*> ptrs(world);
  for (uint32_t r = 0; r < world; ++r) {
    descs[r] = seg_.slot(r, index).desc;
    ptrs[r] = &descs[r];
  }
  COLLECTIVED_RETURN_IF_ERROR(ring::MatchDescriptors(index, ptrs.data(), world));
  const ring::OpDescriptor& d = descs[0];
  const size_t es = DataTypeSize(d.dtype);
  if (es == 0 || d.count == 0) return Status::InvalidArgument("bad descriptor");
  // The ring is client-written memory: bound everything before multiplying or
  // addressing, so no descriptor can make the daemon's kernel fault.
  const bool gather = d.kind == CollectiveKind::kAllGather;
  // An all-gather's output holds `world` inputs; an all-reduce's holds one.
  uint64_t largest = std::max(memory_->slot_bytes(), memory_->heap_bytes());
  {
    std::lock_guard<std::mutex> lock(callers_mu_);
    for (const auto& [id, b] : callers_buffers_) largest = std::max(largest, b.bytes);
  }
  if (d.count > largest / es / (gather ? (exchange_ != nullptr ? exchange_->global_world() : world) : 1)) {
    return Status::InvalidArgument("count " + std::to_string(d.count) + " larger than any slot, heap or registered buffer");
  }
  for (uint32_t r = 0; r < world; ++r) {
    if (descs[r].send_offset % es != 0 || descs[r].recv_offset % es != 0) {
      return Status::InvalidArgument("rank " + std::to_string(r) + "'s buffer is not aligned to its element size");
    }
  }
  // Across nodes an all-gather's output holds every node's ranks.
  const uint32_t out_world = exchange_ != nullptr ? exchange_->global_world() : world;
  const uint64_t in_bytes = d.count * es, out_bytes = gather ? in_bytes * out_world : in_bytes;
  device::DeviceRankArgs a;
  a.world = world;
  a.count = d.count;
  for (uint32_t r = 0; r < world; ++r) {
    uint8_t* window = static_cast<uint8_t*>(memory_->window_ptr(1 + r));
    auto place = [&](uint64_t where, uint64_t offset, uint64_t bytes, void** out) -> Status {
      ring::BufferPlace kind{};
      uint64_t id = 0;
      const bool known = ring::DecodeBufferPlace(where, &kind, &id);
      if (known && kind == ring::BufferPlace::kSlot && offset == 0 && bytes <= memory_->slot_bytes()) {
        *out = window;
      } else if (known && kind == ring::BufferPlace::kHeap && offset <= memory_->heap_bytes() &&
                 bytes <= memory_->heap_bytes() - offset) {
        *out = window + memory_->slot_bytes() + offset;
      } else if (known && kind == ring::BufferPlace::kRegistered) {
        // Stays mapped through the op: every rank deregisters only after its ops on it finished.
        std::lock_guard<std::mutex> lock(callers_mu_);
        auto it = callers_buffers_.find(id);
        if (it == callers_buffers_.end() || offset > it->second.bytes || bytes > it->second.bytes - offset) {
          return Status::InvalidArgument("rank " + std::to_string(r) + "'s buffer lies outside registered buffer " +
                                         std::to_string(id));
        }
        *out = it->second.at[r] + offset;
      } else {
        return Status::InvalidArgument("rank " + std::to_string(r) + "'s buffer lies outside its slot or heap");
      }
      return Status::Ok();
    };
    void* input = nullptr;
    COLLECTIVED_RETURN_IF_ERROR(place(descs[r].send_buffer_id, descs[r].send_offset, in_bytes, &input));
    a.inputs[r] = input;
    COLLECTIVED_RETURN_IF_ERROR(place(descs[r].recv_buffer_id, descs[r].recv_offset, out_bytes, &a.outputs[r]));
  }
  auto stream = static_cast<gpuStream_t>(stream_);
  // A peer that gave up (deadline, abort) must not have its buffers written late.
  if (Aborted()) return Status(StatusCode::kCancelled, "aborted");
  if (exchange_ != nullptr) {
    COLLECTIVED_RETURN_IF_ERROR(RunAcrossNodes(index, d, a.inputs, a.outputs));
  } else if (gather && paths_.copy_engine_gather) {
    COLLECTIVED_RETURN_IF_ERROR(device::ValidateFusedAllGather(d.dtype, a));
    // Peer copies: the copy engines move the data, no SM runs a kernel for it.
    for (uint32_t k = 0; k < world; ++k) {
      for (uint32_t j = 0; j < world; ++j) {
        uint8_t* dst = static_cast<uint8_t*>(a.outputs[j]) + k * in_bytes;
        if (dst == a.inputs[k]) continue;  // in place: already there
        COLLECTIVED_GPU_CHECK(gpuMemcpyAsync(dst, a.inputs[k], in_bytes, gpuMemcpyDeviceToDevice, stream));
      }
    }
  } else if (gather) {
    COLLECTIVED_RETURN_IF_ERROR(device::LaunchFusedAllGather(d.dtype, a, device::kMaxBlocks, stream));
  } else if (paths_.copy_engine_reduce) {
    // Checked before the first copy: a refused op leaves nothing queued.
    COLLECTIVED_RETURN_IF_ERROR(device::ValidateFusedAllReduce(d.dtype, d.reduce_op, a));
    COLLECTIVED_RETURN_IF_ERROR(CopyEngineAllReduce(d.dtype, d.reduce_op, a.inputs, a.outputs, world, d.count));
  } else {
    COLLECTIVED_RETURN_IF_ERROR(device::LaunchFusedAllReduce(d.dtype, d.reduce_op, a, device::kMaxBlocks, stream));
  }
  ring::PublishArgs p;
  p.n = world;
  p.value = index + 1;
  for (uint32_t r = 0; r < world; ++r) {
    void* dev = nullptr;
    COLLECTIVED_GPU_CHECK(gpuHostGetDevicePointer(&dev, &seg_.control(r).completed.value, 0));
    p.words[r] = static_cast<uint64_t*>(dev);
  }
  COLLECTIVED_RETURN_IF_ERROR(ring::LaunchPublish(p, stream));
  handoff_ns_.fetch_add(static_cast<uint64_t>(ring::NowNs() - ready_ns));
  ops_.fetch_add(1);
  return Status::Ok();
}

Status GpuExecutor::RunAcrossNodes(uint64_t index, const ring::OpDescriptor& d, const void* const* inputs,
                                   void* const* outputs) {
  auto stream = static_cast<gpuStream_t>(stream_);
  const uint32_t world = seg_.world_size();
  const uint32_t global = exchange_->global_world();
  const uint64_t bytes = d.count * DataTypeSize(d.dtype);
  const bool gather = d.kind == CollectiveKind::kAllGather;
  const uint64_t need = gather ? bytes * global : bytes;
  if (need > pinned_bytes_) {
    // Nothing of an earlier op reads it any more: each op ends by waiting
    // for its copies back (below) before the next op's copies out begin.
    COLLECTIVED_GPU_CHECK(gpuStreamSynchronize(stream));
    if (pinned_ != nullptr) COLLECTIVED_GPU_CHECK(gpuFreeHost(pinned_));
    pinned_ = nullptr;
    pinned_bytes_ = 0;
    COLLECTIVED_GPU_CHECK(gpuHostAlloc(&pinned_, need, gpuHostAllocPortable));
    pinned_bytes_ = need;
  }
  uint8_t* host = static_cast<uint8_t*>(pinned_);
  // Out: this node's part onto pinned host memory, on the copy engines.
  if (gather) {
    for (uint32_t r = 0; r < world; ++r) {
      COLLECTIVED_GPU_CHECK(gpuMemcpyAsync(host + uint64_t{exchange_->StagingSlot(exchange_->global_rank(r))} * bytes,
                                           inputs[r], bytes, gpuMemcpyDeviceToHost, stream));
    }
  } else {
    const void* part = inputs[0];
    if (world > 1) {  // the node's ranks reduced first (kAvg summed: divided once every node's part is in)
      device::DeviceRankArgs a;
      a.world = world;
      a.count = d.count;
      for (uint32_t r = 0; r < world; ++r) {
        a.inputs[r] = inputs[r];
        a.outputs[r] = outputs[r];
      }
      const ReduceOp op = d.reduce_op == ReduceOp::kAvg ? ReduceOp::kSum : d.reduce_op;
      COLLECTIVED_RETURN_IF_ERROR(device::LaunchFusedAllReduce(d.dtype, op, a, device::kMaxBlocks, stream));
      part = outputs[0];
    }
    return PipelineAllReduce(index, d, static_cast<const uint8_t*>(part), host, outputs);
  }
  COLLECTIVED_GPU_CHECK(gpuStreamSynchronize(stream));
  // Across: the network, with the op's deadline; an abort (a node lost) or Stop ends it.
  const ring::WaitContext ctx{&seg_, &stop_, ring::NowNs() + static_cast<int64_t>(seg_.params().op_timeout_ns)};
  COLLECTIVED_RETURN_IF_ERROR(exchange_->Exchange(index, d, nullptr, host, true, ctx));
  // Back: into every rank's output, before the publish kernel (same stream).
  for (uint32_t r = 0; r < world; ++r) {
    for (uint32_t g = 0; g < global; ++g) {
      COLLECTIVED_GPU_CHECK(gpuMemcpyAsync(static_cast<uint8_t*>(outputs[r]) + uint64_t{g} * bytes,
                                           host + uint64_t{exchange_->StagingSlot(g)} * bytes, bytes,
                                           gpuMemcpyHostToDevice, stream));
    }
  }
  return Status::Ok();
}

// The node's part in chunks: every chunk's copy out is queued at once, each
// followed by an event; chunk c's exchange starts when its copy landed and
// runs while later chunks still copy out and earlier ones copy back into the
// ranks' outputs (the copy engines and the network at once). Chunk c is
// exchanged as op index * kMaxStageChunks + c: no two chunks of neighbouring
// ops share a tag.
Status GpuExecutor::PipelineAllReduce(uint64_t index, const ring::OpDescriptor& d, const uint8_t* part, uint8_t* host,
                                      void* const* outputs) {
  auto stream = static_cast<gpuStream_t>(stream_);
  const uint64_t es = DataTypeSize(d.dtype);
  // A chunk is one exchange, whose parts are at most max_part_bytes (its
  // scratch is that large).
  const uint64_t most = std::max<uint64_t>(1, exchange_->max_part_bytes() / es);
  const uint64_t per = std::min<uint64_t>(
      most, std::max<uint64_t>({1, kStageChunkBytes / es, (d.count + kMaxStageChunks - 1) / kMaxStageChunks}));
  if ((d.count + per - 1) / per > kMaxStageChunks) {
    return Status::InvalidArgument("a GPU all-reduce of " + std::to_string(d.count * es) + " bytes across nodes needs "
                                   "more than " + std::to_string(kMaxStageChunks) + " exchanges of max_message_bytes " +
                                   std::to_string(exchange_->max_part_bytes()) + " (raise --max-message-bytes)");
  }
  const uint32_t chunks = static_cast<uint32_t>((d.count + per - 1) / per);
  while (stage_events_.size() < chunks) {
    gpuEvent_t e;
    COLLECTIVED_GPU_CHECK(gpuEventCreateWithFlags(&e, gpuEventDisableTiming));
    stage_events_.push_back(e);
  }
  for (uint32_t c = 0; c < chunks; ++c) {
    const uint64_t b = c * per, n = std::min(d.count, b + per) - b;
    COLLECTIVED_GPU_CHECK(gpuMemcpyAsync(host + b * es, part + b * es, n * es, gpuMemcpyDeviceToHost, stream));
    COLLECTIVED_GPU_CHECK(gpuEventRecord(static_cast<gpuEvent_t>(stage_events_[c]), stream));
  }
  // The network, with the op's deadline; an abort (a node lost) or Stop ends it.
  const ring::WaitContext ctx{&seg_, &stop_, ring::NowNs() + static_cast<int64_t>(seg_.params().op_timeout_ns)};
  const uint32_t global = exchange_->global_world();
  for (uint32_t c = 0; c < chunks; ++c) {
    const uint64_t b = c * per, n = std::min(d.count, b + per) - b;
    COLLECTIVED_GPU_CHECK(gpuEventSynchronize(static_cast<gpuEvent_t>(stage_events_[c])));
    ring::OpDescriptor sub = d;
    sub.count = n;
    uint8_t* at = host + b * es;
    COLLECTIVED_RETURN_IF_ERROR(exchange_->Exchange(index * kMaxStageChunks + c, sub, at, at, true, ctx));
    if (d.reduce_op == ReduceOp::kAvg) host::DivideElements(d.dtype, at, n, global);
    for (uint32_t r = 0; r < seg_.world_size(); ++r) {  // before the publish kernel (same stream)
      COLLECTIVED_GPU_CHECK(gpuMemcpyAsync(static_cast<uint8_t*>(outputs[r]) + b * es, at, n * es,
                                           gpuMemcpyHostToDevice, stream));
    }
  }
  return Status::Ok();
}

// In pieces that fit the scratch area (CopyEnginePlan), each piece:
// (1) the copy engines copy part r of every rank's piece into owner r's
//     `world` slots of the scratch (on the lanes);
// (2) one SM launch reduces each owner's slots into part r of its output
//     (on the daemon's stream);
// (3) the copy engines copy each owner's reduced part into every other
//     output (on the lanes).
// Events fork the lanes from the daemon's stream and join them back, so all
// of (1) precedes (2), (2) precedes (3), and (3) precedes the next piece and
// the publish kernel. An op in place is safe: a piece's inputs are in the
// scratch before any output of it is written, and later pieces touch other
// elements.
Status GpuExecutor::CopyEngineAllReduce(DataType dtype, ReduceOp op, const void* const* inputs,
                                        void* const* outputs, uint32_t world, uint64_t count) {
  const uint64_t es = DataTypeSize(dtype);
  auto stream = static_cast<gpuStream_t>(stream_);
  if (scratch_ == nullptr) {
    Status prepared = PrepareCopyEngineAllReduce(world);
    if (!prepared.ok()) {
      ReleaseCopyEngineAllReduce();  // whatever was made; the next op starts over
      return prepared;
    }
  }
  const uint32_t nlanes = static_cast<uint32_t>(lanes_.size());
  auto lane = [&](uint32_t r) { return static_cast<gpuStream_t>(lanes_[r % nlanes]); };
  // The lanes start after what the daemon's stream holds, and it waits for them.
  auto fork = [&]() -> Status {
    COLLECTIVED_GPU_CHECK(gpuEventRecord(static_cast<gpuEvent_t>(fork_), stream));
    for (void* l : lanes_) {
      COLLECTIVED_GPU_CHECK(gpuStreamWaitEvent(static_cast<gpuStream_t>(l), static_cast<gpuEvent_t>(fork_), 0));
    }
    return Status::Ok();
  };
  auto join = [&]() -> Status {
    for (uint32_t i = 0; i < nlanes; ++i) {
      auto done = static_cast<gpuEvent_t>(lane_done_[i]);
      COLLECTIVED_GPU_CHECK(gpuEventRecord(done, static_cast<gpuStream_t>(lanes_[i])));
      COLLECTIVED_GPU_CHECK(gpuStreamWaitEvent(stream, done, 0));
    }
    return Status::Ok();
  };
  CopyEnginePlan plan;
  COLLECTIVED_RETURN_IF_ERROR(CopyEnginePlan::Make(world, count, es, scratch_size_, &plan));
  uint8_t* scratch = static_cast<uint8_t*>(scratch_);
  for (uint64_t i = 0; i < plan.pieces(); ++i) {
    COLLECTIVED_RETURN_IF_ERROR(fork());
    device::ReduceSlotsArgs ra;
    ra.scratch = scratch;
    ra.world = world;
    ra.chunk = plan.chunk(i);
    for (uint32_t r = 0; r < world; ++r) {
      const CopyEnginePlan::Part p = plan.part(i, r);
      ra.counts[r] = p.count;
      ra.outputs[r] = static_cast<uint8_t*>(outputs[r]) + p.begin * es;
      for (uint32_t k = 0; k < world && p.count > 0; ++k) {
        COLLECTIVED_GPU_CHECK(gpuMemcpyAsync(scratch + plan.slot(i, r, k) * es,
                                             static_cast<const uint8_t*>(inputs[k]) + p.begin * es, p.count * es,
                                             gpuMemcpyDeviceToDevice, lane(r)));
      }
    }
    COLLECTIVED_RETURN_IF_ERROR(join());
    COLLECTIVED_RETURN_IF_ERROR(device::LaunchReduceSlots(dtype, op, ra, stream, device::kMaxBlocks));
    COLLECTIVED_RETURN_IF_ERROR(fork());
    for (uint32_t r = 0; r < world; ++r) {
      const CopyEnginePlan::Part p = plan.part(i, r);
      for (uint32_t j = 0; j < world && p.count > 0; ++j) {
        if (j == r) continue;
        COLLECTIVED_GPU_CHECK(gpuMemcpyAsync(static_cast<uint8_t*>(outputs[j]) + p.begin * es, ra.outputs[r],
                                             p.count * es, gpuMemcpyDeviceToDevice, lane(r)));
      }
    }
    COLLECTIVED_RETURN_IF_ERROR(join());
  }
  return Status::Ok();
}

Status GpuExecutor::PrepareCopyEngineAllReduce(uint32_t world) {
  // No op's input exceeds the larger of the slot and the heap.
  const uint64_t largest = std::max(memory_->slot_bytes(), memory_->heap_bytes());
  const uint64_t size = std::min<uint64_t>(paths_.scratch_bytes, ring::AlignUp(world * largest, 1u << 16));
  CopyEnginePlan any;  // the scratch must serve every element size, 8 bytes the largest
  COLLECTIVED_RETURN_IF_ERROR(CopyEnginePlan::Make(world, 0, 8, size, &any));
  constexpr uint32_t kMaxLanes = 4;
  for (uint32_t i = 0; i < std::min(world, kMaxLanes); ++i) {
    gpuStream_t s;
    gpuEvent_t e;
    COLLECTIVED_GPU_CHECK(gpuStreamCreateWithFlags(&s, gpuStreamNonBlocking));
    lanes_.push_back(s);
    COLLECTIVED_GPU_CHECK(gpuEventCreateWithFlags(&e, gpuEventDisableTiming));
    lane_done_.push_back(e);
  }
  gpuEvent_t f;
  COLLECTIVED_GPU_CHECK(gpuEventCreateWithFlags(&f, gpuEventDisableTiming));
  fork_ = f;
  COLLECTIVED_GPU_CHECK(gpuMalloc(&scratch_, size));
  scratch_size_ = size;
  spdlog::info("communicator {}: copy-engine all-reduce scratch of {} bytes, {} copy lanes", seg_.params().comm_id,
               size, lanes_.size());
  return Status::Ok();
}

void GpuExecutor::ReleaseCopyEngineAllReduce() {
  for (void* l : lanes_) (void)gpuStreamSynchronize(static_cast<gpuStream_t>(l));
  for (void* l : lanes_) (void)gpuStreamDestroy(static_cast<gpuStream_t>(l));
  for (void* e : lane_done_) (void)gpuEventDestroy(static_cast<gpuEvent_t>(e));
  if (fork_ != nullptr) (void)gpuEventDestroy(static_cast<gpuEvent_t>(fork_));
  if (scratch_ != nullptr) (void)gpuFree(scratch_);
  lanes_.clear();
  lane_done_.clear();
  fork_ = scratch_ = nullptr;
}

Status GpuExecutor::AddCallersBuffer(uint64_t buffer_id, const std::vector<int>& fds,
                                     const std::vector<uint64_t>& allocation_bytes, const std::vector<uint64_t>& offsets,
                                     uint64_t bytes) {
  CallersBuffer b;
  b.bytes = bytes;
  for (uint32_t r = 0; r < fds.size(); ++r) {
    const int fd = dup(fds[r]);
    if (fd < 0) return Status::ResourceExhausted("dup of a registered allocation's fd failed");
    std::unique_ptr<ipc::CuMemWindow> w;
    // Mapped for rank r's device (the daemon's fused launch runs there).
    COLLECTIVED_RETURN_IF_ERROR(ipc::CuMemWindow::Import(fd, memory_->window_ordinal(1 + r), allocation_bytes[r], &w));
    b.at.push_back(static_cast<uint8_t*>(w->device_ptr()) + offsets[r]);
    b.mappings.push_back(std::move(w));
  }
  std::lock_guard<std::mutex> lock(callers_mu_);
  callers_buffers_[buffer_id] = std::move(b);
  return Status::Ok();
}

#else  // no GPU backend at build time

Status GpuExecutor::AddCallersBuffer(uint64_t, const std::vector<int>&, const std::vector<uint64_t>&,
                                     const std::vector<uint64_t>&, uint64_t) {
  return Status::FailedPrecondition("no CUDA backend");
}

Status GpuExecutor::Start(ring::CommSegment, std::shared_ptr<GpuCommMemory>, const Paths&, host::NodeExchange*,
                          std::unique_ptr<GpuExecutor>*) {
  return Status::FailedPrecondition("this collectived was built without the CUDA backend");
}
void GpuExecutor::Run() {}
Status GpuExecutor::RunOp(uint64_t) { return Status::Ok(); }
Status GpuExecutor::CopyEngineAllReduce(DataType, ReduceOp, const void* const*, void* const*, uint32_t, uint64_t) {
  return Status::Ok();
}
Status GpuExecutor::PrepareCopyEngineAllReduce(uint32_t) { return Status::Ok(); }
void GpuExecutor::ReleaseCopyEngineAllReduce() {}
Status GpuExecutor::RunAcrossNodes(uint64_t, const ring::OpDescriptor&, const void* const*, void* const*) {
  return Status::Ok();
}
Status GpuExecutor::PipelineAllReduce(uint64_t, const ring::OpDescriptor&, const uint8_t*, uint8_t*, void* const*) {
  return Status::Ok();
}

#endif

}  // namespace collectived::daemon
