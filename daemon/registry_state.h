// The registry's records: what a session holds, what a communicator is, and
// the k-th GPU buffer registration of a communicator's ranks. Internal to the
// registry's files (registry.cc, sessions.cc, buffers.cc, join.cc,
// gpu_registrations.cc, stats.cc), which all define Registry's methods on
// these. Every record is reached only through Registry's maps, so only with
// Registry::mu_ held.
#ifndef COLLECTIVED_DAEMON_REGISTRY_STATE_H_
#define COLLECTIVED_DAEMON_REGISTRY_STATE_H_

#include <unistd.h>

#include <map>
#include <memory>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "cluster/node_exchange.h"
#include "daemon/gpu_comm_memory.h"
#include "daemon/gpu_executor.h"
#include "daemon/registry.h"
#include "daemon/stats.h"
#include "ipc/shm_window.h"
#include "ipc/unix_peer.h"
#include "executor/host_executor.h"
#include "ring/segment_layout.h"

namespace collectived::daemon {

struct BufferRecord {
  std::shared_ptr<ipc::ShmWindow> window;
  uint64_t bytes;
};

// An fd the daemon holds; closed when the last holder lets go.
using SharedFd = std::shared_ptr<int>;
inline SharedFd OwnFd(int fd) {
  return SharedFd(new int(fd), [](int* p) {
    if (*p >= 0) close(*p);
    delete p;
  });
}

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

struct Session {
  uint64_t id = 0;
  uint64_t token = 0;
  std::string name;
  uint32_t pid = 0;
  ipc::PeerCredentials owner;  // of the gRPC connection that attached it: every call must come from this uid
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

class CommResolver;  // join.cc: resolves buffers for a daemon-executed communicator

struct Comm {
  // Executors stop first: they use the exchange (declared after them), the
  // resolver and the window while they run.
  ~Comm() { executors.clear(); }

  uint64_t id = 0;
  std::string key;
  ipc::PeerCredentials owner;  // its first member's: later members must share with it (AccessPolicy)
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
  // The segment's abort was raised only to release peers of a rank that
  // destroyed the communicator, and no member left any other way: the
  // closed communicator is then reported as closed, not aborted.
  bool aborted_by_destroy = false;
  bool left_uncleanly = false;
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
  // Across nodes (spanning.cc): while forming, members are indexed by global
  // rank; once formed, by segment rank (this node's ranks, ascending).
  bool client_mode_asked = false;  // a member asked for client execution by name
  bool announced = false;          // other nodes were told about this key
  uint32_t recv_id = 0;            // across nodes: the id this node's data tags carry (0: none yet)
  bool peers_told = false;         // across nodes: the plan's other nodes know it failed (or need not)
  std::shared_ptr<cluster::SpanningExchange> exchange;  // set: formed across nodes
  uint32_t global_world = 0;       // across nodes: every node's ranks; else world_size
  // The stall inspector (stats.cc): the op some ranks posted and others not,
  // since when, and whether it was logged.
  uint64_t stall_op = UINT64_MAX;
  int64_t stall_since_ns = 0;
  bool stall_logged = false;
  std::vector<uint32_t> stall_missing;  // segment ranks
};

// A communicator's counters now (stats.cc).
CommStats CommStatsOf(const Comm& comm);

// Inline here, beside the records: every part of the registry calls them, and
// defined in any one part they would make the parts call each other in a circle.
inline Status Registry::CheckServing() const {
  if (draining_.load()) return Status::Unavailable("collectived is draining; no new work is accepted");
  return Status::Ok();
}

inline Status Registry::MemberLocked(uint64_t session_id, uint64_t comm_id, uint32_t rank, Comm** comm) {
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

}  // namespace collectived::daemon

#endif  // COLLECTIVED_DAEMON_REGISTRY_STATE_H_
