// The daemon's state: sessions, buffers, communicators and their segments,
// and the daemon-side rank executors. Control-plane only (one mutex): the hot
// path is the rings, which the registry never touches per op.
// Methods are defined by concern: registry.cc (the facade: cleanup,
// housekeeping, per-op calls), sessions.cc, buffers.cc, join.cc,
// gpu_registrations.cc and stats.cc; their records are in registry_state.h.
#ifndef COLLECTIVED_DAEMON_REGISTRY_H_
#define COLLECTIVED_DAEMON_REGISTRY_H_

#include <unistd.h>

#include <atomic>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "base/mutex.h"
#include "base/thread_annotations.h"
#include "collectived/status.h"
#include "collectived/types.h"
#include "cluster/comm_messages.h"
#include "cluster/membership.h"
#include "cluster/ucx_transport.h"
#include "daemon/access.h"
#include "daemon/daemon_config.h"
#include "daemon/stats.h"
#include "ipc/shm_window.h"
#include "executor/host_executor.h"
#include "ring/segment_layout.h"

namespace collectived::daemon {

struct JoinRequest {
  uint64_t session_id = 0;
  std::string key;
  uint32_t world_size = 0;
  uint32_t rank = 0;
  ExecutionMode mode = ExecutionMode::kDefault;
  uint32_t op_timeout_ms = 0;
  uint32_t join_timeout_ms = 0;  // this member's; 0 or above the daemon's: the daemon's
  std::string device_uuid;       // GPU communicators: this rank's device; empty: host
  uint64_t gpu_heap_bytes = 0;   // GPU communicators: each rank's symmetric heap
  std::string cannot_join;       // non-empty: this member cannot take part, and why
};

struct GpuWindowInfo {
  uint64_t window_id = 0;
  uint64_t bytes = 0;
  std::string device_uuid;
  std::string legacy_ipc_handle;  // set: open this cudaIpc handle instead of fetching an fd
};

struct JoinResult {
  uint64_t comm_id = 0;
  // The member's index in the communicator's segment: its rank, except in a
  // communicator across nodes, whose segment holds this node's ranks only.
  uint32_t segment_rank = 0;
  uint32_t world_size = 0;  // every node's ranks
  uint64_t window_id = 0;
  uint64_t window_bytes = 0;
  ExecutionMode mode = ExecutionMode::kDefault;
  // GPU communicators only (see ring/gpu_control_layout.h).
  bool gpu = false;
  GpuWindowInfo gpu_control;
  std::vector<GpuWindowInfo> gpu_ranks;
  uint64_t gpu_slot_bytes = 0;
  uint64_t gpu_heap_bytes = 0;
  uint32_t gpu_blocks = 0;
};

// An fd to send over the fd socket for a window.
struct WindowFd {
  int fd = -1;
  uint64_t size = 0;
  bool close_after_send = false;  // a fresh export; else borrowed from `keep`
  std::shared_ptr<void> keep;     // keeps a borrowed fd open until sent
};

using JoinDone = std::function<void(const Status&, const JoinResult&)>;

// A rank's registration of its own GPU memory (RegisterGpuBuffer in the proto).
struct GpuRegisterRequest {
  uint64_t session_id = 0;
  uint64_t comm_id = 0;
  uint32_t rank = 0;
  uint64_t deposit_id = 0;
  uint64_t allocation_bytes = 0;
  uint64_t offset = 0;
  uint64_t bytes = 0;
};
struct GpuRegisterResult {
  uint64_t buffer_id = 0;
  std::vector<GpuWindowInfo> allocations;  // per rank
  std::vector<uint64_t> offsets;           // per rank
};
using GpuRegisterDone = std::function<void(const Status&, const GpuRegisterResult&)>;

struct BufferInfo {
  uint64_t buffer_id;
  uint64_t window_id;
  uint64_t offset;
  uint64_t bytes;
  uint64_t window_bytes;
};

struct Session;  // registry_state.h
struct Comm;

// Thread-safe: every public method takes the one lock itself (EXCLUDES), and
// runs callbacks (`done`) after letting go of it.
class Registry {
 public:
  // `access` decides who may share a communicator (a key formed by one uid).
  explicit Registry(const DaemonConfig& config, AccessPolicy access = AccessPolicy(geteuid()));
  ~Registry();

  // The session belongs to `owner`, the credentials of the attaching connection.
  Status Attach(const std::string& name, uint32_t pid, const ipc::PeerCredentials& owner, uint64_t* session_id,
                uint64_t* token) COLLECTIVED_EXCLUDES(mu_);
  // May a call from `caller` presenting `token` act for `session_id`?
  // NOT_FOUND for no such session, PERMISSION_DENIED for another uid's or a
  // wrong token.
  Status Authorize(uint64_t session_id, uint64_t token, const ipc::PeerCredentials& caller)
      COLLECTIVED_EXCLUDES(mu_);
  Status Detach(uint64_t session_id) COLLECTIVED_EXCLUDES(mu_);
  // The fd-socket connection of a session: its lease.
  // `uid`: the connecting process's (SO_PEERCRED); only the session's owner may bind it.
  Status BindConnection(uint64_t session_id, uint64_t token, uint32_t uid) COLLECTIVED_EXCLUDES(mu_);
  void ConnectionClosed(uint64_t session_id) COLLECTIVED_EXCLUDES(mu_);
  // The fd of a window (a buffer's, a communicator's segment, or a GPU
  // communicator's device memory) for a session allowed to map it.
  Status FetchWindow(uint64_t session_id, uint64_t window_id, WindowFd* out) COLLECTIVED_EXCLUDES(mu_);

  Status AllocBuffer(uint64_t session_id, uint64_t bytes, BufferInfo* out) COLLECTIVED_EXCLUDES(mu_);
  Status FreeBuffer(uint64_t session_id, uint64_t buffer_id) COLLECTIVED_EXCLUDES(mu_);

  // Calls `done` exactly once: when every member joined, or on error/expiry.
  void Join(const JoinRequest& req, JoinDone done) COLLECTIVED_EXCLUDES(mu_);
  Status DestroyCommunicator(uint64_t session_id, uint64_t comm_id, uint32_t rank) COLLECTIVED_EXCLUDES(mu_);

  Status Submit(uint64_t session_id, uint64_t comm_id, uint32_t rank, ring::OpDescriptor desc, uint64_t* index)
      COLLECTIVED_EXCLUDES(mu_);
  // Records a GPU op captured into a graph by `rank` (kind, type, op and
  // count checked); *plans: that rank's registered plans so far.
  Status RegisterPlan(uint64_t session_id, uint64_t comm_id, uint32_t rank, const ring::OpDescriptor& desc,
                      uint64_t* plans) COLLECTIVED_EXCLUDES(mu_);
  // *done and, when done, *op_status of op `index` of `rank` (the session's).
  Status QueryOp(uint64_t session_id, uint64_t comm_id, uint32_t rank, uint64_t index, bool* done,
                 Status* op_status) COLLECTIVED_EXCLUDES(mu_);
  // Resolves a buffer of the session holding `rank` of `comm_id`, for the
  // daemon-side executors.
  Status ResolveBuffer(uint64_t comm_id, uint32_t rank, uint64_t buffer_id, uint64_t offset, uint64_t bytes,
                       void** ptr) COLLECTIVED_EXCLUDES(mu_);

  // Takes `fd` (a client's own allocation, sent over its fd socket) until a
  // RegisterGpuBuffer of the same session claims it, or the session ends.
  Status DepositFd(uint64_t session_id, int fd, uint64_t* deposit_id) COLLECTIVED_EXCLUDES(mu_);
  // Calls `done` exactly once: when every rank registered its buffer of this
  // index, or on error, the join timeout, or a rank leaving.
  void RegisterGpuBuffer(const GpuRegisterRequest& req, GpuRegisterDone done) COLLECTIVED_EXCLUDES(mu_);
  // The daemon keeps every rank's allocation fd until all ranks deregistered
  // the buffer (or the communicator closes): a slow peer can still import it.
  Status DeregisterGpuBuffer(uint64_t session_id, uint64_t comm_id, uint32_t rank, uint64_t buffer_id)
      COLLECTIVED_EXCLUDES(mu_);

  RegistryStats Stats() COLLECTIVED_EXCLUDES(mu_);
  // The metrics endpoint's figures (daemon/metrics.h), at scrape time.
  MetricsSnapshot Metrics() COLLECTIVED_EXCLUDES(mu_);
  // Expires joins past their deadline and inspects ops for stalls
  // (logging each stalled op once). Called periodically.
  void Housekeeping() COLLECTIVED_EXCLUDES(mu_);
  // Fails every join still waiting (UNAVAILABLE), before the server shuts down.
  void CancelPendingJoins(const std::string& why) COLLECTIVED_EXCLUDES(mu_);

  // Communicators across nodes (spanning.cc, docs/multinode.md). Before
  // serving; both outlive the registry's use of them.
  void AttachCluster(cluster::UcxTransport* transport, cluster::Membership* membership) COLLECTIVED_EXCLUDES(mu_);
  // A control message from daemon `node` (the transport's progress thread).
  void OnClusterMessage(uint32_t node, const std::string& payload) COLLECTIVED_EXCLUDES(mu_);
  // `node` was lost: every communicator spanning it fails UNAVAILABLE naming
  // it, and joins that counted on its members fail. Only aborts: safe on any
  // thread, even inside the transport's progress.
  void OnNodeLost(uint32_t node, const std::string& why) COLLECTIVED_EXCLUDES(mu_);

  void SetDraining() { draining_.store(true); }
  bool draining() const { return draining_.load(); }
  size_t session_count() COLLECTIVED_EXCLUDES(mu_);
  const DaemonConfig& config() const { return config_; }
  const AccessPolicy& access() const { return access_; }

 private:
  using Deferred = std::vector<std::function<void()>>;  // run after mu_ is released

  // Lock rules are annotations clang checks (tests/thread_safety_check.sh):
  // ...Locked methods REQUIRE mu_; those that take it EXCLUDE it.

  // registry_state.h. UNAVAILABLE while draining (no lock: an atomic).
  Status CheckServing() const;
  // *comm: `comm_id` if `session_id` is its formed `rank`.
  Status MemberLocked(uint64_t session_id, uint64_t comm_id, uint32_t rank, Comm** comm)
      COLLECTIVED_REQUIRES(mu_);

  // registry.cc. Leaves every communicator of the session and frees what it held.
  void CleanupSession(uint64_t session_id, const std::string& why) COLLECTIVED_EXCLUDES(mu_);

  // buffers.cc. True while a posted op not yet completed names the buffer.
  bool BufferInUseLocked(uint64_t session_id, uint64_t buffer_id) COLLECTIVED_REQUIRES(mu_);
  // Descriptors `session` makes the daemon hold: its buffers, its deposited
  // fds and its ranks' registered allocations not yet given back.
  size_t HeldBySessionLocked(const Session& session) COLLECTIVED_REQUIRES(mu_);
  // RESOURCE_EXHAUSTED naming the cap when `session` may hold no more
  // buffers (buffers, deposits and registrations count alike: each is a descriptor).
  Status CheckBufferCapsLocked(const Session& session) COLLECTIVED_REQUIRES(mu_);

  // join.cc. PERMISSION_DENIED when `key` is taken (forming, or refused) by
  // a uid that `joiner` may not share a communicator with.
  Status CheckKeyOwnerLocked(const std::string& key, const ipc::PeerCredentials& joiner) COLLECTIVED_REQUIRES(mu_);
  // RESOURCE_EXHAUSTED naming the cap when `session` may not join one more.
  Status CheckJoinCapsLocked(const Session& session) COLLECTIVED_REQUIRES(mu_);
  // Join's work; on success takes *done (answered later through `after`).
  Status JoinLocked(const JoinRequest& req, JoinDone* done, Deferred* after) COLLECTIVED_REQUIRES(mu_);
  // A member that cannot join: records the refusal, withdraws the members
  // waiting, and returns FAILED_PRECONDITION with its reason. Any other:
  // FAILED_PRECONDITION while its key is refused, else OK.
  Status ApplyRefusalLocked(const JoinRequest& req, Deferred* after) COLLECTIVED_REQUIRES(mu_);
  // *out: the communicator forming under req.key (checked against the
  // earlier members), or a new one with its segment.
  Status FindOrCreateCommLocked(const JoinRequest& req, Comm** out) COLLECTIVED_REQUIRES(mu_);
  // Every member joined: forms `comm` and answers every member (or, when a
  // GPU communicator's memory fails, withdraws them all with the reason).
  void FormLocked(Comm& comm, Deferred* after) COLLECTIVED_REQUIRES(mu_);
  // Every member joined. Allocates a GPU communicator's device memory.
  Status FormGpuLocked(Comm& comm) COLLECTIVED_REQUIRES(mu_);
  // `comm` still forming. Answers rank's join with `status` and withdraws it.
  void WithdrawJoinLocked(Comm& comm, uint32_t rank, const Status& status, Deferred* after)
      COLLECTIVED_REQUIRES(mu_);
  // Removes `rank` of `comm` (leaving or dead); may drop `comm`.
  void LeaveLocked(Comm& comm, uint32_t rank, const std::string& why, Deferred* after) COLLECTIVED_REQUIRES(mu_);

  // spanning.cc. Is there a cluster of more than this node?
  bool ClusterActiveLocked() const COLLECTIVED_REQUIRES(mu_);
  // Tells every other node which ranks of `comm` (forming) joined here.
  void AnnounceLocked(Comm& comm) COLLECTIVED_REQUIRES(mu_);
  // On the node of rank 0 of `key`: forms the communicator across nodes once
  // every rank joined somewhere, or fails it on a conflict.
  void TryDecideLocked(const std::string& key, Deferred* after) COLLECTIVED_REQUIRES(mu_);
  // This node's part of a decided communicator across nodes.
  void ApplyFormLocked(const cluster::FormDecision& form, Deferred* after) COLLECTIVED_REQUIRES(mu_);
  // Fails `key` (forming) here and on `nodes`; withdraws the local members.
  void FailKeyLocked(const std::string& key, const Status& status, const std::vector<uint32_t>& nodes,
                     uint32_t comm_tag, Deferred* after) COLLECTIVED_REQUIRES(mu_);
  // `key` formed or failed: forgets the announcements of it here and
  // withdraws this node's from the nodes outside `involved` (which learn of
  // it no other way), so a later use of the key decides from fresh ones.
  void ForgetKeyLocked(const std::string& key, const std::vector<uint32_t>& involved) COLLECTIVED_REQUIRES(mu_);
  // Tells the other nodes of `comm` (formed across nodes) that it failed here.
  // `relayed`: passing on another node's failure, to every node of the plan
  // but this one and `from`.
  void TellSpannedNodesLocked(const Comm& comm, const Status& status, bool relayed = false,
                              uint32_t from = UINT32_MAX) COLLECTIVED_REQUIRES(mu_);
  // Aborts formed communicators across nodes matching `pred`; true if one matched.
  // `newly`, if set, gets those that were not aborted before.
  bool AbortSpanningLocked(const std::function<bool(const Comm&)>& pred, StatusCode code, const std::string& why,
                           std::vector<Comm*>* newly = nullptr)
      COLLECTIVED_REQUIRES(mu_);
  uint32_t NextCommTagLocked() COLLECTIVED_REQUIRES(mu_);
  // `comm`'s receive id, chosen on first use: none of this node's other
  // communicators has it, and the counter repeats one only after 2^24.
  uint32_t RecvIdLocked(Comm& comm) COLLECTIVED_REQUIRES(mu_);

  // gpu_registrations.cc.
  // RegisterGpuBuffer's work; on success takes *done (answered later through `after`).
  Status RegisterGpuBufferLocked(const GpuRegisterRequest& req, GpuRegisterDone* done, Deferred* after)
      COLLECTIVED_REQUIRES(mu_);
  // Answers every registration of `comm` still waiting for ranks with
  // `status` (or only those past their deadline) and drops them.
  void FailPendingRegistrationsLocked(Comm& comm, const Status& status, bool expired_only, int64_t now_ns,
                                      Deferred* after) COLLECTIVED_REQUIRES(mu_);

  const DaemonConfig config_;
  const AccessPolicy access_;
  std::atomic<bool> draining_{false};
  // The one lock of the control plane. It guards the maps below and, since
  // they are reached only through these maps, every Session and Comm record
  // (whose fields clang cannot tie to this lock).
  Mutex mu_;
  uint64_t next_id_ COLLECTIVED_GUARDED_BY(mu_) = 1;  // one id space for sessions, buffers, windows, communicators
  uint64_t buffer_bytes_ COLLECTIVED_GUARDED_BY(mu_) = 0;
  std::map<uint64_t, std::unique_ptr<Session>> sessions_ COLLECTIVED_GUARDED_BY(mu_);
  std::map<uint64_t, std::unique_ptr<Comm>> comms_ COLLECTIVED_GUARDED_BY(mu_);
  std::map<std::string, uint64_t> comm_by_key_ COLLECTIVED_GUARDED_BY(mu_);  // communicators still forming
  // Keys a member said it cannot join: why, until when (ns) later members
  // are refused with that reason, and which ranks were told (once all were,
  // the key is free again).
  struct Refusal {
    std::string why;
    ipc::PeerCredentials owner;  // of the member that refused
    int64_t until_ns = 0;
    uint32_t world_size = 0;
    std::set<uint32_t> told;
  };
  std::map<std::string, Refusal> refused_keys_ COLLECTIVED_GUARDED_BY(mu_);
  // Window id -> (comm id, window index) of GPU communicators' device memory.
  std::map<uint64_t, std::pair<uint64_t, uint32_t>> gpu_windows_ COLLECTIVED_GUARDED_BY(mu_);
  struct RegisteredWindow {
    uint64_t comm_id;
    uint64_t buffer_id;
    uint32_t rank;
  };
  // Window id -> a rank's registered allocation.
  std::map<uint64_t, RegisteredWindow> registered_windows_ COLLECTIVED_GUARDED_BY(mu_);
  std::deque<CommStats> recently_closed_ COLLECTIVED_GUARDED_BY(mu_);  // the last 16, newest last
  MetricsTotals retired_ COLLECTIVED_GUARDED_BY(mu_);  // the counters of communicators that closed
  // `closed`: its last stats, as recently_closed_ keeps them (read once: a GPU
  // communicator's counts are a device copy).
  void RetireCountersLocked(const Comm& comm, const CommStats& closed) COLLECTIVED_REQUIRES(mu_);
  void InspectStallsLocked(int64_t now) COLLECTIVED_REQUIRES(mu_);
  // Communicators across nodes (spanning.cc).
  cluster::UcxTransport* transport_ COLLECTIVED_GUARDED_BY(mu_) = nullptr;
  cluster::Membership* membership_ COLLECTIVED_GUARDED_BY(mu_) = nullptr;
  struct Announced {
    cluster::JoinAnnounce announce;
    int64_t received_ns = 0;
  };
  // Key -> node -> the ranks that joined there (other nodes' announcements).
  std::map<std::string, std::map<uint32_t, Announced>> announced_ COLLECTIVED_GUARDED_BY(mu_);
  uint32_t comm_tag_counter_ COLLECTIVED_GUARDED_BY(mu_) = 0;
  uint32_t recv_id_counter_ COLLECTIVED_GUARDED_BY(mu_) = 0;
  // Announcements a plan or a failure here already used, as (node, epoch,
  // receive id), with when: a copy arriving later (the plan's two hops beat
  // its one) is dropped, not kept for the key's next use (cluster/model
  // REUSE). Expired with announcements.
  std::map<std::tuple<uint32_t, uint64_t, uint32_t>, int64_t> used_announcements_ COLLECTIVED_GUARDED_BY(mu_);
  // Communicators across nodes that ended here, as (key, tag), with when.
  std::map<std::pair<std::string, uint32_t>, int64_t> ended_spanning_ COLLECTIVED_GUARDED_BY(mu_);
  uint64_t refused_control_ COLLECTIVED_GUARDED_BY(mu_) = 0;  // malformed or unexpected control messages
};

}  // namespace collectived::daemon

#endif  // COLLECTIVED_DAEMON_REGISTRY_H_
