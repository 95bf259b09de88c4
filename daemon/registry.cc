#include "daemon/registry.h"

#include <spdlog/spdlog.h>
#include <unistd.h>

#include <atomic>
#include <random>
#include <set>

#include "daemon/gpu_comm_memory.h"
#include "daemon/gpu_executor.h"
#include "ring/matcher.h"
#include "ring/op_ring.h"
#include "ring/wait.h"

namespace collectived::daemon {

struct BufferRecord {
  std::shared_ptr<ipc::ShmWindow> window;
  uint64_t bytes;
};

// An fd the daemon holds; closed when the last holder lets go.
using SharedFd = std::shared_ptr<int>;
static SharedFd OwnFd(int fd) {
  return SharedFd(new int(fd), [](int* p) {
    if (*p >= 0) close(*p);
    delete p;
  });
}

// Deposited fds a session may hold unclaimed: each is a reference to GPU memory.
constexpr size_t kMaxDepositsPerSession = 64;

// The k-th registration of every rank of a GPU communicator: one buffer id.
struct GpuRegistration {
  std::vector<SharedFd> fds;  // per rank: its allocation, null until it registers
  std::vector<uint64_t> allocation_bytes, offsets, bytes, window_ids;
  std::vector<GpuRegisterDone> pending;  // per rank, until every rank registered
  std::vector<bool> released;
  uint32_t arrived = 0;
  bool formed = false;
  int64_t deadline_ns = 0;
};

struct Registry::Session {
  uint64_t id = 0;
  uint64_t token = 0;
  std::string name;
  uint32_t pid = 0;
  bool bound = false;  // its fd-socket connection is open
  int64_t attached_ns = 0;
  std::map<uint64_t, BufferRecord> buffers;
  std::set<std::pair<uint64_t, uint32_t>> memberships;  // (comm id, rank)
  std::map<uint64_t, SharedFd> deposits;  // fds sent for a registration not yet made
  // Legacy-IPC memory of communicators this session was a member of: freed
  // only when every such session ended, since its process may still have the
  // handles open (freeing it under a mapping is undefined behaviour).
  std::vector<std::shared_ptr<GpuCommMemory>> held_gpu_memory;
};

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

struct Registry::Comm {
  uint64_t id = 0;
  std::string key;
  uint32_t world_size = 0;
  ExecutionMode mode = ExecutionMode::kClient;
  uint32_t op_timeout_ms = 0;
  std::shared_ptr<ipc::ShmWindow> window;
  ring::CommSegment seg;
  std::vector<uint64_t> members;  // session per rank, 0 = none
  std::vector<JoinDone> pending;  // per rank, until formed
  std::vector<int64_t> join_deadline_ns;  // per rank: when its join gives up
  uint32_t joined = 0;
  bool formed = false;
  std::shared_ptr<CommResolver> resolver;  // shared: stopping executors outlive the Comm
  std::vector<std::unique_ptr<host::RankExecutor>> executors;  // daemon-executed only
  // GPU communicators: every rank's device, the heap size, and (once formed) the device memory.
  bool gpu = false;
  std::vector<std::string> device_uuids;
  uint64_t gpu_heap_bytes = 0;
  std::shared_ptr<GpuCommMemory> gpu_memory;
  std::vector<uint64_t> gpu_window_ids;  // index w of gpu_memory -> window id
  std::shared_ptr<GpuExecutor> gpu_executor;  // daemon-executed GPU communicators
  std::vector<uint64_t> captured_plans;        // per rank: ops registered at capture time
  std::vector<uint64_t> registrations_made;    // per rank: buffers it registered so far
  std::vector<uint64_t> formed_members;        // the session of each rank when it formed
  std::map<uint64_t, GpuRegistration> registrations;  // by buffer id (k-th registration: id k)
};

namespace {

uint64_t RandomToken() {
  std::random_device rd;
  return (static_cast<uint64_t>(rd()) << 32) ^ rd();
}

// Stops an executor and then drops what it used, outside the registry lock
// (an executor may be waiting for that lock inside ResolveBuffer).
std::function<void()> StopLater(std::unique_ptr<host::RankExecutor> ex, std::shared_ptr<ipc::ShmWindow> window,
                                std::shared_ptr<CommResolver> resolver) {
  auto holder = std::make_shared<std::unique_ptr<host::RankExecutor>>(std::move(ex));
  return [holder, window, resolver] {
    if (*holder) (*holder)->Stop();
    holder->reset();
  };
}

}  // namespace

Registry::Registry(const DaemonConfig& config) : config_(config) {}

Registry::~Registry() {
  std::vector<uint64_t> ids;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (auto& [id, s] : sessions_) ids.push_back(id);
  }
  for (uint64_t id : ids) CleanupSession(id, "daemon shutting down");
}

Status Registry::CheckServing() const {
  if (draining_.load()) return Status::Unavailable("collectived is draining; no new work is accepted");
  return Status::Ok();
}

size_t Registry::session_count() {
  std::lock_guard<std::mutex> lock(mu_);
  return sessions_.size();
}

Status Registry::Attach(const std::string& name, uint32_t pid, uint64_t* session_id, uint64_t* token) {
  COLLECTIVED_RETURN_IF_ERROR(CheckServing());
  std::lock_guard<std::mutex> lock(mu_);
  auto s = std::make_unique<Session>();
  s->id = next_id_++;
  s->token = RandomToken();
  s->name = name;
  s->pid = pid;
  s->attached_ns = ring::NowNs();
  *session_id = s->id;
  *token = s->token;
  spdlog::info("session {} attached: '{}' pid {}", s->id, name, pid);
  sessions_[s->id] = std::move(s);
  return Status::Ok();
}

Status Registry::Detach(uint64_t session_id) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!sessions_.count(session_id)) return Status::NotFound("session " + std::to_string(session_id) + " not found");
  }
  CleanupSession(session_id, "detached");
  return Status::Ok();
}

Status Registry::BindConnection(uint64_t session_id, uint64_t token) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = sessions_.find(session_id);
  if (it == sessions_.end()) return Status::NotFound("session " + std::to_string(session_id) + " not found");
  if (it->second->token != token) return Status::PermissionDenied("wrong session token");
  if (it->second->bound) return Status::AlreadyExists("session already has an fd connection");
  it->second->bound = true;
  return Status::Ok();
}

void Registry::ConnectionClosed(uint64_t session_id) { CleanupSession(session_id, "client disconnected"); }

Status Registry::FetchWindow(uint64_t session_id, uint64_t window_id, WindowFd* out) {
  std::lock_guard<std::mutex> lock(mu_);
  auto sit = sessions_.find(session_id);
  if (sit == sessions_.end()) return Status::NotFound("session " + std::to_string(session_id) + " not found");
  Session& s = *sit->second;
  auto borrow = [out](std::shared_ptr<ipc::ShmWindow> w) {
    out->fd = w->fd();
    out->size = w->size();
    out->keep = std::move(w);
    return Status::Ok();
  };
  auto bit = s.buffers.find(window_id);
  if (bit != s.buffers.end()) return borrow(bit->second.window);
  auto is_member = [session_id](const Comm& c) {
    for (uint64_t m : c.members) {
      if (m == session_id) return true;
    }
    return false;
  };
  auto cit = comms_.find(window_id);
  if (cit != comms_.end() && is_member(*cit->second)) return borrow(cit->second->window);
  auto git = gpu_windows_.find(window_id);
  if (git != gpu_windows_.end()) {
    auto owner = comms_.find(git->second.first);
    if (owner != comms_.end() && is_member(*owner->second) && owner->second->gpu_memory) {
      const GpuCommMemory& mem = *owner->second->gpu_memory;
      COLLECTIVED_RETURN_IF_ERROR(mem.ExportFd(git->second.second, &out->fd));
      out->size = mem.window_bytes(git->second.second);
      out->close_after_send = true;
      return Status::Ok();
    }
  }
  auto rit = registered_windows_.find(window_id);
  if (rit != registered_windows_.end()) {
    auto owner = comms_.find(rit->second.comm_id);
    if (owner != comms_.end() && is_member(*owner->second)) {
      auto reg = owner->second->registrations.find(rit->second.buffer_id);
      if (reg != owner->second->registrations.end() && reg->second.fds[rit->second.rank]) {
        out->fd = *reg->second.fds[rit->second.rank];
        out->size = reg->second.allocation_bytes[rit->second.rank];
        out->keep = reg->second.fds[rit->second.rank];
        return Status::Ok();
      }
    }
  }
  return Status::NotFound("window " + std::to_string(window_id) + " is not one this session may map");
}

Status Registry::DepositFd(uint64_t session_id, int fd, uint64_t* deposit_id) {
  SharedFd owned = OwnFd(fd);  // closed on every refusal below
  std::lock_guard<std::mutex> lock(mu_);
  auto sit = sessions_.find(session_id);
  if (sit == sessions_.end()) return Status::NotFound("session " + std::to_string(session_id) + " not found");
  if (sit->second->deposits.size() >= kMaxDepositsPerSession) {
    return Status::ResourceExhausted("session holds " + std::to_string(kMaxDepositsPerSession) +
                                     " deposited fds no registration claimed");
  }
  *deposit_id = next_id_++;
  sit->second->deposits[*deposit_id] = std::move(owned);
  return Status::Ok();
}

void Registry::RegisterGpuBuffer(const GpuRegisterRequest& req, GpuRegisterDone done) {
  Deferred after;
  Status error = [&]() -> Status {
    std::lock_guard<std::mutex> lock(mu_);
    COLLECTIVED_RETURN_IF_ERROR(CheckServing());
    Comm* comm = nullptr;
    COLLECTIVED_RETURN_IF_ERROR(MemberLocked(req.session_id, req.comm_id, req.rank, &comm));
    if (!comm->gpu) return Status::FailedPrecondition("buffer registration needs a GPU communicator");
    if (comm->seg.aborted()) return comm->seg.AbortStatus();
    Session& s = *sessions_.at(req.session_id);
    auto dit = s.deposits.find(req.deposit_id);
    if (dit == s.deposits.end()) {
      return Status::NotFound("deposit " + std::to_string(req.deposit_id) +
                              " not found: send the allocation's fd over the fd socket first");
    }
    if (req.bytes == 0 || req.offset > req.allocation_bytes || req.bytes > req.allocation_bytes - req.offset) {
      return Status::InvalidArgument("buffer [" + std::to_string(req.offset) + ", +" + std::to_string(req.bytes) +
                                     ") is empty or outside its allocation of " +
                                     std::to_string(req.allocation_bytes) + " bytes");
    }
    const uint32_t world = comm->world_size, r = req.rank;
    const uint64_t id = ++comm->registrations_made[r];
    GpuRegistration& g = comm->registrations[id];
    if (g.fds.empty()) {
      g.fds.resize(world);
      g.allocation_bytes.assign(world, 0);
      g.offsets.assign(world, 0);
      g.bytes.assign(world, 0);
      g.window_ids.assign(world, 0);
      g.pending.resize(world);
      g.released.assign(world, false);
      g.deadline_ns = ring::NowNs() + static_cast<int64_t>(config_.join_timeout_ms) * 1000000;
    }
    g.fds[r] = std::move(dit->second);
    s.deposits.erase(dit);
    g.allocation_bytes[r] = req.allocation_bytes;
    g.offsets[r] = req.offset;
    g.bytes[r] = req.bytes;
    g.pending[r] = std::move(done);
    if (++g.arrived < world) return Status::Ok();  // answered when the last rank registers

    // Every rank registered buffer `id`: peers address each other's at the
    // same offsets, so the sizes must agree.
    Status formed;
    for (uint32_t k = 1; k < world && formed.ok(); ++k) {
      if (g.bytes[k] != g.bytes[0]) {
        formed = Status::InvalidArgument("ranks registered buffers of different sizes as registered buffer " +
                                         std::to_string(id) + ": rank 0 " + std::to_string(g.bytes[0]) +
                                         " bytes, rank " + std::to_string(k) + " " + std::to_string(g.bytes[k]));
      }
    }
    if (formed.ok() && comm->gpu_executor) {  // daemon-executed: the fused launch addresses them here
      std::vector<int> fds;
      for (const SharedFd& fd : g.fds) fds.push_back(*fd);
      formed = comm->gpu_executor->AddCallersBuffer(id, fds, g.allocation_bytes, g.offsets, g.bytes[0]);
    }
    GpuRegisterResult result;
    result.buffer_id = id;
    if (formed.ok()) {
      g.formed = true;
      for (uint32_t k = 0; k < world; ++k) {
        g.window_ids[k] = next_id_++;
        registered_windows_[g.window_ids[k]] = {comm->id, id, k};
        result.allocations.push_back({g.window_ids[k], g.allocation_bytes[k], comm->device_uuids[k], ""});
        result.offsets.push_back(g.offsets[k]);
      }
      spdlog::info("communicator {} '{}': registered buffer {} of {} bytes on every rank", comm->id, comm->key, id,
                   g.bytes[0]);
    }
    for (auto& d : g.pending) {
      after.push_back([d = std::move(d), formed, result] { d(formed, result); });
    }
    g.pending.assign(world, nullptr);
    if (!formed.ok()) comm->registrations.erase(id);
    return Status::Ok();
  }();
  for (auto& f : after) f();
  if (!error.ok()) done(error, GpuRegisterResult{});
}

Status Registry::DeregisterGpuBuffer(uint64_t session_id, uint64_t comm_id, uint32_t rank, uint64_t buffer_id) {
  std::lock_guard<std::mutex> lock(mu_);
  Comm* comm = nullptr;
  COLLECTIVED_RETURN_IF_ERROR(MemberLocked(session_id, comm_id, rank, &comm));
  auto it = comm->registrations.find(buffer_id);
  if (it == comm->registrations.end() || !it->second.formed || it->second.released[rank]) {
    return Status::NotFound("registered buffer " + std::to_string(buffer_id) + " is not registered by rank " +
                            std::to_string(rank));
  }
  GpuRegistration& g = it->second;
  g.released[rank] = true;
  for (bool r : g.released) {
    if (!r) return Status::Ok();
  }
  for (uint64_t w : g.window_ids) registered_windows_.erase(w);
  if (comm->gpu_executor) comm->gpu_executor->RemoveCallersBuffer(buffer_id);
  comm->registrations.erase(it);  // closes the fds: the ranks' own mappings keep the memory
  return Status::Ok();
}

void Registry::FailPendingRegistrationsLocked(Comm& comm, const Status& status, bool expired_only, int64_t now_ns,
                                              Deferred* after) {
  for (auto it = comm.registrations.begin(); it != comm.registrations.end();) {
    GpuRegistration& g = it->second;
    if (g.formed || (expired_only && now_ns < g.deadline_ns)) {
      ++it;
      continue;
    }
    Status why = status;
    if (expired_only) {
      std::string missing;
      for (uint32_t k = 0; k < comm.world_size; ++k) {
        if (!g.fds[k]) missing += (missing.empty() ? "" : ",") + std::to_string(k);
      }
      why = Status::DeadlineExceeded("registered buffer " + std::to_string(it->first) + " of '" + comm.key +
                                     "': ranks " + missing + " did not register theirs within the join timeout");
      spdlog::warn("{}", why.message());
    }
    for (auto& d : g.pending) {
      if (d) after->push_back([d = std::move(d), why] { d(why, GpuRegisterResult{}); });
    }
    it = comm.registrations.erase(it);
  }
}

Status Registry::AllocBuffer(uint64_t session_id, uint64_t bytes, BufferInfo* out) {
  COLLECTIVED_RETURN_IF_ERROR(CheckServing());
  if (bytes == 0) return Status::InvalidArgument("buffer of 0 bytes");
  std::lock_guard<std::mutex> lock(mu_);
  auto sit = sessions_.find(session_id);
  if (sit == sessions_.end()) return Status::NotFound("session " + std::to_string(session_id) + " not found");
  if (bytes > config_.max_buffer_bytes || buffer_bytes_ > config_.max_buffer_bytes - bytes) {
    return Status::ResourceExhausted("buffer of " + std::to_string(bytes) + " bytes exceeds the daemon's budget (" +
                                     std::to_string(buffer_bytes_) + " of " +
                                     std::to_string(config_.max_buffer_bytes) + " bytes in use)");
  }
  const uint64_t id = next_id_++;
  std::unique_ptr<ipc::ShmWindow> window;
  COLLECTIVED_RETURN_IF_ERROR(ipc::ShmWindow::Create("collectived-buffer-" + std::to_string(id), bytes, &window));
  buffer_bytes_ += bytes;
  out->buffer_id = id;
  out->window_id = id;  // one window per buffer
  out->offset = 0;
  out->bytes = bytes;
  out->window_bytes = window->size();
  sit->second->buffers[id] = BufferRecord{std::move(window), bytes};
  return Status::Ok();
}

bool Registry::BufferInUseLocked(uint64_t session_id, uint64_t buffer_id) {
  Session& s = *sessions_.at(session_id);
  for (const auto& [comm_id, rank] : s.memberships) {
    auto cit = comms_.find(comm_id);
    if (cit == comms_.end() || !cit->second->formed) continue;
    const ring::CommSegment& seg = cit->second->seg;
    const uint64_t done = seg.control(rank).completed.value.load(std::memory_order_acquire);
    const uint64_t posted = seg.control(rank).next_index.value.load(std::memory_order_acquire);
    for (uint64_t i = done; i < posted; ++i) {
      const ring::RingSlot& slot = seg.slot(rank, i);
      if (slot.ready_seq.load(std::memory_order_acquire) != i + 1) continue;
      if (slot.desc.send_buffer_id == buffer_id || slot.desc.recv_buffer_id == buffer_id) return true;
    }
  }
  return false;
}

Status Registry::FreeBuffer(uint64_t session_id, uint64_t buffer_id) {
  std::shared_ptr<ipc::ShmWindow> drop;  // unmapped after the lock
  std::lock_guard<std::mutex> lock(mu_);
  auto sit = sessions_.find(session_id);
  if (sit == sessions_.end()) return Status::NotFound("session " + std::to_string(session_id) + " not found");
  auto bit = sit->second->buffers.find(buffer_id);
  if (bit == sit->second->buffers.end()) {
    return Status::NotFound("buffer " + std::to_string(buffer_id) + " not found in this session");
  }
  if (BufferInUseLocked(session_id, buffer_id)) {
    return Status::FailedPrecondition("buffer " + std::to_string(buffer_id) +
                                      " is used by a posted op that has not completed");
  }
  buffer_bytes_ -= bit->second.bytes;
  drop = std::move(bit->second.window);
  sit->second->buffers.erase(bit);
  return Status::Ok();
}

Status Registry::ResolveBuffer(uint64_t comm_id, uint32_t rank, uint64_t buffer_id, uint64_t offset, uint64_t bytes,
                               void** ptr) {
  std::lock_guard<std::mutex> lock(mu_);
  auto cit = comms_.find(comm_id);
  if (cit == comms_.end() || rank >= cit->second->members.size() || cit->second->members[rank] == 0) {
    return Status::NotFound("rank " + std::to_string(rank) + " has left the communicator");
  }
  Session& s = *sessions_.at(cit->second->members[rank]);
  auto bit = s.buffers.find(buffer_id);
  if (bit == s.buffers.end()) {
    return Status::NotFound("buffer " + std::to_string(buffer_id) + " is not a buffer of rank " +
                            std::to_string(rank) + "'s session");
  }
  const uint64_t size = bit->second.bytes;
  if (offset > size || bytes > size - offset) {
    return Status::InvalidArgument("range [" + std::to_string(offset) + ", +" + std::to_string(bytes) +
                                   ") outside buffer " + std::to_string(buffer_id) + " of " + std::to_string(size) +
                                   " bytes");
  }
  *ptr = bit->second.window->data() + offset;
  return Status::Ok();
}

void Registry::Join(const JoinRequest& req, JoinDone done) {
  Deferred after;
  Status error;
  {
    std::lock_guard<std::mutex> lock(mu_);
    error = [&]() -> Status {
      COLLECTIVED_RETURN_IF_ERROR(CheckServing());
      auto sit = sessions_.find(req.session_id);
      if (sit == sessions_.end()) return Status::NotFound("session " + std::to_string(req.session_id) + " not found");
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
      const ExecutionMode mode = req.mode == ExecutionMode::kDefault ? ExecutionMode::kClient : req.mode;
      const int64_t now_ns = ring::NowNs();
      if (!req.cannot_join.empty()) {
        // Fail the members already waiting, and refuse later ones for a join timeout.
        const std::string why = "rank " + std::to_string(req.rank) + " of '" + req.key +
                                "' cannot join: " + req.cannot_join.substr(0, 1000);
        Refusal& refusal = refused_keys_[req.key];
        if (refusal.until_ns <= now_ns) refusal = Refusal{};
        if (refusal.why.empty()) {  // the first reason and world size stand
          refusal.why = why;
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
            WithdrawJoinLocked(*cit->second, r, Status::FailedPrecondition(refusal.why), &after);
          }
        }
        spdlog::warn("{}", why);
        const std::string answer = refusal.why;
        if (refusal.told.size() >= refusal.world_size) refused_keys_.erase(req.key);
        return Status::FailedPrecondition(answer);
      }
      if (auto rit = refused_keys_.find(req.key); rit != refused_keys_.end()) {
        Refusal& refusal = rit->second;
        if (refusal.until_ns <= now_ns) {
          refused_keys_.erase(rit);
        } else {
          // A member of another world size is misconfigured anyway: refused
          // too, but it does not count toward freeing the key.
          if (req.world_size == refusal.world_size) refusal.told.insert(req.rank);
          const std::string answer = refusal.why;
          if (refusal.told.size() >= refusal.world_size) refused_keys_.erase(rit);
          return Status::FailedPrecondition(answer);
        }
      }
      const bool gpu = !req.device_uuid.empty();
      if (gpu) {
        if (config_.backend != Backend::kCuda) {
          return Status::FailedPrecondition(std::string("this collectived serves the '") +
                                            BackendName(config_.backend) +
                                            "' backend; GPU communicators need a daemon on the cuda backend");
        }
        if (req.world_size > kMaxGpuRanks) {
          return Status::InvalidArgument("world_size " + std::to_string(req.world_size) +
                                         " above the GPU limit of " + std::to_string(kMaxGpuRanks));
        }
        if (req.gpu_heap_bytes > config_.max_buffer_bytes) {
          return Status::ResourceExhausted("gpu_heap_bytes " + std::to_string(req.gpu_heap_bytes) +
                                           " above the daemon's budget of " + std::to_string(config_.max_buffer_bytes));
        }
      } else if (req.gpu_heap_bytes != 0) {
        return Status::InvalidArgument("gpu_heap_bytes needs a GPU communicator (set the device)");
      }
      const uint32_t timeout_ms = req.op_timeout_ms == 0 ? config_.op_timeout_ms : req.op_timeout_ms;
      Comm* comm = nullptr;
      auto kit = comm_by_key_.find(req.key);
      if (kit == comm_by_key_.end()) {
        auto c = std::make_unique<Comm>();
        c->id = next_id_++;
        c->key = req.key;
        c->world_size = req.world_size;
        c->mode = mode;
        c->op_timeout_ms = timeout_ms;
        c->members.assign(req.world_size, 0);
        c->pending.resize(req.world_size);
        c->join_deadline_ns.assign(req.world_size, 0);
        c->gpu = gpu;
        c->device_uuids.assign(req.world_size, "");
        c->gpu_heap_bytes = req.gpu_heap_bytes;
        c->captured_plans.assign(req.world_size, 0);
        c->registrations_made.assign(req.world_size, 0);
        ring::SegmentParams params;
        params.world_size = req.world_size;
        params.ring_depth = config_.ring_depth;
        params.max_message_bytes = config_.max_message_bytes;
        params.one_shot_max_bytes = config_.one_shot_max_bytes;
        params.op_timeout_ns = static_cast<uint64_t>(timeout_ms) * 1000000;
        params.mode = mode;
        params.comm_id = c->id;
        params.unsafe_flags = (config_.unsafe_skip_end_barrier ? ring::kUnsafeSkipEndBarrier : 0u) |
                              (config_.unsafe_event_before_epilogue ? ring::kUnsafeEventBeforeEpilogue : 0u) |
                              (config_.unsafe_size_dependent_slots ? ring::kUnsafeSizeDependentSlots : 0u);
        params.debug_delay_rank = config_.debug_delay_rank;
        params.debug_delay_us = config_.debug_delay_us;
        params.debug_delay_copyout_us = config_.debug_delay_copyout_us;
        if (params.unsafe_flags != 0) {
          spdlog::critical("UNSAFE communicator {} '{}': flags {:#x} re-create seed bugs; results may be wrong",
                           c->id, req.key, params.unsafe_flags);
        }
        ring::SegmentLayout layout;
        COLLECTIVED_RETURN_IF_ERROR(ring::SegmentLayout::Compute(params, &layout));
        std::unique_ptr<ipc::ShmWindow> window;
        COLLECTIVED_RETURN_IF_ERROR(
            ipc::ShmWindow::Create("collectived-comm-" + std::to_string(c->id), layout.total_bytes, &window));
        c->window = std::move(window);
        COLLECTIVED_RETURN_IF_ERROR(
            ring::CommSegment::Initialize(c->window->data(), c->window->size(), params, &c->seg));
        comm = c.get();
        comm_by_key_[req.key] = c->id;
        comms_[c->id] = std::move(c);
      } else {
        comm = comms_.at(kit->second).get();
        if (comm->formed) {
          return Status::AlreadyExists("communicator '" + req.key + "' is already formed; use a new key");
        }
        if (comm->world_size != req.world_size) {
          return Status::InvalidArgument("world_size " + std::to_string(req.world_size) + " differs from " +
                                         std::to_string(comm->world_size) + " of earlier members of '" + req.key + "'");
        }
        if (comm->mode != mode) {
          return Status::InvalidArgument(std::string("execution mode ") + ExecutionModeName(mode) +
                                         " differs from " + ExecutionModeName(comm->mode) + " of earlier members");
        }
        if (comm->op_timeout_ms != timeout_ms) {
          return Status::InvalidArgument("op_timeout_ms " + std::to_string(timeout_ms) + " differs from " +
                                         std::to_string(comm->op_timeout_ms) + " of earlier members");
        }
        if (comm->members[req.rank] != 0) {
          return Status::AlreadyExists("rank " + std::to_string(req.rank) + " of '" + req.key + "' already joined");
        }
        if (comm->gpu != gpu) {
          return Status::InvalidArgument(std::string("this member is a ") + (gpu ? "GPU" : "host") +
                                         " rank, earlier members of '" + req.key + "' are " +
                                         (comm->gpu ? "GPU" : "host") + " ranks");
        }
        if (comm->gpu_heap_bytes != req.gpu_heap_bytes) {
          return Status::InvalidArgument("gpu_heap_bytes " + std::to_string(req.gpu_heap_bytes) + " differs from " +
                                         std::to_string(comm->gpu_heap_bytes) + " of earlier members");
        }
      }
      comm->members[req.rank] = req.session_id;
      comm->device_uuids[req.rank] = req.device_uuid;
      comm->pending[req.rank] = std::move(done);
      const uint32_t join_ms = req.join_timeout_ms != 0 && req.join_timeout_ms < config_.join_timeout_ms
                                   ? req.join_timeout_ms : config_.join_timeout_ms;
      comm->join_deadline_ns[req.rank] = ring::NowNs() + static_cast<int64_t>(join_ms) * 1000000;
      comm->joined++;
      sit->second->memberships.insert({comm->id, req.rank});
      if (comm->joined < comm->world_size) return Status::Ok();

      if (comm->gpu) {
        Status formed = FormGpuLocked(*comm);
        if (!formed.ok()) {
          // Every member gets the reason; the last one to leave drops the communicator.
          const uint64_t id = comm->id;
          for (uint32_t r = 0; r < req.world_size; ++r) {
            auto cit = comms_.find(id);
            if (cit == comms_.end()) break;
            if (cit->second->members[r] != 0) WithdrawJoinLocked(*cit->second, r, formed, &after);
          }
          return Status::Ok();  // answered through the withdrawn joins
        }
      }
      comm->formed = true;
      comm->formed_members = comm->members;
      comm_by_key_.erase(comm->key);  // the key may be used again for a new communicator
      if (comm->mode == ExecutionMode::kDaemon && !comm->gpu) {  // GPU: the GpuExecutor owns the rings
        comm->resolver = std::make_shared<CommResolver>(this, comm->id);
        for (uint32_t r = 0; r < comm->world_size; ++r) {
          comm->executors.push_back(std::make_unique<host::RankExecutor>(comm->seg, r, comm->resolver.get()));
          comm->executors.back()->Start();
        }
      }
      JoinResult result;
      result.comm_id = comm->id;
      result.window_id = comm->id;
      result.window_bytes = comm->window->size();
      result.mode = comm->mode;
      if (comm->gpu) {
        const GpuCommMemory& mem = *comm->gpu_memory;
        result.gpu = true;
        result.gpu_slot_bytes = mem.slot_bytes();
        result.gpu_heap_bytes = mem.heap_bytes();
        result.gpu_blocks = mem.blocks();
        for (uint32_t w = 0; w < mem.window_count(); ++w) {
          GpuWindowInfo info{comm->gpu_window_ids[w], mem.window_bytes(w), mem.window_device(w),
                             mem.legacy_handle(w)};
          if (w == 0) {
            result.gpu_control = info;
          } else {
            result.gpu_ranks.push_back(info);
          }
        }
      }
      for (auto& d : comm->pending) {
        after.push_back([d = std::move(d), result] { d(Status::Ok(), result); });
      }
      comm->pending.assign(comm->world_size, nullptr);
      spdlog::info("communicator {} '{}' formed: {} ranks, {}-executed", comm->id, comm->key, comm->world_size,
                   ExecutionModeName(comm->mode));
      return Status::Ok();
    }();
  }
  for (auto& f : after) f();  // a refusal (cannot_join) withdraws the waiting members too
  if (!error.ok()) done(error, JoinResult{});
}

Status Registry::FormGpuLocked(Comm& comm) {
  std::unique_ptr<GpuCommMemory> mem;
  Status s = GpuCommMemory::Create(comm.device_uuids, config_.max_message_bytes, comm.gpu_heap_bytes,
                                   config_.gpu_memory_export, &mem);
  if (!s.ok()) {
    spdlog::error("GPU communicator {} '{}': device memory not allocated: {}", comm.id, comm.key, s.ToString());
    return s;
  }
  comm.gpu_memory = std::move(mem);
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
    s = GpuExecutor::Start(comm.seg, comm.gpu_memory, paths, &ex);
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
    std::lock_guard<std::mutex> lock(mu_);
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
  } else {
    // Peers that still post ops would wait for this rank forever: end them now.
    const std::string reason = "rank " + std::to_string(rank) + " left: " + why;
    comm.seg.Abort(StatusCode::kAborted, reason.c_str());
    FailPendingRegistrationsLocked(comm, Status::Aborted(reason), false, 0, after);
    if (comm.gpu_memory) {  // GPU kernels poll the abort word in device memory
      after->push_back([mem = comm.gpu_memory] {
        Status s = mem->SetAbort();
        if (!s.ok()) spdlog::error("could not set a GPU communicator's abort word: {}", s.ToString());
      });
    }
    if (!comm.executors.empty() && comm.executors[rank]) {
      after->push_back(StopLater(std::move(comm.executors[rank]), comm.window, comm.resolver));
    }
  }
  bool empty = true;
  for (uint64_t m : comm.members) empty = empty && m == 0;
  if (!empty) return;
  // Last member gone: drop the communicator once its executors stopped.
  for (auto& ex : comm.executors) {
    if (ex) after->push_back(StopLater(std::move(ex), comm.window, comm.resolver));
  }
  if (!comm.formed) comm_by_key_.erase(comm.key);
  if (comm.formed) {
    CommStats closed = CommStatsOf(comm);
    closed.closed = true;
    spdlog::info("communicator {} '{}' closed: {} ops completed, {} failed", comm.id, comm.key, closed.completed,
                 closed.failed);
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
  auto node = comms_.extract(comm.id);  // `comm` dies with `node` below
  auto holder = std::make_shared<std::unique_ptr<Comm>>(std::move(node.mapped()));
  after->push_back([holder] { holder->reset(); });
}

Status Registry::MemberLocked(uint64_t session_id, uint64_t comm_id, uint32_t rank, Comm** comm) {
  if (!sessions_.count(session_id)) return Status::NotFound("session " + std::to_string(session_id) + " not found");
  auto cit = comms_.find(comm_id);
  if (cit == comms_.end()) return Status::NotFound("communicator " + std::to_string(comm_id) + " not found");
  Comm& c = *cit->second;
  if (rank >= c.members.size() || c.members[rank] != session_id) {
    return Status::PermissionDenied("session " + std::to_string(session_id) + " is not rank " +
                                    std::to_string(rank) + " of communicator " + std::to_string(comm_id));
  }
  if (!c.formed) return Status::FailedPrecondition("communicator " + std::to_string(comm_id) + " is still forming");
  *comm = &c;
  return Status::Ok();
}

Status Registry::DestroyCommunicator(uint64_t session_id, uint64_t comm_id, uint32_t rank) {
  Deferred after;
  Status s;
  {
    std::lock_guard<std::mutex> lock(mu_);
    Comm* comm = nullptr;
    s = MemberLocked(session_id, comm_id, rank, &comm);
    if (s.ok()) LeaveLocked(*comm, rank, "destroyed the communicator", &after);
  }
  for (auto& f : after) f();
  return s;
}

Status Registry::RegisterPlan(uint64_t session_id, uint64_t comm_id, uint32_t rank, const ring::OpDescriptor& desc,
                              uint64_t* plans) {
  std::lock_guard<std::mutex> lock(mu_);
  Comm* comm = nullptr;
  COLLECTIVED_RETURN_IF_ERROR(MemberLocked(session_id, comm_id, rank, &comm));
  // Sizes are checked when the op runs (heap ops may exceed the slot); here
  // the kind, type and reduction.
  COLLECTIVED_RETURN_IF_ERROR(ring::ValidateDescriptor(desc, UINT64_MAX));
  *plans = ++comm->captured_plans[rank];
  spdlog::debug("communicator {} rank {}: captured plan {} ({} x {})", comm_id, rank, *plans, desc.count,
                DataTypeName(desc.dtype));
  return Status::Ok();
}

Status Registry::Submit(uint64_t session_id, uint64_t comm_id, uint32_t rank, ring::OpDescriptor desc,
                        uint64_t* index) {
  COLLECTIVED_RETURN_IF_ERROR(CheckServing());
  std::unique_lock<std::mutex> lock(mu_);
  Comm* comm = nullptr;
  COLLECTIVED_RETURN_IF_ERROR(MemberLocked(session_id, comm_id, rank, &comm));
  if (comm->mode != ExecutionMode::kDaemon) {
    return Status::FailedPrecondition("Submit needs a daemon-executed communicator; communicator " +
                                      std::to_string(comm_id) + " is client-executed");
  }
  if (comm->gpu) {
    return Status::FailedPrecondition("Submit serves host communicators; GPU communicators post from the "
                                      "client's stream (Communicator::AllReduce with a GpuStream)");
  }
  COLLECTIVED_RETURN_IF_ERROR(ring::ValidateDescriptor(desc, config_.max_message_bytes));
  const uint64_t in_bytes = desc.count * DataTypeSize(desc.dtype);
  const uint64_t out_bytes = desc.kind == CollectiveKind::kAllGather ? in_bytes * comm->world_size : in_bytes;
  Session& s = *sessions_.at(session_id);
  for (auto [id, off, bytes, what] : {std::tuple{desc.send_buffer_id, desc.send_offset, in_bytes, "send"},
                                      std::tuple{desc.recv_buffer_id, desc.recv_offset, out_bytes, "recv"}}) {
    auto bit = s.buffers.find(id);
    if (bit == s.buffers.end()) {
      return Status::NotFound(std::string(what) + " buffer " + std::to_string(id) + " not found in this session");
    }
    if (off > bit->second.bytes || bytes > bit->second.bytes - off) {
      return Status::InvalidArgument(std::string(what) + " range [" + std::to_string(off) + ", +" +
                                     std::to_string(bytes) + ") exceeds buffer " + std::to_string(id) + " of " +
                                     std::to_string(bit->second.bytes) + " bytes");
    }
  }
  const ring::CommSegment& seg = comm->seg;
  const uint64_t posted = seg.control(rank).next_index.value.load(std::memory_order_acquire);
  const uint64_t done = seg.control(rank).completed.value.load(std::memory_order_acquire);
  if (posted - done >= seg.ring_depth()) {
    return Status::ResourceExhausted("op ring of rank " + std::to_string(rank) + " is full (" +
                                     std::to_string(seg.ring_depth()) + " ops in flight)");
  }
  desc.algorithm = ring::ChooseAlgorithm(desc.kind, in_bytes, seg.header().one_shot_max_bytes);
  // Post outside the lock: if another poster of this rank took the last free
  // slot, PostOp waits for the rank's executor, which needs this lock to
  // resolve buffers. The window keeps the segment mapped meanwhile.
  std::shared_ptr<ipc::ShmWindow> keep = comm->window;
  const ring::CommSegment posted_seg = seg;
  lock.unlock();
  ring::WaitContext ctx{&posted_seg, nullptr,
                        ring::NowNs() + static_cast<int64_t>(posted_seg.header().op_timeout_ns)};
  return ring::PostOp(posted_seg, rank, desc, ctx, index);
}

Status Registry::QueryOp(uint64_t session_id, uint64_t comm_id, uint32_t rank, uint64_t index, bool* done,
                         Status* op_status) {
  std::lock_guard<std::mutex> lock(mu_);
  Comm* comm = nullptr;
  COLLECTIVED_RETURN_IF_ERROR(MemberLocked(session_id, comm_id, rank, &comm));
  const uint64_t posted = comm->seg.control(rank).next_index.value.load(std::memory_order_acquire);
  if (index >= posted) {
    return Status::NotFound("op " + std::to_string(index) + " was never posted (rank " + std::to_string(rank) +
                            " posted " + std::to_string(posted) + ")");
  }
  *done = ring::IsOpDone(comm->seg, rank, index);
  if (*done) *op_status = ring::CompletedOpStatus(comm->seg, rank, index);
  return Status::Ok();
}

void Registry::CleanupSession(uint64_t session_id, const std::string& why) {
  Deferred after;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto sit = sessions_.find(session_id);
    if (sit == sessions_.end()) return;
    Session& s = *sit->second;
    const std::string reason = "session " + std::to_string(session_id) + " (pid " + std::to_string(s.pid) + ") " + why;
    auto memberships = s.memberships;
    for (const auto& [comm_id, rank] : memberships) {
      auto cit = comms_.find(comm_id);
      if (cit != comms_.end()) LeaveLocked(*cit->second, rank, reason, &after);
    }
    // Buffers are unmapped only after the executors above stopped using them.
    auto buffers = std::make_shared<std::map<uint64_t, BufferRecord>>(std::move(s.buffers));
    for (auto& [id, b] : *buffers) buffer_bytes_ -= b.bytes;
    after.push_back([buffers] { buffers->clear(); });
    // Legacy-IPC memory it may still have had open (the last holder frees it, outside the lock).
    after.push_back([held = std::move(s.held_gpu_memory)]() mutable { held.clear(); });
    spdlog::info("{}; reclaimed {} buffers, {} memberships", reason, buffers->size(), memberships.size());
    sessions_.erase(sit);
  }
  for (auto& f : after) f();
}

void Registry::Housekeeping() {
  std::vector<uint64_t> unbound;
  Deferred after;
  {
    std::lock_guard<std::mutex> lock(mu_);
    const int64_t now = ring::NowNs();
    for (auto it = refused_keys_.begin(); it != refused_keys_.end();) {  // keys used once never come back
      it = it->second.until_ns <= now ? refused_keys_.erase(it) : std::next(it);
    }
    // A member whose join waited past its deadline gets DEADLINE_EXCEEDED and
    // is withdrawn, so a client that gave up never becomes a phantom member.
    std::vector<std::pair<uint64_t, uint32_t>> expired;
    for (auto& [id, c] : comms_) {
      if (c->formed) continue;
      for (uint32_t r = 0; r < c->world_size; ++r) {
        if (c->pending[r] && now >= c->join_deadline_ns[r]) expired.push_back({id, r});
      }
    }
    for (const auto& [id, r] : expired) {
      auto cit = comms_.find(id);
      if (cit == comms_.end()) continue;
      Comm& c = *cit->second;
      std::string missing;
      for (uint32_t k = 0; k < c.world_size; ++k) {
        if (c.members[k] == 0) missing += (missing.empty() ? "" : ",") + std::to_string(k);
      }
      const std::string msg = "only " + std::to_string(c.joined) + " of " + std::to_string(c.world_size) +
                              " ranks joined '" + c.key + "' before rank " + std::to_string(r) +
                              "'s join timed out (missing ranks " + missing + ")";
      spdlog::warn("{}", msg);
      WithdrawJoinLocked(c, r, Status::DeadlineExceeded(msg), &after);
    }
    for (auto& [id, c] : comms_) {
      if (c->formed) FailPendingRegistrationsLocked(*c, Status::Ok(), true, now, &after);
    }
    // A session whose fd connection never came is a lease that never started.
    for (auto& [id, s] : sessions_) {
      if (!s->bound && now - s->attached_ns > 30'000'000'000LL) unbound.push_back(id);
    }
  }
  for (auto& f : after) f();
  for (uint64_t id : unbound) CleanupSession(id, "never opened its fd connection");
}

CommStats Registry::CommStatsOf(const Comm& c) {
  CommStats cs;
  cs.comm_id = c.id;
  cs.key = c.key;
  cs.world_size = c.world_size;
  cs.mode = c.mode;
  const ring::CommHeader& h = c.seg.header();
  uint64_t posted = 0;
  for (uint32_t r = 0; r < c.world_size; ++r) {
    RankStats rs;
    rs.rank = r;
    rs.session_id = c.members[r];
    rs.posted = c.seg.control(r).next_index.value.load(std::memory_order_acquire);
    rs.completed = c.seg.control(r).completed.value.load(std::memory_order_acquire);
    rs.captured_plans = r < c.captured_plans.size() ? c.captured_plans[r] : 0;
    posted = std::max(posted, rs.posted);
    cs.ranks.push_back(rs);
  }
  cs.posted = posted;
  uint64_t registered = 0;
  for (const auto& [id, g] : c.registrations) registered += g.formed ? 1 : 0;
  cs.registered_buffers = registered;
  if (c.gpu) {
    // The kernels keep these counts in device memory (each replay of a
    // captured op takes its index there); one small copy reads them.
    GpuCommMemory::Counts counts;
    Status read = c.gpu_memory ? c.gpu_memory->ReadCounts(c.world_size, &counts) : Status::NotFound("no memory");
    if (!read.ok() && c.gpu_memory) {
      // A failed copy here means this daemon's CUDA context is broken: say so once.
      static std::atomic<bool> said{false};
      if (!said.exchange(true)) {
        spdlog::error("GPU communicator {} '{}': counts not readable: {}", c.id, c.key, read.ToString());
      }
    }
    if (read.ok()) {
      uint64_t posted_max = 0;
      for (uint32_t r = 0; r < c.world_size; ++r) {
        cs.ranks[r].posted = counts.posted[r];
        cs.ranks[r].completed = counts.completed[r];
        posted_max = std::max(posted_max, counts.posted[r]);
      }
      cs.posted = posted_max;
    }
    uint64_t all_done = UINT64_MAX;
    for (uint32_t r = 0; r < c.world_size; ++r) all_done = std::min(all_done, cs.ranks[r].completed);
    cs.matched = all_done;
    cs.completed = all_done;
    const bool kernel_gave_up = counts.abort != 0;
    if (c.gpu_executor) cs.gpu_handoff_us_mean = c.gpu_executor->handoff_us_mean();
    cs.aborted = c.seg.aborted() || kernel_gave_up;
    if (c.seg.aborted()) {
      cs.abort_reason = c.seg.AbortStatus().message();
    } else if (kernel_gave_up) {
      cs.abort_reason = "a kernel gave up (deadline, or ranks disagreed on an op); the clients' handles say which";
    }
    return cs;
  }
  cs.matched = h.ops_matched.load();
  cs.completed = h.ops_completed.load();
  cs.failed = h.ops_failed.load();
  cs.aborted = c.seg.aborted();
  if (c.seg.aborted()) cs.abort_reason = c.seg.AbortStatus().message();
  return cs;
}

RegistryStats Registry::Stats() {
  std::lock_guard<std::mutex> lock(mu_);
  RegistryStats out;
  out.sessions = sessions_.size();
  for (auto& [id, s] : sessions_) out.buffers += s->buffers.size();
  out.buffer_bytes = buffer_bytes_;
  out.draining = draining_.load();
  for (auto& [id, c] : comms_) out.communicators.push_back(CommStatsOf(*c));
  out.recently_closed.assign(recently_closed_.begin(), recently_closed_.end());
  return out;
}

}  // namespace collectived::daemon
