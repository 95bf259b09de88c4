// Communicators forming and ending: joins (with refusals and timeouts), the
// GPU communicator's device memory, members leaving, destruction.
#include "daemon/registry.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <map>

#include "daemon/registry_state.h"
#include "ring/matcher.h"
#include "ring/wait.h"

namespace collectived::daemon {

// Resolves buffers for the daemon's executors of one communicator.
class CommResolver : public host::BufferResolver {
 public:
  CommResolver(Registry* registry, uint64_t comm_id) : registry_(registry), comm_id_(comm_id) {}
  Status Resolve(uint32_t rank, uint64_t buffer_id, uint64_t offset, uint64_t bytes, void** ptr) override {
    return registry_->ResolveBuffer(comm_id_, rank, buffer_id, offset, bytes, ptr);
  }
  bool ResolvesPeers() const override { return true; }

 private:
  Registry* registry_;
  uint64_t comm_id_;
};

namespace {

// Why a member that called DestroyCommunicator left: the one clean way to leave.
constexpr const char* kDestroyedReason = "destroyed the communicator";

// Stops an executor and then drops what it used, outside the registry lock
// (an executor may be waiting for that lock inside ResolveBuffer).
std::function<void()> StopLater(std::unique_ptr<host::RankExecutor> ex, std::shared_ptr<ipc::ShmWindow> window,
                                std::shared_ptr<CommResolver> resolver,
                                std::shared_ptr<cluster::SpanningExchange> exchange) {
  auto holder = std::make_shared<std::unique_ptr<host::RankExecutor>>(std::move(ex));
  // The exchange too: a stopping executor of a communicator across nodes
  // wakes its exchange word, and the communicator may be gone by then.
  return [holder, window, resolver, exchange] {
    if (*holder) (*holder)->Stop();
    holder->reset();
  };
}

// The request's own fields, before any state is looked at.
Status ValidateJoin(const JoinRequest& req) {
  if (req.key.empty()) return Status::InvalidArgument("communicator key is empty");
  if (req.world_size == 0 || req.world_size > ring::kMaxRanks) {
    return Status::InvalidArgument("world_size " + std::to_string(req.world_size) + " outside [1, " +
                                   std::to_string(ring::kMaxRanks) + "]");
  }
  if (req.rank >= req.world_size) {
    return Status::InvalidArgument("rank " + std::to_string(req.rank) + " outside world of " +
                                   std::to_string(req.world_size));
  }
  if (req.mode != ExecutionMode::kDefault && req.mode != ExecutionMode::kClient &&
      req.mode != ExecutionMode::kDaemon) {
    return Status::InvalidArgument("unknown execution mode " + std::to_string(static_cast<uint32_t>(req.mode)));
  }
  return Status::Ok();
}

// A GPU member (one naming its device) needs the cuda backend and fits its
// limits; a host member asks for no heap.
Status ValidateDevice(const JoinRequest& req, const DaemonConfig& config) {
  if (req.device_uuid.empty()) {
    if (req.gpu_heap_bytes != 0) {
      return Status::InvalidArgument("gpu_heap_bytes needs a GPU communicator (set the device)");
    }
    return Status::Ok();
  }
  if (config.backend != Backend::kCuda) {
    return Status::FailedPrecondition(std::string("this collectived serves the '") + BackendName(config.backend) +
                                      "' backend; GPU communicators need a daemon on the cuda backend");
  }
  if (req.world_size > kMaxGpuRanks) {
    return Status::InvalidArgument("world_size " + std::to_string(req.world_size) + " above the GPU limit of " +
                                   std::to_string(kMaxGpuRanks));
  }
  if (req.gpu_heap_bytes > config.max_buffer_bytes) {
    return Status::ResourceExhausted("gpu_heap_bytes " + std::to_string(req.gpu_heap_bytes) +
                                     " above the daemon's budget of " + std::to_string(config.max_buffer_bytes));
  }
  return Status::Ok();
}

ExecutionMode ModeOf(const JoinRequest& req) {
  return req.mode == ExecutionMode::kDefault ? ExecutionMode::kClient : req.mode;
}

uint32_t OpTimeoutMsOf(const JoinRequest& req, const DaemonConfig& config) {
  return req.op_timeout_ms == 0 ? config.op_timeout_ms : req.op_timeout_ms;
}

// A later member must ask for the communicator the earlier ones formed.
Status CheckSameAsEarlierMembers(const Comm& comm, const JoinRequest& req, const DaemonConfig& config) {
  const ExecutionMode mode = ModeOf(req);
  const uint32_t timeout_ms = OpTimeoutMsOf(req, config);
  const bool gpu = !req.device_uuid.empty();
  if (comm.formed) {
    return Status::AlreadyExists("communicator '" + req.key + "' is already formed; use a new key");
  }
  if (comm.world_size != req.world_size) {
    return Status::InvalidArgument("world_size " + std::to_string(req.world_size) + " differs from " +
                                   std::to_string(comm.world_size) + " of earlier members of '" + req.key + "'");
  }
  if (comm.mode != mode) {
    return Status::InvalidArgument(std::string("execution mode ") + ExecutionModeName(mode) + " differs from " +
                                   ExecutionModeName(comm.mode) + " of earlier members");
  }
  if (comm.op_timeout_ms != timeout_ms) {
    return Status::InvalidArgument("op_timeout_ms " + std::to_string(timeout_ms) + " differs from " +
                                   std::to_string(comm.op_timeout_ms) + " of earlier members");
  }
  if (comm.members[req.rank] != 0) {
    return Status::AlreadyExists("rank " + std::to_string(req.rank) + " of '" + req.key + "' already joined");
  }
  if (comm.gpu != gpu) {
    return Status::InvalidArgument(std::string("this member is a ") + (gpu ? "GPU" : "host") +
                                   " rank, earlier members of '" + req.key + "' are " + (comm.gpu ? "GPU" : "host") +
                                   " ranks");
  }
  if (comm.gpu_heap_bytes != req.gpu_heap_bytes) {
    return Status::InvalidArgument("gpu_heap_bytes " + std::to_string(req.gpu_heap_bytes) + " differs from " +
                                   std::to_string(comm.gpu_heap_bytes) + " of earlier members");
  }
  return Status::Ok();
}

// The segment of communicator `comm_id`: sizes from the daemon's config, the
// op timeout its members agreed on, and the negative-control switches.
ring::SegmentParams SegmentParamsFromConfig(const DaemonConfig& config, uint64_t comm_id, uint32_t world_size,
                                            ExecutionMode mode, uint32_t op_timeout_ms, bool gpu) {
  ring::SegmentParams params;
  params.world_size = world_size;
  params.ring_depth = config.ring_depth;
  params.max_message_bytes = config.max_message_bytes;
  params.one_shot_max_bytes =
      gpu ? config.one_shot_max_bytes
          : ring::HostOneShotMaxBytes(config.one_shot_max_bytes, world_size, mode == ExecutionMode::kDaemon);
  params.op_timeout_ns = static_cast<uint64_t>(op_timeout_ms) * 1000000;
  params.mode = mode;
  params.comm_id = comm_id;
  params.unsafe_flags = (config.unsafe_skip_end_barrier ? ring::kUnsafeSkipEndBarrier : 0u) |
                        (config.unsafe_event_before_epilogue ? ring::kUnsafeEventBeforeEpilogue : 0u) |
                        (config.unsafe_size_dependent_slots ? ring::kUnsafeSizeDependentSlots : 0u);
  params.debug_delay_rank = config.debug_delay_rank;
  params.debug_delay_us = config.debug_delay_us;
  params.debug_delay_copyout_us = config.debug_delay_copyout_us;
  params.gpu_flags = (config.gpu_start_flag_release ? ring::kGpuStartFlagRelease : 0u) |
                     (config.gpu_system_end_fence ? ring::kGpuSystemEndFence : 0u) |
                     (config.gpu_static_two_shot ? ring::kGpuStaticTwoShot : 0u);
  return params;
}

// What every member is told once `comm` formed.
JoinResult MakeJoinResult(const Comm& comm) {
  JoinResult result;
  result.comm_id = comm.id;
  result.world_size = comm.global_world;
  result.window_id = comm.id;
  result.window_bytes = comm.window->size();
  result.mode = comm.mode;
  if (comm.gpu) {
    const GpuCommMemory& mem = *comm.gpu_memory;
    result.gpu = true;
    result.gpu_slot_bytes = mem.slot_bytes();
    result.gpu_heap_bytes = mem.heap_bytes();
    result.gpu_blocks = mem.blocks();
    for (uint32_t w = 0; w < mem.window_count(); ++w) {
      GpuWindowInfo info{comm.gpu_window_ids[w], mem.window_bytes(w), mem.window_device(w), mem.legacy_handle(w)};
      if (w == 0) {
        result.gpu_control = info;
      } else {
        result.gpu_ranks.push_back(info);
      }
    }
  }
  return result;
}

}  // namespace

void Registry::Join(const JoinRequest& req, JoinDone done) {
  Deferred after;
  Status error;
  {
    MutexLock lock(&mu_);
    error = JoinLocked(req, &done, &after);
  }
  for (auto& f : after) f();  // a refusal (cannot_join) withdraws the waiting members too
  if (!error.ok()) done(error, JoinResult{});
}

Status Registry::CheckJoinCapsLocked(const Session& session) {
  if (session.memberships.size() >= config_.max_communicators_per_session) {
    return Status::ResourceExhausted("--max-communicators-per-session (" +
                                     std::to_string(config_.max_communicators_per_session) + ") reached");
  }
  size_t pending = 0;  // counted, not tracked: never out of step with the communicators
  for (const auto& [id, c] : comms_) {
    if (!c->formed) pending += c->joined;
  }
  if (pending >= config_.max_pending_joins) {
    return Status::ResourceExhausted("--max-pending-joins (" + std::to_string(config_.max_pending_joins) +
                                     ") reached");
  }
  return Status::Ok();
}

Status Registry::CheckKeyOwnerLocked(const std::string& key, const ipc::PeerCredentials& joiner) {
  const ipc::PeerCredentials* owner = nullptr;
  if (auto kit = comm_by_key_.find(key); kit != comm_by_key_.end()) owner = &comms_.at(kit->second)->owner;
  if (auto rit = refused_keys_.find(key); owner == nullptr && rit != refused_keys_.end() &&
                                          rit->second.until_ns > ring::NowNs()) {
    owner = &rit->second.owner;
  }
  if (owner == nullptr || access_.MayShare(*owner, joiner)) return Status::Ok();
  // The joiner named the key, so naming it back tells it nothing new; the
  // other uid's communicator is not touched.
  return Status::PermissionDenied("key '" + key + "' is taken by a communicator of uid " +
                                  std::to_string(owner->uid) + "; uid " + std::to_string(joiner.uid) +
                                  " may not join it (no --shared-group holds both)");
}

Status Registry::JoinLocked(const JoinRequest& req, JoinDone* done, Deferred* after) {
  COLLECTIVED_RETURN_IF_ERROR(CheckServing());
  auto sit = sessions_.find(req.session_id);
  if (sit == sessions_.end()) return Status::NotFound("session " + std::to_string(req.session_id) + " not found");
  COLLECTIVED_RETURN_IF_ERROR(ValidateJoin(req));
  COLLECTIVED_RETURN_IF_ERROR(CheckKeyOwnerLocked(req.key, sit->second->owner));
  COLLECTIVED_RETURN_IF_ERROR(ApplyRefusalLocked(req, after));
  COLLECTIVED_RETURN_IF_ERROR(ValidateDevice(req, config_));
  COLLECTIVED_RETURN_IF_ERROR(CheckJoinCapsLocked(*sit->second));
  Comm* comm = nullptr;
  COLLECTIVED_RETURN_IF_ERROR(FindOrCreateCommLocked(req, &comm));
  comm->members[req.rank] = req.session_id;
  comm->device_uuids[req.rank] = req.device_uuid;
  comm->pending[req.rank] = std::move(*done);
  const uint32_t join_ms = req.join_timeout_ms != 0 && req.join_timeout_ms < config_.join_timeout_ms
                               ? req.join_timeout_ms : config_.join_timeout_ms;
  comm->join_deadline_ns[req.rank] = ring::NowNs() + static_cast<int64_t>(join_ms) * 1000000;
  comm->joined++;
  comm->client_mode_asked = comm->client_mode_asked || req.mode == ExecutionMode::kClient;
  sit->second->memberships.insert({comm->id, req.rank});
  if (comm->joined == comm->world_size) {
    FormLocked(*comm, after);
  } else if (ClusterActiveLocked()) {
    // The other ranks may be joining on other nodes (spanning.cc).
    const std::string key = comm->key;
    AnnounceLocked(*comm);
    TryDecideLocked(key, after);
  }
  return Status::Ok();  // answered when the last member joins (FormLocked), or on expiry
}

Status Registry::ApplyRefusalLocked(const JoinRequest& req, Deferred* after) {
  const int64_t now_ns = ring::NowNs();
  if (!req.cannot_join.empty()) {
    // Fail the members already waiting, and refuse later ones for a join timeout.
    const std::string why = "rank " + std::to_string(req.rank) + " of '" + req.key +
                            "' cannot join: " + req.cannot_join.substr(0, 1000);
    Refusal& refusal = refused_keys_[req.key];
    if (refusal.until_ns <= now_ns) refusal = Refusal{};
    if (refusal.why.empty()) {  // the first reason and world size stand
      refusal.why = why;
      refusal.owner = sessions_.at(req.session_id)->owner;
      refusal.world_size = req.world_size;
    }
    refusal.until_ns = now_ns + static_cast<int64_t>(config_.join_timeout_ms) * 1000000;
    if (req.rank < refusal.world_size) refusal.told.insert(req.rank);
    auto kit = comm_by_key_.find(req.key);
    if (kit != comm_by_key_.end() && !comms_.at(kit->second)->formed &&
        comms_.at(kit->second)->world_size == refusal.world_size) {
      const uint64_t id = kit->second;
      const uint32_t world = comms_.at(id)->world_size;
      for (uint32_t r = 0; r < world; ++r) {
        auto cit = comms_.find(id);
        if (cit == comms_.end()) break;
        if (cit->second->members[r] == 0) continue;
        refusal.told.insert(r);
        WithdrawJoinLocked(*cit->second, r, Status::FailedPrecondition(refusal.why), after);
      }
    }
    spdlog::warn("{}", why);
    const std::string answer = refusal.why;
    if (refusal.told.size() >= refusal.world_size) refused_keys_.erase(req.key);
    return Status::FailedPrecondition(answer);
  }
  auto rit = refused_keys_.find(req.key);
  if (rit == refused_keys_.end()) return Status::Ok();
  Refusal& refusal = rit->second;
  if (refusal.until_ns <= now_ns) {
    refused_keys_.erase(rit);
    return Status::Ok();
  }
  // A member of another world size is misconfigured anyway: refused too, but
  // it does not count toward freeing the key.
  if (req.world_size == refusal.world_size) refusal.told.insert(req.rank);
  const std::string answer = refusal.why;
  if (refusal.told.size() >= refusal.world_size) refused_keys_.erase(rit);
  return Status::FailedPrecondition(answer);
}

Status Registry::FindOrCreateCommLocked(const JoinRequest& req, Comm** out) {
  auto kit = comm_by_key_.find(req.key);
  if (kit != comm_by_key_.end()) {
    Comm* comm = comms_.at(kit->second).get();
    COLLECTIVED_RETURN_IF_ERROR(CheckSameAsEarlierMembers(*comm, req, config_));
    *out = comm;
    return Status::Ok();
  }
  if (comms_.size() >= config_.max_communicators) {
    return Status::ResourceExhausted("--max-communicators (" + std::to_string(config_.max_communicators) +
                                     ") reached");
  }
  const ExecutionMode mode = ModeOf(req);
  const uint32_t timeout_ms = OpTimeoutMsOf(req, config_);
  auto c = std::make_unique<Comm>();
  c->id = next_id_++;
  c->key = req.key;
  c->owner = sessions_.at(req.session_id)->owner;
  c->world_size = req.world_size;
  c->global_world = req.world_size;
  c->mode = mode;
  c->op_timeout_ms = timeout_ms;
  c->members.assign(req.world_size, 0);
  c->pending.resize(req.world_size);
  c->join_deadline_ns.assign(req.world_size, 0);
  c->gpu = !req.device_uuid.empty();
  c->device_uuids.assign(req.world_size, "");
  c->gpu_heap_bytes = req.gpu_heap_bytes;
  c->captured_plans.assign(req.world_size, 0);
  c->registrations_made.assign(req.world_size, 0);
  const ring::SegmentParams params = SegmentParamsFromConfig(config_, c->id, req.world_size, mode, timeout_ms, c->gpu);
  if (params.unsafe_flags != 0) {
    spdlog::critical("UNSAFE communicator {} '{}': flags {:#x} re-create seed bugs; results may be wrong", c->id,
                     req.key, params.unsafe_flags);
  }
  ring::SegmentLayout layout;
  COLLECTIVED_RETURN_IF_ERROR(ring::SegmentLayout::Compute(params, &layout));
  std::unique_ptr<ipc::ShmWindow> window;
  COLLECTIVED_RETURN_IF_ERROR(
      ipc::ShmWindow::Create("collectived-comm-" + std::to_string(c->id), layout.total_bytes, &window));
  c->window = std::move(window);
  COLLECTIVED_RETURN_IF_ERROR(ring::CommSegment::Initialize(c->window->data(), c->window->size(), params, &c->seg));
  *out = c.get();
  comm_by_key_[req.key] = c->id;
  comms_[c->id] = std::move(c);
  return Status::Ok();
}

void Registry::FormLocked(Comm& comm, Deferred* after) {
  if (comm.gpu) {
    Status formed = FormGpuLocked(comm);
    if (!formed.ok()) {
      // Every member gets the reason; the last one to leave drops the communicator.
      const uint64_t id = comm.id;
      const uint32_t world = comm.world_size;
      for (uint32_t r = 0; r < world; ++r) {
        auto cit = comms_.find(id);
        if (cit == comms_.end()) break;
        if (cit->second->members[r] != 0) WithdrawJoinLocked(*cit->second, r, formed, after);
      }
      return;  // answered through the withdrawn joins
    }
  }
  comm.formed = true;
  comm.formed_members = comm.members;
  comm_by_key_.erase(comm.key);  // the key may be used again for a new communicator
  if (comm.announced && !comm.exchange) {
    comm.announced = false;
    AnnounceLocked(comm);  // every rank joined here after all: other nodes forget the key
  }
  if (comm.mode == ExecutionMode::kDaemon && !comm.gpu) {  // GPU: the GpuExecutor owns the rings
    comm.resolver = std::make_shared<CommResolver>(this, comm.id);
    for (uint32_t r = 0; r < comm.world_size; ++r) {
      comm.executors.push_back(std::make_unique<host::RankExecutor>(
          comm.seg, r, comm.resolver.get(), comm.exchange.get(), /*caller_runs=*/false, config_.host_lead_max_bytes));
      comm.executors.back()->Start();
    }
  }
  JoinResult result = MakeJoinResult(comm);
  for (uint32_t r = 0; r < comm.world_size; ++r) {
    result.segment_rank = r;
    after->push_back([d = std::move(comm.pending[r]), result] { d(Status::Ok(), result); });
  }
  comm.pending.assign(comm.world_size, nullptr);
  if (comm.exchange) {
    spdlog::info("communicator {} '{}' formed across {} nodes: {} of {} ranks here, daemon-executed (tag {:#x})",
                 comm.id, comm.key, comm.exchange->plan().nodes.size(), comm.world_size, comm.global_world,
                 comm.exchange->plan().comm_tag);
  } else if (!comm.executors.empty() && comm.world_size > 1 && config_.host_lead_max_bytes > 0) {
    spdlog::info("communicator {} '{}' formed: {} ranks, daemon-executed, ops of up to {} output bytes (all ranks) "
                 "led by rank 0's executor",
                 comm.id, comm.key, comm.world_size, config_.host_lead_max_bytes);
  } else {
    spdlog::info("communicator {} '{}' formed: {} ranks, {}-executed", comm.id, comm.key, comm.world_size,
                 ExecutionModeName(comm.mode));
  }
}

Status Registry::FormGpuLocked(Comm& comm) {
  // The other live GPU communicators: where processes share a GPU, the new
  // one's blocks leave room for theirs (daemon/gpu_blocks.h).
  std::vector<LiveGpuCommunicator> live;
  for (const auto& [id, other] : comms_) {
    // An aborted communicator runs no more ops: its kernels have given up.
    if (other.get() == &comm || !other->gpu_memory || other->seg.aborted()) continue;
    live.push_back({other->device_uuids, other->gpu_memory->blocks()});
  }
  std::map<std::string, GpuDeviceLoad> load = GpuLoadOf(comm.device_uuids, live);
  const uint32_t beside = GpuRanksBeside(load);
  std::unique_ptr<GpuCommMemory> mem;
  Status s = GpuCommMemory::Create(comm.device_uuids, config_.max_message_bytes, comm.gpu_heap_bytes,
                                   config_.gpu_memory_export, config_.gpu_max_blocks_per_rank, std::move(load), &mem);
  if (!s.ok()) {
    spdlog::error("GPU communicator {} '{}': device memory not allocated: {}", comm.id, comm.key, s.ToString());
    return s;
  }
  comm.gpu_memory = std::move(mem);
  spdlog::info("GPU communicator {} '{}': {} blocks per rank's kernel{}", comm.id, comm.key, comm.gpu_memory->blocks(),
               beside == 0 ? "" : ", beside " + std::to_string(beside) + " ranks of other live GPU communicators");
  if (!comm.gpu_memory->crowding().empty()) {
    spdlog::warn("GPU communicator {} '{}': with the live ones it could need more blocks at once than its GPUs hold "
                 "({}), if they run ops at the same time; then, under MPS, one's ops may wait for a peer until "
                 "their deadline: keep their ops apart, or lower --gpu-max-blocks-per-rank (docs/operating.md, "
                 "\"Several communicators on one GPU\")",
                 comm.id, comm.key, comm.gpu_memory->crowding());
  }
  if (comm.gpu_memory->legacy_ipc()) {
    spdlog::info("GPU communicator {} '{}': memory shared by legacy cudaIpc handles (held until every member "
                 "session ends)", comm.id, comm.key);
  }
  if (comm.mode == ExecutionMode::kDaemon) {
    std::unique_ptr<GpuExecutor> ex;
    GpuExecutor::Paths paths;
    paths.copy_engine_gather = config_.gpu_gather_path == GpuPath::kCopyEngine;
    paths.copy_engine_reduce = config_.gpu_reduce_path == GpuPath::kCopyEngine;
    paths.scratch_bytes = config_.gpu_copy_engine_scratch_bytes;
    s = GpuExecutor::Start(comm.seg, comm.gpu_memory, paths, comm.exchange.get(), &ex);
    if (!s.ok()) {
      spdlog::error("GPU communicator {} '{}': daemon executor not started: {}", comm.id, comm.key, s.ToString());
      comm.gpu_memory.reset();
      return s;
    }
    comm.gpu_executor = std::move(ex);
  }
  for (uint32_t w = 0; w < comm.gpu_memory->window_count(); ++w) {
    const uint64_t id = next_id_++;
    comm.gpu_window_ids.push_back(id);
    gpu_windows_[id] = {comm.id, w};
  }
  return Status::Ok();
}

void Registry::WithdrawJoinLocked(Comm& comm, uint32_t rank, const Status& status, Deferred* after) {
  if (comm.pending[rank]) {
    after->push_back([d = std::move(comm.pending[rank]), status] { d(status, JoinResult{}); });
    comm.pending[rank] = nullptr;
  }
  LeaveLocked(comm, rank, status.message(), after);  // may drop `comm` (the last member)
}

void Registry::CancelPendingJoins(const std::string& why) {
  Deferred after;
  {
    MutexLock lock(&mu_);
    std::vector<std::pair<uint64_t, uint32_t>> pending;
    for (auto& [id, c] : comms_) {
      if (c->formed) continue;
      for (uint32_t r = 0; r < c->world_size; ++r) {
        if (c->pending[r]) pending.push_back({id, r});
      }
    }
    for (const auto& [id, r] : pending) {
      auto cit = comms_.find(id);
      if (cit != comms_.end()) WithdrawJoinLocked(*cit->second, r, Status::Unavailable(why), &after);
    }
  }
  for (auto& f : after) f();
}

void Registry::LeaveLocked(Comm& comm, uint32_t rank, const std::string& why, Deferred* after) {
  const uint64_t session_id = comm.members[rank];
  comm.members[rank] = 0;
  auto sit = sessions_.find(session_id);
  if (sit != sessions_.end()) sit->second->memberships.erase({comm.id, rank});
  if (!comm.formed) {
    // Still forming: withdraw this rank's join.
    if (comm.pending[rank]) {
      after->push_back([d = std::move(comm.pending[rank]), why] {
        d(Status(StatusCode::kCancelled, "join withdrawn: " + why), JoinResult{});
      });
      comm.pending[rank] = nullptr;
    }
    comm.joined--;
    if (comm.announced) AnnounceLocked(comm);  // the others learn this rank is gone
  } else {
    // Peers that still post ops would wait for this rank forever: end them now.
    if (why != kDestroyedReason) {
      comm.left_uncleanly = true;
    } else if (!comm.seg.aborted()) {
      comm.aborted_by_destroy = true;
    }
    // Across nodes a member is named by its global rank.
    const uint32_t named = comm.exchange ? comm.exchange->global_rank(rank) : rank;
    const std::string reason = "rank " + std::to_string(named) + " left: " + why;
    // A member that died (not one that destroyed the communicator when done),
    // or one leaving a communicator aborted here before (a client's Abort,
    // an op that failed here): the other nodes' ranks would otherwise wait
    // out their op deadline. A clean leave tells nobody (the others leave
    // too); the abort below only releases this node's ranks.
    const bool aborted_before = comm.seg.aborted();
    if (comm.exchange && !comm.peers_told && (why != kDestroyedReason || aborted_before)) {
      TellSpannedNodesLocked(comm, aborted_before ? comm.seg.AbortStatus() : Status::Aborted(reason));
    }
    comm.peers_told = true;
    comm.seg.Abort(StatusCode::kAborted, reason.c_str(),
                   why == kDestroyedReason ? ring::CommSegment::AbortCause::kCleanLeave
                                           : ring::CommSegment::AbortCause::kFault);
    if (comm.exchange) ring::WakeWaiters(comm.exchange->exchange_done());  // ranks waiting for rank 0's exchange
    FailPendingRegistrationsLocked(comm, Status::Aborted(reason), false, 0, after);
    if (comm.gpu_memory) {  // GPU kernels poll the abort word in device memory
      after->push_back([mem = comm.gpu_memory] {
        Status s = mem->SetAbort();
        if (!s.ok()) spdlog::error("could not set a GPU communicator's abort word: {}", s.ToString());
      });
    }
    if (!comm.executors.empty() && comm.executors[rank]) {
      after->push_back(StopLater(std::move(comm.executors[rank]), comm.window, comm.resolver, comm.exchange));
    }
  }
  bool empty = true;
  for (uint64_t m : comm.members) empty = empty && m == 0;
  if (!empty) return;
  // Last member gone: drop the communicator once its executors stopped.
  for (auto& ex : comm.executors) {
    if (ex) after->push_back(StopLater(std::move(ex), comm.window, comm.resolver, comm.exchange));
  }
  if (!comm.formed) comm_by_key_.erase(comm.key);
  if (comm.formed) {
    CommStats closed = CommStatsOf(comm);
    closed.closed = true;
    if (comm.aborted_by_destroy && !comm.left_uncleanly && comm.seg.aborted_by_clean_leave()) {
      closed.aborted = false;
      closed.abort_reason.clear();
    }
    // A client-executed GPU communicator's failures are known only to its
    // clients' handles; that its kernels gave up is known here (CommStatsOf).
    spdlog::info("communicator {} '{}' closed: {} ops completed, {} failed{}", comm.id, comm.key, closed.completed,
                 closed.failed, closed.aborted ? "; aborted: " + closed.abort_reason : "");
    RetireCountersLocked(comm, closed);
    recently_closed_.push_back(std::move(closed));
    if (recently_closed_.size() > 16) recently_closed_.pop_front();
  }
  for (uint64_t w : comm.gpu_window_ids) gpu_windows_.erase(w);  // members keep their own mappings
  if (comm.gpu_memory && comm.gpu_memory->legacy_ipc()) {
    // cudaIpc mappings do not keep the memory alive: it stays until every
    // member session that may still have it open has ended.
    for (uint64_t session : comm.formed_members) {
      auto sit = sessions_.find(session);
      if (sit != sessions_.end()) sit->second->held_gpu_memory.push_back(comm.gpu_memory);
    }
  }
  for (const auto& [id, g] : comm.registrations) {
    for (uint64_t w : g.window_ids) registered_windows_.erase(w);
  }
  if (comm.gpu_executor) {
    spdlog::info("communicator {}: daemon-executed GPU ops {}, mean handoff {:.1f} us (last rank ready to launch)",
                 comm.id, comm.gpu_executor->ops(), comm.gpu_executor->handoff_us_mean());
    after->push_back([ex = std::move(comm.gpu_executor)] { ex->Stop(); });
  }
  // A failure of it from another node may still come: it must not touch a
  // later try of the key forming here (spanning.cc, OnClusterMessage).
  if (comm.exchange) ended_spanning_[{comm.key, comm.exchange->plan().comm_tag}] = ring::NowNs();
  auto node = comms_.extract(comm.id);  // `comm` dies with `node` below
  auto holder = std::make_shared<std::unique_ptr<Comm>>(std::move(node.mapped()));
  after->push_back([holder] { holder->reset(); });
}

Status Registry::DestroyCommunicator(uint64_t session_id, uint64_t comm_id, uint32_t rank) {
  Deferred after;
  Status s;
  {
    MutexLock lock(&mu_);
    Comm* comm = nullptr;
    s = MemberLocked(session_id, comm_id, rank, &comm);
    if (s.ok()) LeaveLocked(*comm, rank, kDestroyedReason, &after);
  }
  for (auto& f : after) f();
  return s;
}

}  // namespace collectived::daemon
