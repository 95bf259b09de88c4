#include "client/src/daemon_poster.h"

#include <unistd.h>

#include <algorithm>
#include <cstddef>
#include <cstring>
#include <string>

#include "base/gpu/device_guard.h"
#include "base/gpu/gpu_check.h"
#include "ring/gpu_control_layout.h"
#include "ring/op_codec.h"
#include "ring/op_ring.h"

namespace collectived {

using gpu::DeviceGuard;

DaemonPoster::DaemonPoster(GpuRankEngine& engine)
    : engine(engine), setup(engine.setup), control(engine.control), abort_word(engine.abort_word) {}

DaemonPoster::~DaemonPoster() {
  if (registered != nullptr) {
    DeviceGuard guard(setup.device);
    gpuHostUnregister(registered);
  }
}

Status DaemonPoster::Create(GpuRankEngine& engine, std::unique_ptr<DaemonPoster>* out) {
  std::unique_ptr<DaemonPoster> poster(new DaemonPoster(engine));
  const GpuCommSetup& s = engine.setup;
  DeviceGuard guard(s.device);
  // Daemon-executed ops meet the daemon in the segment: ring posts write the
  // op ring, the wait kernel polls the daemon's `completed` word.
  const uint64_t page = static_cast<uint64_t>(sysconf(_SC_PAGESIZE));
  void* base = &s.seg.header();
  COLLECTIVED_GPU_CHECK(gpuHostRegister(base, ring::AlignUp(s.seg.control_bytes(), page),
                                        gpuHostRegisterMapped | gpuHostRegisterPortable));
  poster->registered = base;
  void* dev = nullptr;
  COLLECTIVED_GPU_CHECK(gpuHostGetDevicePointer(&dev, base, 0));
  auto device_view = [&](const void* host) {
    return reinterpret_cast<uint64_t*>(static_cast<uint8_t*>(dev) +
                                       (static_cast<const uint8_t*>(host) - static_cast<const uint8_t*>(base)));
  };
  poster->posted_mirror = device_view(&s.seg.control(s.rank).next_index.value);
  poster->completed_mirror = device_view(&s.seg.control(s.rank).completed.value);
  poster->ring = reinterpret_cast<uint8_t*>(device_view(&s.seg.slot(s.rank, 0)));
  *out = std::move(poster);
  return Status::Ok();
}

Status DaemonPoster::PostAndWaitForDaemon(const ring::OpDescriptor& d, gpuStream_t stream) {
  void* c = control->device_ptr();
  ring::RingPostArgs p;
  p.counter = ring::GpuControlLayout::Counter(c, setup.rank);
  p.op_index = ring::GpuControlLayout::OpIndex(c, setup.rank);
  p.posted_mirror = posted_mirror;
  p.ring = ring;
  p.depth = setup.seg.ring_depth();
  p.slot = ring::RingSlotLayout();
  ring::PackOpDescriptor(d, p.desc);
  p.completed = completed_mirror;
  p.abort_word = abort_word;
  p.error_word = ring::GpuControlLayout::Error(c);
  p.timeout_ns = setup.seg.params().op_timeout_ns;
  // An eager post is on its way: tell the daemon's executor, which may sleep
  // (before the launch, so no failure between the two can leave it
  // unannounced; announced early, the executor only polls). A captured one
  // is not (its replays post; the daemon knows of the graph from
  // RegisterPlan and does not sleep).
  gpuStreamCaptureStatus capture = gpuStreamCaptureStatusNone;
  COLLECTIVED_GPU_CHECK(gpuStreamIsCapturing(stream, &capture));
  if (capture == gpuStreamCaptureStatusNone) ring::AnnounceDevicePost(setup.seg, setup.rank);
  COLLECTIVED_RETURN_IF_ERROR(ring::LaunchRingPost(p, stream));
  return ring::LaunchWait(p.op_index, completed_mirror, abort_word, p.error_word, p.timeout_ns, stream,
                          engine.rank_error);
}

Status DaemonPoster::Post(CollectiveKind kind, const void* send, void* recv, uint64_t count, DataType dtype,
                          ReduceOp op, void* stream_ptr, std::shared_ptr<GpuOpState>* out) {
  GpuRankEngine& m = engine;
  auto stream = static_cast<gpuStream_t>(stream_ptr);
  const uint64_t bytes = count * DataTypeSize(dtype);
  // Across nodes the output holds every node's ranks, not only the segment's.
  const uint64_t out_bytes = kind == CollectiveKind::kAllGather ? bytes * std::max(m.world(), m.setup.world) : bytes;
  ring::OpDescriptor d{};
  d.kind = kind;
  d.dtype = dtype;
  d.reduce_op = op;
  d.algorithm = ring::Algorithm::kUnspecified;  // one fused launch
  d.count = count;
  // The daemon addresses each rank's buffers on its own (no symmetry needed):
  // heap and registered buffers in place, anything else through the rank's slot.
  std::function<Status()> copy_in, copy_out;
  uint8_t* mine = m.slot(m.setup.rank);
  uint64_t id = 0;
  if (m.InHeap(send, bytes, &d.send_offset)) {
    d.send_buffer_id = ring::EncodeBufferPlace(ring::BufferPlace::kHeap);
  } else if (m.InRegistered(send, bytes, &id, &d.send_offset)) {
    d.send_buffer_id = ring::EncodeBufferPlace(ring::BufferPlace::kRegistered, id);
  } else {
    if (bytes > m.setup.slot_bytes) {
      return Status::InvalidArgument("message of " + std::to_string(bytes) + " bytes exceeds the staging slot of " +
                                     std::to_string(m.setup.slot_bytes) + " bytes; use Communicator::AllocBuffer");
    }
    COLLECTIVED_RETURN_IF_ERROR(m.CheckPointer(send, "send"));
    d.send_buffer_id = ring::EncodeBufferPlace(ring::BufferPlace::kSlot);
    copy_in = CopyLater(mine, send, bytes, stream);
  }
  if (m.InHeap(recv, out_bytes, &d.recv_offset)) {
    d.recv_buffer_id = ring::EncodeBufferPlace(ring::BufferPlace::kHeap);
  } else if (m.InRegistered(recv, out_bytes, &id, &d.recv_offset)) {
    d.recv_buffer_id = ring::EncodeBufferPlace(ring::BufferPlace::kRegistered, id);
  } else if (kind == CollectiveKind::kAllGather) {
    return Status::InvalidArgument("a daemon-executed all-gather writes into the symmetric heap or a registered "
                                   "buffer: allocate recv with Communicator::AllocBuffer, or register it");
  } else {
    if (out_bytes > m.setup.slot_bytes) return Status::InvalidArgument("message exceeds the staging slot");
    COLLECTIVED_RETURN_IF_ERROR(m.CheckPointer(recv, "recv"));
    d.recv_buffer_id = ring::EncodeBufferPlace(ring::BufferPlace::kSlot);
    d.recv_offset = 0;
    copy_out = CopyLater(recv, mine, bytes, stream);
  }
  auto kernel = [&](const GpuRankEngine::KernelCompletion&) { return PostAndWaitForDaemon(d, stream); };
  return m.Enqueue(stream, {kind, dtype, op, count}, copy_in, kernel, copy_out, out);
}

}  // namespace collectived
