#include "client/src/communicator_impl.h"

#include <algorithm>
#include <chrono>
#include <thread>

#include "ring/matcher.h"
#include "ring/op_ring.h"
#include "ring/wait.h"

namespace collectived {

// ---- Handle ----------------------------------------------------------------

uint64_t Handle::op_index() const {
  if (!state_) return 0;
  return state_->gpu ? kIndexOnDevice : state_->index;
}

Status Handle::Wait(int timeout_ms) const {
  if (!state_) return Status::FailedPrecondition("waiting on an empty handle");
  HandleState& h = *state_;
  if (h.gpu) return GpuOpWait(*h.gpu, timeout_ms < 0 ? h.default_timeout_ms : timeout_ms);
  {
    std::lock_guard<std::mutex> lock(h.mu);
    if (h.known) return h.status;
  }
  const int64_t ms = timeout_ms < 0 ? h.default_timeout_ms : timeout_ms;
  // A wait bounded only by the op's own deadline may run the op here (the
  // op's waits keep that deadline); a shorter one must not be held in it.
  if (timeout_ms < 0) {
    if (auto executor = h.executor.lock()) executor->RunPosted(h.index);
  }
  ring::WaitContext ctx{nullptr, nullptr, ring::NowNs() + ms * 1000000};
  Status s = ring::WaitOpDone(h.seg, h.rank, h.index, ctx);
  if (ring::IsOpDone(h.seg, h.rank, h.index)) {
    // Cache the op's own status, not this wait's: a wait that timed out just
    // before the op completed must not turn a success into a failure.
    std::lock_guard<std::mutex> lock(h.mu);
    if (!h.known) {
      h.known = true;
      h.status = ring::CompletedOpStatus(h.seg, h.rank, h.index);
      // A status no longer kept (an op older than the history) is no verdict.
      if (!h.status.ok() && h.status.code() != StatusCode::kFailedPrecondition && h.op_failed) {
        h.op_failed->store(true, std::memory_order_release);
      }
    }
    return h.status;
  }
  return s;  // not complete: timed out (the op may still finish later)
}

Status Handle::WaitOn(GpuStream stream) const {
  if (!state_) return Status::FailedPrecondition("waiting on an empty handle");
  if (state_->gpu) return GpuOpWaitOn(*state_->gpu, stream);
  return Wait();  // a host op: nothing to order on a stream, so wait here
}

bool Handle::Test(Status* status) const {
  if (!state_) {
    if (status) *status = Status::FailedPrecondition("testing an empty handle");
    return true;
  }
  if (state_->gpu) return GpuOpTest(*state_->gpu, status);
  if (!ring::IsOpDone(state_->seg, state_->rank, state_->index)) return false;
  Status s = Wait(0);
  if (status) *status = s;
  return true;
}

// ---- Communicator ----------------------------------------------------------

Communicator::Communicator(std::unique_ptr<CommunicatorImpl> impl) : impl_(std::move(impl)) {}
Communicator::~Communicator() { Destroy(); }
uint32_t Communicator::rank() const { return impl_->rank(); }
uint32_t Communicator::world_size() const { return impl_->world_size(); }
uint64_t Communicator::id() const { return impl_->id(); }
ExecutionMode Communicator::mode() const { return impl_->mode(); }
uint64_t Communicator::max_message_bytes() const { return impl_->max_message_bytes(); }
Status Communicator::Destroy() { return impl_->Destroy(); }
Status Communicator::Abort(const std::string& reason) { return impl_->Abort(reason); }
Status Communicator::AsyncError() const { return impl_->AsyncError(); }
bool Communicator::ZeroCopy(const void* ptr, uint64_t bytes) const {
  return impl_->gpu() != nullptr && !impl_->destroyed() && impl_->gpu()->ZeroCopy(ptr, bytes);
}
bool Communicator::on_gpu() const { return impl_->gpu() != nullptr; }

namespace {
Status NeedGpu(const CommunicatorImpl& c) {
  if (c.gpu() == nullptr) {
    return Status::FailedPrecondition("a host communicator: use the BufferSpan overloads, or create the "
                                      "communicator with CommunicatorOptions.device");
  }
  // After Destroy nothing may be enqueued: its windows are about to be unmapped.
  if (c.destroyed()) return Status::FailedPrecondition("communicator was destroyed");
  return Status::Ok();
}
}  // namespace

void Communicator::WrapGpuBuffer(GpuHeapBuffer b, Buffer* out) {
  auto state = std::make_shared<BufferState>();
  state->id = b.id;
  state->bytes = b.bytes;
  state->device_ptr = b.ptr;
  state->device_keep = std::move(b.keep);
  state->release = std::move(b.release);
  out->state_ = std::move(state);
}

Status Communicator::AllocBuffer(uint64_t bytes, Buffer* out) {
  COLLECTIVED_RETURN_IF_ERROR(NeedGpu(*impl_));
  if (out == nullptr) return Status::InvalidArgument("out is null");
  GpuHeapBuffer b;
  COLLECTIVED_RETURN_IF_ERROR(impl_->gpu()->AllocBuffer(bytes, &b));
  *out = Buffer();
  WrapGpuBuffer(std::move(b), out);
  return Status::Ok();
}

Status Communicator::RegisterBuffer(void* ptr, uint64_t bytes, Buffer* out) {
  COLLECTIVED_RETURN_IF_ERROR(NeedGpu(*impl_));
  if (out == nullptr) return Status::InvalidArgument("out is null");
  GpuHeapBuffer b;
  COLLECTIVED_RETURN_IF_ERROR(impl_->gpu()->RegisterBuffer(ptr, bytes, &b));
  *out = Buffer();
  WrapGpuBuffer(std::move(b), out);
  return Status::Ok();
}

Status Communicator::AllReduce(const void* send, void* recv, uint64_t count, DataType dtype, ReduceOp op,
                               GpuStream stream, Handle* handle) {
  COLLECTIVED_RETURN_IF_ERROR(NeedGpu(*impl_));
  if (handle == nullptr) return Status::InvalidArgument("handle is null");
  std::shared_ptr<GpuOpState> state;
  COLLECTIVED_RETURN_IF_ERROR(impl_->gpu()->AllReduce(send, recv, count, dtype, op, stream, &state));
  impl_->MakeGpuHandle(std::move(state), handle);
  return Status::Ok();
}

Status Communicator::AllGather(const void* send, void* recv, uint64_t count, DataType dtype, GpuStream stream,
                               Handle* handle) {
  COLLECTIVED_RETURN_IF_ERROR(NeedGpu(*impl_));
  if (handle == nullptr) return Status::InvalidArgument("handle is null");
  std::shared_ptr<GpuOpState> state;
  COLLECTIVED_RETURN_IF_ERROR(impl_->gpu()->AllGather(send, recv, count, dtype, stream, &state));
  impl_->MakeGpuHandle(std::move(state), handle);
  return Status::Ok();
}

Status Communicator::GetOpTrace(uint64_t index, std::vector<OpTrace>* per_rank) const {
  if (impl_->gpu() != nullptr) return impl_->gpu()->ReadTrace(index, per_rank);
  const ring::CommSegment& seg = impl_->segment();
  per_rank->assign(seg.world_size(), OpTrace{});
  for (uint32_t r = 0; r < seg.world_size(); ++r) {
    const ring::StatusRecord& rec = seg.status_record(r, index);
    OpTrace& t = (*per_rank)[r];
    t.valid = rec.seq.load(std::memory_order_acquire) == index + 1;
    t.posted = t.valid;
    t.reads_done_ns = rec.reads_done_ns.load(std::memory_order_acquire);
    t.output_done_ns = rec.output_done_ns.load(std::memory_order_acquire);
    t.completed_ns = rec.completed_ns.load(std::memory_order_acquire);
  }
  return Status::Ok();
}

Status Communicator::AllReduce(BufferSpan send, BufferSpan recv, uint64_t count, DataType dtype, ReduceOp op,
                               Handle* handle) {
  return impl_->Post(CollectiveKind::kAllReduce, send, recv, count, dtype, op, false, handle);
}
Status Communicator::AllGather(BufferSpan send, BufferSpan recv, uint64_t count, DataType dtype, Handle* handle) {
  return impl_->Post(CollectiveKind::kAllGather, send, recv, count, dtype, ReduceOp::kUnspecified, false, handle);
}
Status Communicator::SubmitAllReduce(BufferSpan send, BufferSpan recv, uint64_t count, DataType dtype, ReduceOp op,
                                     Handle* handle) {
  return impl_->Post(CollectiveKind::kAllReduce, send, recv, count, dtype, op, true, handle);
}
Status Communicator::SubmitAllGather(BufferSpan send, BufferSpan recv, uint64_t count, DataType dtype,
                                     Handle* handle) {
  return impl_->Post(CollectiveKind::kAllGather, send, recv, count, dtype, ReduceOp::kUnspecified, true, handle);
}

// ---- CommunicatorImpl ------------------------------------------------------

CommunicatorImpl::CommunicatorImpl(std::shared_ptr<ClientImpl> client, uint64_t comm_id, uint32_t rank, uint32_t world,
                                   uint32_t segment_rank, ring::CommSegment seg, std::shared_ptr<ipc::ShmWindow> window,
                                   ExecutionMode mode)
    : client_(std::move(client)),
      comm_id_(comm_id),
      global_rank_(rank),
      world_(world),
      rank_(segment_rank),
      seg_(seg),
      window_(std::move(window)),
      mode_(mode) {}

CommunicatorImpl::~CommunicatorImpl() {
  Destroy();
  if (leak_gpu_) static_cast<void>(gpu_.release());
}

void CommunicatorImpl::Start() {
  if (mode_ != ExecutionMode::kClient) return;
  executor_ = std::make_shared<host::RankExecutor>(seg_, rank_, this, nullptr, /*caller_runs=*/true);
  executor_->Start();
}

Status CommunicatorImpl::Resolve(uint32_t rank, uint64_t buffer_id, uint64_t offset, uint64_t bytes, void** ptr) {
  if (rank != rank_) return Status::Internal("client executor asked for another rank's buffer");
  return client_->ResolveOwn(buffer_id, offset, bytes, ptr);
}

void CommunicatorImpl::MakeGpuHandle(std::shared_ptr<GpuOpState> op, Handle* handle) const {
  auto state = std::make_shared<HandleState>();
  state->window = window_;
  state->seg = seg_;
  state->rank = rank_;
  state->index = kIndexOnDevice;
  state->default_timeout_ms = OpTimeoutMs() + 5000;
  state->gpu = std::move(op);
  *handle = Handle();
  handle->state_ = std::move(state);
}

Status CommunicatorImpl::Post(CollectiveKind kind, BufferSpan send, BufferSpan recv, uint64_t count,
                              DataType dtype, ReduceOp op, bool via_rpc, Handle* handle) {
  if (handle == nullptr) return Status::InvalidArgument("handle is null");
  if (destroyed_) return Status::FailedPrecondition("communicator was destroyed");
  if (gpu_) {
    return Status::FailedPrecondition("a GPU communicator: pass device pointers and a stream (the GpuStream "
                                      "overloads)");
  }
  ring::OpDescriptor d{};
  d.kind = kind;
  d.dtype = dtype;
  d.reduce_op = op;
  d.count = count;
  COLLECTIVED_RETURN_IF_ERROR(ring::ValidateDescriptor(d, max_message_bytes()));
  const uint64_t in_bytes = count * DataTypeSize(dtype);
  const uint64_t out_bytes = kind == CollectiveKind::kAllGather ? in_bytes * world_size() : in_bytes;
  COLLECTIVED_RETURN_IF_ERROR(client_->CheckSpan(send, in_bytes, "send", &d.send_buffer_id));
  COLLECTIVED_RETURN_IF_ERROR(client_->CheckSpan(recv, out_bytes, "recv", &d.recv_buffer_id));
  d.send_offset = send.offset;
  d.recv_offset = recv.offset;
  d.algorithm = ring::ChooseAlgorithm(kind, in_bytes, seg_.params().one_shot_max_bytes);

  uint64_t index = 0;
  if (via_rpc) {
    v1::OpRequest req;
    req.set_kind(static_cast<v1::CollectiveKind>(kind));
    req.set_dtype(static_cast<v1::DataType>(dtype));
    req.set_reduce_op(static_cast<v1::ReduceOp>(op));
    req.set_count(count);
    req.set_send_buffer_id(d.send_buffer_id);
    req.set_send_offset(d.send_offset);
    req.set_recv_buffer_id(d.recv_buffer_id);
    req.set_recv_offset(d.recv_offset);
    Status submitted = client_->Submit(comm_id_, rank_, req, &index);
    if (FailedOnAbort(submitted)) op_failed_->store(true, std::memory_order_release);  // AsyncError
    COLLECTIVED_RETURN_IF_ERROR(submitted);
  } else {
    ring::WaitContext ctx{&seg_, nullptr, ring::NowNs() + static_cast<int64_t>(seg_.params().op_timeout_ns)};
    Status posted = ring::PostOp(seg_, rank_, d, ctx, &index);
    if (FailedOnAbort(posted)) op_failed_->store(true, std::memory_order_release);  // AsyncError
    COLLECTIVED_RETURN_IF_ERROR(posted);
  }
  auto state = std::make_shared<HandleState>();
  state->window = window_;
  state->seg = seg_;
  state->rank = rank_;
  state->index = index;
  state->default_timeout_ms = OpTimeoutMs() + 5000;  // int64: no overflow for any uint32 op timeout
  state->executor = executor_;
  state->op_failed = op_failed_;
  *handle = Handle();
  handle->state_ = std::move(state);
  return Status::Ok();
}

bool CommunicatorImpl::FailedOnAbort(const Status& s) const {
  return !s.ok() && seg_.aborted() && s.code() == seg_.AbortStatus().code();
}

Status CommunicatorImpl::AsyncError() const {
  // A peer that destroyed its communicator after its last op failed nothing
  // here: the abort becomes this rank's error once one of its own ops fails
  // on it (it needed that peer). Its eager ops and any kernel of a GPU rank
  // (graph replays too) record failures; a host op's, its wait.
  Status aborted = seg_.AbortStatus();
  if (!aborted.ok() && !seg_.aborted_by_clean_leave()) return aborted;
  Status mine = gpu_ ? gpu_->LastOpError() : Status::Ok();
  if (!mine.ok()) return mine;
  if (!aborted.ok() && op_failed_->load(std::memory_order_acquire)) return aborted;
  return Status::Ok();
}

Status CommunicatorImpl::Abort(const std::string& reason) {
  // Stop every waiter first, before the lock a Destroy in progress may hold:
  // host waiters (this process and peers) see the segment's abort, kernels
  // (this rank's and peers') the abort word.
  const std::string why = "rank " + std::to_string(global_rank_) + " aborted the communicator: " + reason;
  seg_.Abort(StatusCode::kAborted, why.c_str());
  const Status raised = gpu_ ? gpu_->RaiseAbort() : Status::Ok();
  std::lock_guard<std::mutex> lock(destroy_mu_);
  if (destroyed_.load(std::memory_order_acquire)) return Status::Ok();
  destroyed_.store(true, std::memory_order_release);
  // Leave without draining: the daemon frees this rank's place and sets the
  // abort word too (which covers a RaiseAbort that failed). A daemon that is
  // gone changes nothing here: the abort is already in shared memory.
  const Status left = client_->DestroyCommunicator(comm_id_, rank_);
  // Kernels give up within microseconds of the abort word; bound the wait
  // anyway (a caller's own kernel ahead of them on the stream may not end).
  const Status quiesced = gpu_ ? gpu_->Quiesce(std::min<int64_t>(OpTimeoutMs() + 1000, 10000)) : Status::Ok();
  leak_gpu_ = !quiesced.ok();
  if (executor_) executor_->Stop();
  if (gpu_ && quiesced.ok()) gpu_->ReleaseQueueLease();
  destroy_status_ = seg_.AbortStatus();
  if (!quiesced.ok()) return quiesced;
  if (!raised.ok() && !left.ok()) return raised;  // neither way reached the kernels
  return Status::Ok();
}

Status CommunicatorImpl::Destroy() {
  std::lock_guard<std::mutex> lock(destroy_mu_);
  if (destroyed_.load(std::memory_order_acquire)) return destroy_status_;
  destroyed_.store(true, std::memory_order_release);
  // GPU: every eager op this rank enqueued must have run before anything is unmapped.
  Status quiesced = gpu_ ? gpu_->Quiesce(OpTimeoutMs() + 5000) : Status::Ok();
  leak_gpu_ = !quiesced.ok();
  // Let this rank's posted ops finish (or fail) before leaving.
  const uint64_t posted = seg_.control(rank_).next_index.value.load(std::memory_order_acquire);
  // An abort ends the wait too: an index taken but never published (its post
  // failed) would otherwise hold Destroy for the whole op timeout.
  ring::WaitContext ctx{&seg_, nullptr, ring::NowNs() + static_cast<int64_t>(seg_.params().op_timeout_ns) +
                                            5'000'000'000LL};
  Status drained = Status::Ok();
  if (posted != 0 && gpu_) {
    // A daemon-executed GPU rank's `completed` is written by the daemon's
    // publish kernel, which wakes no sleeper: poll it.
    const std::atomic<uint64_t>& done = seg_.control(rank_).completed.value;
    while (done.load(std::memory_order_acquire) < posted && !seg_.aborted() && ring::NowNs() < ctx.deadline_ns) {
      std::this_thread::sleep_for(std::chrono::microseconds(200));
    }
    if (done.load(std::memory_order_acquire) < posted) {
      drained = seg_.aborted() ? seg_.AbortStatus()
                               : Status::DeadlineExceeded("this rank's ops did not finish before destroy");
    }
  } else if (posted != 0) {
    drained = ring::WaitAtLeast(seg_.control(rank_).completed.value, posted, ctx,
                                "this rank's ops to finish before destroy");
  }
  if (executor_) executor_->Stop();
  if (gpu_ && quiesced.ok()) gpu_->ReleaseQueueLease();  // this rank's kernels have run
  // A GPU rank that leaves after one of its ops failed (a deadline, a
  // mismatch: only the device's words say so, the segment is not aborted)
  // does not leave cleanly: its peers learn of the failure, not of a clean
  // leave (the daemon marks a leave clean when it finds the segment whole).
  if (gpu_ && !seg_.aborted()) {
    const Status mine = gpu_->LastOpError();
    if (!mine.ok()) {
      const std::string why = "rank " + std::to_string(global_rank_) + " left after a failed op: " + mine.message();
      seg_.Abort(mine.code(), why.c_str());
    }
  }
  destroy_status_ = client_->DestroyCommunicator(comm_id_, rank_);
  if (destroy_status_.ok() && !drained.ok()) destroy_status_ = drained;
  if (destroy_status_.ok() && !quiesced.ok()) destroy_status_ = quiesced;
  return destroy_status_;
}

}  // namespace collectived
