#include "daemon/service.h"

#include <pthread.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <climits>
#include <cstdlib>

#include "collectived/api_version.h"
#include "daemon/stats.h"
#include "daemon/validate.h"
#include "ring/segment_layout.h"
#include "proto/status_convert.h"
#include "ring/wait.h"

namespace collectived::daemon {
namespace {

grpc::ServerUnaryReactor* Done(grpc::CallbackServerContext* ctx, const Status& s) {
  auto* reactor = ctx->DefaultReactor();
  reactor->Finish(ToGrpcStatus(s));
  return reactor;
}

ring::OpDescriptor FromProto(const v1::OpRequest& op) {
  ring::OpDescriptor d{};
  d.kind = static_cast<CollectiveKind>(op.kind());
  d.dtype = static_cast<DataType>(op.dtype());
  d.reduce_op = static_cast<ReduceOp>(op.reduce_op());
  d.count = op.count();
  d.send_buffer_id = op.send_buffer_id();
  d.send_offset = op.send_offset();
  d.recv_buffer_id = op.recv_buffer_id();
  d.recv_offset = op.recv_offset();
  return d;
}

// An op's own fields, before any state is looked at: enums known (proto3
// keeps unknown numbers, so a newer or hostile client can send any), the
// count nonzero and its bytes at most max_bytes, offsets aligned to the
// element size (ops read and write whole elements).
Status ValidateOp(const v1::OpRequest& op, uint64_t max_bytes, bool with_buffers) {
  namespace val = validate;
  COLLECTIVED_RETURN_IF_ERROR(val::Enum("op.kind", op.kind(), v1::CollectiveKind_IsValid(op.kind())));
  if (op.kind() == v1::COLLECTIVE_KIND_UNSPECIFIED) return Status::InvalidArgument("op.kind is unspecified");
  COLLECTIVED_RETURN_IF_ERROR(val::Enum("op.dtype", op.dtype(), v1::DataType_IsValid(op.dtype())));
  if (op.dtype() == v1::DATA_TYPE_UNSPECIFIED) return Status::InvalidArgument("op.dtype is unspecified");
  COLLECTIVED_RETURN_IF_ERROR(val::Enum("op.reduce_op", op.reduce_op(), v1::ReduceOp_IsValid(op.reduce_op())));
  const uint64_t esize = DataTypeSize(static_cast<DataType>(op.dtype()));
  COLLECTIVED_RETURN_IF_ERROR(val::Range("op.count", op.count(), 1, max_bytes / esize));
  if (with_buffers) {
    COLLECTIVED_RETURN_IF_ERROR(val::Aligned("op.send_offset", op.send_offset(), esize));
    COLLECTIVED_RETURN_IF_ERROR(val::Aligned("op.recv_offset", op.recv_offset(), esize));
  }
  return Status::Ok();
}

Status ValidateJoinRequest(const v1::CreateCommunicatorRequest& r) {
  namespace val = validate;
  if (r.key().empty()) return Status::InvalidArgument("key is empty");
  COLLECTIVED_RETURN_IF_ERROR(val::String("key", r.key(), val::kMaxNameBytes));
  COLLECTIVED_RETURN_IF_ERROR(val::Range("world_size", r.world_size(), 1, ring::kMaxRanks));
  COLLECTIVED_RETURN_IF_ERROR(val::Range("rank", r.rank(), 0, r.world_size() - 1));
  COLLECTIVED_RETURN_IF_ERROR(val::Enum("mode", r.mode(), v1::ExecutionMode_IsValid(r.mode())));
  COLLECTIVED_RETURN_IF_ERROR(val::Range("op_timeout_ms", r.op_timeout_ms(), 0, val::kMaxTimeoutMs));
  COLLECTIVED_RETURN_IF_ERROR(val::Range("join_timeout_ms", r.join_timeout_ms(), 0, val::kMaxTimeoutMs));
  COLLECTIVED_RETURN_IF_ERROR(val::String("device_uuid", r.device_uuid(), val::kMaxDeviceUuidBytes));
  // cannot_join is free text from the member's own checks (a GPU runtime's
  // message, say): bounded here, escaped below rather than refused, so the
  // reason still reaches the peers.
  if (r.cannot_join().size() > val::kMaxReasonBytes) {
    return Status::InvalidArgument("cannot_join is " + std::to_string(r.cannot_join().size()) +
                                   " bytes, above the limit of " + std::to_string(val::kMaxReasonBytes));
  }
  return Status::Ok();
}

void ToProto(const CommStats& in, v1::CommunicatorStats* out) {
  out->set_comm_id(in.comm_id);
  out->set_key(in.key);
  out->set_owner_uid(in.owner_uid);
  out->set_key_hidden(in.key_hidden);
  out->set_world_size(in.world_size);
  out->set_mode(static_cast<v1::ExecutionMode>(in.mode));
  out->set_posted(in.posted);
  out->set_matched(in.matched);
  out->set_completed(in.completed);
  out->set_failed(in.failed);
  out->set_aborted(in.aborted);
  out->set_abort_reason(in.abort_reason);
  for (const RankStats& r : in.ranks) {
    auto* rs = out->add_ranks();
    rs->set_rank(r.rank);
    rs->set_session_id(r.session_id);
    rs->set_posted(r.posted);
    rs->set_completed(r.completed);
    rs->set_captured_plans(r.captured_plans);
  }
  out->set_closed(in.closed);
  out->set_gpu_handoff_us_mean(in.gpu_handoff_us_mean);
  out->set_global_world_size(in.global_world_size);
  for (uint32_t n : in.nodes) out->add_nodes(n);
  out->set_exchanges(in.exchanges);
  out->set_exchange_ns(in.exchange_ns);
  out->set_exchange_bytes_sent(in.exchange_bytes_sent);
  out->set_registered_buffers(in.registered_buffers);
  out->set_latency_count(in.latency_count);
  out->set_latency_p50_us(in.latency_p50_us);
  out->set_latency_p90_us(in.latency_p90_us);
  out->set_latency_p99_us(in.latency_p99_us);
  out->set_stalled(in.stalled);
  out->set_stalled_op(in.stalled_op);
  out->set_stalled_ms(in.stalled_ms);
  for (uint32_t r : in.missing_ranks) out->add_missing_ranks(r);
  out->set_stall_note(in.stall_note);
}

void ToProto(const RegistryStats& in, v1::GetStatsResponse* out) {
  out->set_sessions(in.sessions);
  out->set_buffers(in.buffers);
  out->set_buffer_bytes(in.buffer_bytes);
  out->set_draining(in.draining);
  for (const CommStats& c : in.communicators) ToProto(c, out->add_communicators());
  for (const CommStats& c : in.recently_closed) ToProto(c, out->add_recently_closed());
  for (const SessionStats& s : in.session_list) {
    v1::SessionStats* p = out->add_session_list();
    p->set_session_id(s.session_id);
    p->set_uid(s.uid);
    p->set_pid(s.pid);
    p->set_name(s.name);
    p->set_age_ms(s.age_ms);
    p->set_buffers(s.buffers);
    p->set_buffer_bytes(s.buffer_bytes);
    for (const auto& [comm, rank] : s.memberships) {
      v1::SessionStats::Membership* m = p->add_memberships();
      m->set_comm_id(comm);
      m->set_rank(rank);
    }
  }
}

}  // namespace

CollectiveServiceImpl::CollectiveServiceImpl(Registry* registry, std::string fd_socket_path, PeerLookup who,
                                             std::function<void()> on_drain)
    : registry_(registry),
      fd_socket_path_(std::move(fd_socket_path)),
      who_(std::move(who)),
      on_drain_(std::move(on_drain)) {
  waiter_ = std::thread([this] { WaiterLoop(); });
}

CollectiveServiceImpl::~CollectiveServiceImpl() {
  {
    std::lock_guard<std::mutex> lock(wait_mu_);
    stop_ = true;
  }
  wait_cv_.notify_all();
  waiter_.join();
}

Status CollectiveServiceImpl::Caller(grpc::CallbackServerContext* ctx, ipc::PeerCredentials* out) const {
  if (!who_(ctx->peer(), out)) {
    return Status::PermissionDenied("the caller's credentials are unknown (connection " + ctx->peer() + ")");
  }
  return Status::Ok();
}

Status CollectiveServiceImpl::Authorize(grpc::CallbackServerContext* ctx, uint64_t session_id) const {
  ipc::PeerCredentials caller;
  COLLECTIVED_RETURN_IF_ERROR(Caller(ctx, &caller));
  uint64_t token = 0;  // 0 is never a session's token: a missing one fails below
  auto it = ctx->client_metadata().find(kSessionTokenMetadata);
  if (it != ctx->client_metadata().end()) {
    const std::string text(it->second.data(), it->second.size());
    char* end = nullptr;
    token = std::strtoull(text.c_str(), &end, 10);
    if (text.empty() || *end != '\0') token = 0;
  }
  return registry_->Authorize(session_id, token, caller);
}

grpc::ServerUnaryReactor* CollectiveServiceImpl::GetVersion(grpc::CallbackServerContext* ctx,
                                                            const v1::GetVersionRequest*,
                                                            v1::GetVersionResponse* resp) {
  resp->set_daemon_version(COLLECTIVED_VERSION);
  resp->set_api_major(kApiMajor);
  resp->set_api_minor(kApiMinor);
  resp->add_backends("host");
#ifdef COLLECTIVED_HAVE_GPU
  resp->add_backends("cuda");
#endif
  resp->set_active_backend(BackendName(registry_->config().backend));
  for (const char* cap : {"mode.client", "mode.daemon", "op.all_reduce", "op.all_gather", "algo.one_shot",
                          "algo.two_shot", "rpc.submit", "fd.memfd"}) {
    resp->add_capabilities(cap);
  }
  if (registry_->config().backend == Backend::kCuda) {
    for (const char* cap : {"gpu.client_executed", "gpu.symmetric_heap", "gpu.device_matcher", "fd.cumem",
                            "gpu.registered_buffers"}) {
      resp->add_capabilities(cap);
    }
  }
  resp->set_max_message_bytes(registry_->config().max_message_bytes);
  return Done(ctx, Status::Ok());
}

grpc::ServerUnaryReactor* CollectiveServiceImpl::Attach(grpc::CallbackServerContext* ctx,
                                                        const v1::AttachRequest* req, v1::AttachResponse* resp) {
  if (req->api_major() != kApiMajor) {
    return Done(ctx, Status::FailedPrecondition("client speaks API v" + std::to_string(req->api_major()) +
                                                ", this daemon serves v" + std::to_string(kApiMajor)));
  }
  if (Status v = validate::String("client_name", req->client_name(), validate::kMaxNameBytes); !v.ok()) {
    return Done(ctx, v);
  }
  // pid 0 names no process (the kernel's scheduler); the session is tied to a live one.
  if (Status v = validate::Range("pid", req->pid(), 1, INT32_MAX); !v.ok()) return Done(ctx, v);
  ipc::PeerCredentials caller;
  if (Status c = Caller(ctx, &caller); !c.ok()) return Done(ctx, c);
  uint64_t session = 0, token = 0;
  Status s = registry_->Attach(req->client_name(), req->pid(), caller, &session, &token);
  if (s.ok()) {
    resp->set_session_id(session);
    resp->set_session_token(token);
    resp->set_fd_socket_path(fd_socket_path_);
  }
  return Done(ctx, s);
}

grpc::ServerUnaryReactor* CollectiveServiceImpl::Detach(grpc::CallbackServerContext* ctx,
                                                        const v1::DetachRequest* req, v1::DetachResponse*) {
  if (Status a = Authorize(ctx, req->session_id()); !a.ok()) return Done(ctx, a);
  return Done(ctx, registry_->Detach(req->session_id()));
}

grpc::ServerUnaryReactor* CollectiveServiceImpl::AllocBuffer(grpc::CallbackServerContext* ctx,
                                                             const v1::AllocBufferRequest* req,
                                                             v1::AllocBufferResponse* resp) {
  if (Status a = Authorize(ctx, req->session_id()); !a.ok()) return Done(ctx, a);
  if (req->bytes() == 0) return Done(ctx, Status::InvalidArgument("bytes is 0: a buffer holds at least one byte"));
  BufferInfo info{};
  Status s = registry_->AllocBuffer(req->session_id(), req->bytes(), &info);
  if (s.ok()) {
    resp->set_buffer_id(info.buffer_id);
    resp->set_window_id(info.window_id);
    resp->set_window_offset(info.offset);
    resp->set_bytes(info.bytes);
    resp->set_window_bytes(info.window_bytes);
  }
  return Done(ctx, s);
}

grpc::ServerUnaryReactor* CollectiveServiceImpl::FreeBuffer(grpc::CallbackServerContext* ctx,
                                                            const v1::FreeBufferRequest* req,
                                                            v1::FreeBufferResponse*) {
  if (Status a = Authorize(ctx, req->session_id()); !a.ok()) return Done(ctx, a);
  return Done(ctx, registry_->FreeBuffer(req->session_id(), req->buffer_id()));
}

grpc::ServerUnaryReactor* CollectiveServiceImpl::CreateCommunicator(grpc::CallbackServerContext* ctx,
                                                                    const v1::CreateCommunicatorRequest* req,
                                                                    v1::CreateCommunicatorResponse* resp) {
  if (Status a = Authorize(ctx, req->session_id()); !a.ok()) return Done(ctx, a);
  if (Status v = ValidateJoinRequest(*req); !v.ok()) return Done(ctx, v);
  auto* reactor = ctx->DefaultReactor();
  JoinRequest j;
  j.session_id = req->session_id();
  j.key = req->key();
  j.world_size = req->world_size();
  j.rank = req->rank();
  j.mode = static_cast<ExecutionMode>(req->mode());
  j.op_timeout_ms = req->op_timeout_ms();
  j.join_timeout_ms = req->join_timeout_ms();
  j.device_uuid = req->device_uuid();
  j.gpu_heap_bytes = req->gpu_heap_bytes();
  j.cannot_join = validate::Printable(req->cannot_join());
  // Finished when the last member joins, or on error/expiry (Registry::Join
  // calls back exactly once).
  registry_->Join(j, [reactor, resp](const Status& s, const JoinResult& r) {
    if (s.ok()) {
      resp->set_comm_id(r.comm_id);
      resp->set_window_id(r.window_id);
      resp->set_window_bytes(r.window_bytes);
      resp->set_mode(static_cast<v1::ExecutionMode>(r.mode));
      resp->set_segment_rank(r.segment_rank);
      resp->set_world_size(r.world_size);
      if (r.gpu) {
        auto fill = [](const GpuWindowInfo& in, v1::GpuWindow* out) {
          out->set_window_id(in.window_id);
          out->set_bytes(in.bytes);
          out->set_device_uuid(in.device_uuid);
          out->set_legacy_ipc_handle(in.legacy_ipc_handle);
        };
        fill(r.gpu_control, resp->mutable_gpu_control());
        for (const auto& w : r.gpu_ranks) fill(w, resp->add_gpu_ranks());
        resp->set_gpu_slot_bytes(r.gpu_slot_bytes);
        resp->set_gpu_heap_bytes(r.gpu_heap_bytes);
        resp->set_gpu_blocks(r.gpu_blocks);
      }
    }
    reactor->Finish(ToGrpcStatus(s));
  });
  return reactor;
}

grpc::ServerUnaryReactor* CollectiveServiceImpl::DestroyCommunicator(grpc::CallbackServerContext* ctx,
                                                                     const v1::DestroyCommunicatorRequest* req,
                                                                     v1::DestroyCommunicatorResponse*) {
  if (Status a = Authorize(ctx, req->session_id()); !a.ok()) return Done(ctx, a);
  return Done(ctx, registry_->DestroyCommunicator(req->session_id(), req->comm_id(), req->rank()));
}

grpc::ServerUnaryReactor* CollectiveServiceImpl::RegisterPlan(grpc::CallbackServerContext* ctx,
                                                              const v1::RegisterPlanRequest* req,
                                                              v1::RegisterPlanResponse* resp) {
  if (Status a = Authorize(ctx, req->session_id()); !a.ok()) return Done(ctx, a);
  // A plan runs on the heap or a registered buffer, which may exceed the
  // message limit but never the daemon's whole buffer budget.
  const DaemonConfig& cfg = registry_->config();
  if (Status v = ValidateOp(req->op(), std::max(cfg.max_message_bytes, cfg.max_buffer_bytes), false); !v.ok()) {
    return Done(ctx, v);
  }
  uint64_t plans = 0;
  Status s = registry_->RegisterPlan(req->session_id(), req->comm_id(), req->rank(), FromProto(req->op()), &plans);
  if (s.ok()) resp->set_plans(plans);
  return Done(ctx, s);
}

grpc::ServerUnaryReactor* CollectiveServiceImpl::RegisterGpuBuffer(grpc::CallbackServerContext* ctx,
                                                                   const v1::RegisterGpuBufferRequest* req,
                                                                   v1::RegisterGpuBufferResponse* resp) {
  if (Status a = Authorize(ctx, req->session_id()); !a.ok()) return Done(ctx, a);
  auto* reactor = ctx->DefaultReactor();
  GpuRegisterRequest r;
  r.session_id = req->session_id();
  r.comm_id = req->comm_id();
  r.rank = req->rank();
  r.deposit_id = req->deposit_id();
  r.allocation_bytes = req->allocation_bytes();
  r.offset = req->offset();
  r.bytes = req->bytes();
  // Finished when every rank registered this buffer (Registry calls back once).
  registry_->RegisterGpuBuffer(r, [reactor, resp](const Status& s, const GpuRegisterResult& result) {
    if (s.ok()) {
      resp->set_buffer_id(result.buffer_id);
      for (const auto& a : result.allocations) {
        auto* w = resp->add_allocations();
        w->set_window_id(a.window_id);
        w->set_bytes(a.bytes);
        w->set_device_uuid(a.device_uuid);
      }
      for (uint64_t off : result.offsets) resp->add_offsets(off);
    }
    reactor->Finish(ToGrpcStatus(s));
  });
  return reactor;
}

grpc::ServerUnaryReactor* CollectiveServiceImpl::DeregisterGpuBuffer(grpc::CallbackServerContext* ctx,
                                                                     const v1::DeregisterGpuBufferRequest* req,
                                                                     v1::DeregisterGpuBufferResponse*) {
  if (Status a = Authorize(ctx, req->session_id()); !a.ok()) return Done(ctx, a);
  return Done(ctx,
              registry_->DeregisterGpuBuffer(req->session_id(), req->comm_id(), req->rank(), req->buffer_id()));
}

grpc::ServerUnaryReactor* CollectiveServiceImpl::Submit(grpc::CallbackServerContext* ctx,
                                                        const v1::SubmitRequest* req, v1::SubmitResponse* resp) {
  if (Status a = Authorize(ctx, req->session_id()); !a.ok()) return Done(ctx, a);
  if (Status v = ValidateOp(req->op(), registry_->config().max_message_bytes, true); !v.ok()) return Done(ctx, v);
  uint64_t index = 0;
  Status s = registry_->Submit(req->session_id(), req->comm_id(), req->rank(), FromProto(req->op()), &index);
  if (s.ok()) resp->set_op_index(index);
  return Done(ctx, s);
}

bool CollectiveServiceImpl::PollWait(const PendingWait& w, bool expired) {
  bool done = false;
  Status op_status;
  Status s = registry_->QueryOp(w.session_id, w.comm_id, w.rank, w.index, &done, &op_status);
  if (!s.ok()) {
    w.reactor->Finish(ToGrpcStatus(s));
    return true;
  }
  if (!done && !expired) return false;
  w.resp->set_done(done);
  if (done) {
    w.resp->set_status_code(static_cast<int32_t>(op_status.code()));
    w.resp->set_status_message(op_status.message());
  }
  w.reactor->Finish(grpc::Status::OK);
  return true;
}

grpc::ServerUnaryReactor* CollectiveServiceImpl::WaitOp(grpc::CallbackServerContext* ctx,
                                                        const v1::WaitOpRequest* req, v1::WaitOpResponse* resp) {
  if (Status a = Authorize(ctx, req->session_id()); !a.ok()) return Done(ctx, a);
  if (Status v = validate::Range("timeout_ms", req->timeout_ms(), 0, validate::kMaxTimeoutMs); !v.ok()) {
    return Done(ctx, v);
  }
  auto* reactor = ctx->DefaultReactor();
  const int64_t now = ring::NowNs();
  PendingWait w{now, now + static_cast<int64_t>(req->timeout_ms()) * 1000000, req->session_id(),
                req->comm_id(), req->op_index(), req->rank(), reactor, resp};
  if (PollWait(w, req->timeout_ms() == 0)) return reactor;
  {
    std::lock_guard<std::mutex> lock(wait_mu_);
    waits_.push_back(w);
  }
  wait_cv_.notify_one();
  return reactor;
}

void CollectiveServiceImpl::WaiterLoop() {
  pthread_setname_np(pthread_self(), "cd-wait-op");
  // Polled (ops complete in client or daemon memory, with no event here),
  // every eighth of the youngest wait's age: an op is seen done at most
  // 12.5 % (and 20 ms) late, and a client blocked in a long WaitOp costs
  // tens of wake-ups a second, not thousands.
  constexpr int64_t kMinUs = 100, kMaxUs = 20000;
  std::unique_lock<std::mutex> lock(wait_mu_);
  while (!stop_) {
    if (waits_.empty()) {
      wait_cv_.wait(lock, [this] { return stop_ || !waits_.empty(); });
      continue;
    }
    const int64_t now = ring::NowNs();
    for (auto it = waits_.begin(); it != waits_.end();) {
      it = PollWait(*it, now >= it->deadline_ns) ? waits_.erase(it) : std::next(it);
    }
    int64_t sleep_us = kMaxUs;
    for (const PendingWait& w : waits_) {
      sleep_us = std::min(sleep_us, std::max(kMinUs, (now - w.started_ns) / 8000));
      // Never past a deadline: a wait's timeout is answered on time.
      sleep_us = std::min(sleep_us, std::max<int64_t>(1, (w.deadline_ns - now) / 1000));
    }
    const size_t waiting = waits_.size();
    wait_cv_.wait_for(lock, std::chrono::microseconds(sleep_us), [&] { return stop_ || waits_.size() > waiting; });
  }
  for (auto& w : waits_) w.reactor->Finish(grpc::Status(grpc::StatusCode::UNAVAILABLE, "daemon stopping"));
  waits_.clear();
}

grpc::ServerUnaryReactor* CollectiveServiceImpl::GetStats(grpc::CallbackServerContext* ctx,
                                                          const v1::GetStatsRequest*, v1::GetStatsResponse* resp) {
  ipc::PeerCredentials viewer;
  if (Status c = Caller(ctx, &viewer); !c.ok()) return Done(ctx, c);
  RegistryStats stats = registry_->Stats();
  // Keys name jobs: another uid's stay hidden unless the viewer administers.
  for (auto* list : {&stats.communicators, &stats.recently_closed}) {
    for (CommStats& c : *list) {
      if (registry_->access().MaySee(viewer, c.owner_uid)) continue;
      c.key.clear();
      c.abort_reason.clear();
      c.key_hidden = true;
    }
  }
  // Sessions name processes: another uid's only for whoever administers.
  std::erase_if(stats.session_list,
                [&](const SessionStats& s) { return !registry_->access().MaySee(viewer, s.uid); });
  ToProto(stats, resp);
  return Done(ctx, Status::Ok());
}

grpc::ServerUnaryReactor* CollectiveServiceImpl::Drain(grpc::CallbackServerContext* ctx, const v1::DrainRequest*,
                                                       v1::DrainResponse*) {
  ipc::PeerCredentials caller;
  if (Status c = Caller(ctx, &caller); !c.ok()) return Done(ctx, c);
  if (!registry_->access().IsAdmin(caller)) {
    return Done(ctx, Status::PermissionDenied("Drain needs root, the daemon's uid or --admin-group; uid " +
                                              std::to_string(caller.uid) + " is none of them"));
  }
  spdlog::warn("drain requested by uid {} pid {}: refusing new sessions, buffers, communicators and submits",
               caller.uid, caller.pid);
  registry_->SetDraining();
  if (on_drain_) on_drain_();
  return Done(ctx, Status::Ok());
}

grpc::ServerUnaryReactor* CollectiveServiceImpl::GetCluster(grpc::CallbackServerContext* ctx,
                                                            const v1::GetClusterRequest*,
                                                            v1::GetClusterResponse* resp) {
  resp->set_mode(cluster_mode_);
  if (membership_ == nullptr) {
    auto* n = resp->add_nodes();
    n->set_host("");
    n->set_pid(static_cast<int32_t>(getpid()));
    n->set_state(cluster::NodeStateName(cluster::NodeState::kAlive));
    n->set_last_heartbeat_ms_ago(-1);
    return Done(ctx, Status::Ok());
  }
  resp->set_self(membership_->self());
  const int64_t now = ring::NowNs();
  for (const cluster::NodeStatus& s : membership_->Nodes()) {
    auto* n = resp->add_nodes();
    n->set_node_id(s.info.node_id);
    n->set_host(s.info.host);
    n->set_epoch(s.info.epoch);
    n->set_pid(s.info.pid);
    n->set_state(cluster::NodeStateName(s.state));
    n->set_last_heartbeat_ms_ago(s.last_heartbeat_ns == 0 ? -1 : (now - s.last_heartbeat_ns) / 1000000);
    n->set_lost_reason(s.lost_reason);
  }
  if (transport_ != nullptr) resp->set_refused_messages(transport_->refused());
  return Done(ctx, Status::Ok());
}

}  // namespace collectived::daemon
