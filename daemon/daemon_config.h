// Daemon settings, filled from flags > COLLECTIVED_* env > TOML file > defaults.
// Options with a fixed set of values are enums here: their strings are
// parsed once, at start-up (ParseConfigChoices), and never compared again.
#ifndef COLLECTIVED_DAEMON_DAEMON_CONFIG_H_
#define COLLECTIVED_DAEMON_DAEMON_CONFIG_H_

#include <cstdint>
#include <string>
#include <vector>

#include "collectived/status.h"
#include "daemon/gpu_comm_memory.h"  // GpuMemoryExport

namespace collectived::daemon {

// kAuto is resolved at start-up to the cuda backend where it is available,
// else the host one; a running daemon serves kHost or kCuda.
enum class Backend { kAuto, kHost, kCuda };

// Daemon-executed GPU collectives: kFused (one kernel) or kCopyEngine (the
// copy engines move the data, no SMs for the movement).
enum class GpuPath { kFused, kCopyEngine };

// How the daemons of a multi-node job meet (docs/multinode.md): kNone, a
// daemon alone; kMpi, one daemon per rank of an mpirun job; kCoordinator,
// daemons started on their own (systemd) meet at node 0's address.
enum class ClusterMode { kNone, kMpi, kCoordinator };

struct DaemonConfig {
  std::string socket_path = "/run/collectived/collectived.sock";
  Backend backend = Backend::kAuto;
  uint64_t max_message_bytes = 16ull << 20;  // per rank input, sizes the fixed slots
  uint64_t one_shot_max_bytes = 256ull << 10;
  // Daemon-executed host communicators on one node: ops whose outputs, every
  // rank's together, come to at most this run on rank 0's executor alone
  // (executor/host_executor.h, led ops); 0: every rank's executor runs every op.
  uint64_t host_lead_max_bytes = 128ull << 10;
  uint32_t ring_depth = 64;
  uint32_t op_timeout_ms = 30000;
  uint32_t join_timeout_ms = 60000;
  uint64_t max_buffer_bytes = 8ull << 30;  // all sessions' buffers together
  uint32_t drain_timeout_ms = 10000;
  // The fd socket: connections at once (bound or still in their handshake;
  // more are answered RESOURCE_EXHAUSTED), and how long a connection may take
  // to say hello, or stall inside a request, before it is closed.
  uint32_t max_fd_connections = 1024;
  uint32_t fd_handshake_timeout_ms = 30000;
  // The gRPC socket: connections at once (more are closed at accept). Each
  // costs two descriptors: gRPC's and the acceptor's watch (grpc_acceptor.h).
  uint32_t max_grpc_connections = 1024;
  uint32_t max_grpc_connections_per_uid = 256;  // no user can take every slot
  // Access (docs/security.md), by group name or number; empty: none. The
  // admin group may drain the daemon and see every key in the stats; members
  // of the shared group may join communicators formed by other members of it.
  std::string admin_group;
  std::string shared_group;
  // The cluster (docs/multinode.md). A socket path holding "{node}" gets the
  // node id there (several daemons on one machine).
  ClusterMode cluster = ClusterMode::kNone;
  uint32_t heartbeat_interval_ms = 250;
  uint32_t heartbeat_timeout_ms = 3000;  // a peer silent this long is lost
  // kCoordinator: node 0's HOST:PORT, this daemon's node rank, the node
  // count, the secret every daemon of the cluster is configured with, and
  // how long the cluster may take to form.
  std::string coordinator;
  uint32_t node_rank = 0;
  uint32_t nodes = 1;
  std::string cluster_secret;
  uint32_t cluster_timeout_ms = 60000;
  // Caps on what clients can make the daemon hold, each refused past its
  // limit with RESOURCE_EXHAUSTED naming its flag. With max_fd_connections
  // they bound the daemon's descriptors (FdsNeeded). Ops in flight are bounded
  // per rank by ring_depth.
  uint32_t max_sessions = 512;
  uint32_t max_buffers_per_session = 256;  // its buffers and fds deposited for a GPU registration
  uint32_t max_buffers = 4096;             // all sessions' together
  uint32_t max_communicators_per_session = 64;  // its memberships, formed or forming
  uint32_t max_communicators = 1024;
  uint32_t max_pending_joins = 1024;       // members waiting for their communicator to form
  std::string log_level = "info";
  // Prometheus metrics on HOST:PORT (daemon/metrics.h); empty: off.
  std::string metrics_listen;
  // An op some ranks posted and others not for this long is logged once
  // and shown by `collectivectl status` (0: never).
  uint32_t stall_threshold_ms = 5000;
  // Daemon-executed GPU all-gathers: one kernel, or peer copies on the copy engines.
  GpuPath gpu_gather_path = GpuPath::kFused;
  // Daemon-executed GPU all-reduces: one kernel, or the copy engines gather
  // each rank's part into a scratch area, SMs reduce it, the copy engines
  // broadcast the result, with a scratch area of at most this many bytes per
  // communicator (larger ops go in pieces).
  GpuPath gpu_reduce_path = GpuPath::kFused;
  uint64_t gpu_copy_engine_scratch_bytes = 256ull << 20;
  // How GPU communicator memory is shared with members (see GpuMemoryExport).
  GpuMemoryExport gpu_memory_export = GpuMemoryExport::kAuto;
  // The client library's GPU kernels publish start flags with a release
  // (ring::kGpuStartFlagRelease).
  bool gpu_start_flag_release = false;
  // They keep the end flag's fence at system scope where every rank of a
  // communicator shares one GPU (ring::kGpuSystemEndFence).
  bool gpu_system_end_fence = false;
  // Their two-shot push keeps its static split instead of claiming its work
  // from a shared counter where that pays (ring::kGpuStaticTwoShot,
  // ring::TwoShotClaimsPay).
  bool gpu_static_two_shot = false;
  // At most this many blocks per rank's kernel in a GPU communicator (0: the
  // default, SMs / the communicator's ranks on that GPU). Communicators whose
  // ops run at once on one GPU must together leave block slots free
  // (docs/operating.md, "Several communicators on one GPU").
  uint32_t gpu_max_blocks_per_rank = 0;
  // Negative controls for the stress harness: never on by default.
  bool unsafe_skip_end_barrier = false;
  bool unsafe_event_before_epilogue = false;
  bool unsafe_size_dependent_slots = false;
  int32_t debug_delay_rank = -1;
  uint32_t debug_delay_us = 0;
  uint32_t debug_delay_copyout_us = 0;
};

// The enum options as flags, env and the TOML file spell them (the defaults
// match DaemonConfig's).
struct ConfigChoices {
  std::string backend = "auto";             // --backend
  std::string gpu_gather_path = "fused";    // --gpu-gather-path
  std::string gpu_reduce_path = "fused";    // --gpu-reduce-path
  std::string gpu_memory_export = "auto";   // --gpu-memory-export
  std::string cluster = "none";             // --cluster
};

// Sets cfg's enum options from `in`. On failure returns INVALID_ARGUMENT
// naming the flag, its choices and the value given, and leaves cfg as it was.
Status ParseConfigChoices(const ConfigChoices& in, DaemonConfig* cfg);

// Each option's accepted spellings, in the order the help text lists them.
std::vector<std::string> BackendChoices();
std::vector<std::string> GpuPathChoices();
std::vector<std::string> GpuMemoryExportChoices();
std::vector<std::string> ClusterChoices();

// The spelling of a value, for logs and the version RPC.
const char* BackendName(Backend backend);

// gRPC connections an administrator may hold past the connection caps, so
// that whoever may Drain can always connect (grpc_acceptor.h).
constexpr uint32_t kAdminConnectionReserve = 8;
// Descriptors the daemon reserves for itself (listen sockets, gRPC's own,
// logs, a GPU runtime), beyond what the caps let clients make it hold.
constexpr uint64_t kFdReserve = 128;
// What RLIMIT_NOFILE must allow when every cap is full: the reserve, every fd
// connection, two per gRPC connection (and the administrators' reserve), a
// window per buffer (or deposit) and per communicator.
uint64_t FdsNeeded(const DaemonConfig& cfg);
// Raises the soft RLIMIT_NOFILE toward the hard limit when FdsNeeded(cfg)
// needs more; *limit: the soft limit now. FAILED_PRECONDITION naming the
// caps when even the hard limit is too low.
Status FitFdLimit(const DaemonConfig& cfg, uint64_t* limit);

}  // namespace collectived::daemon

#endif  // COLLECTIVED_DAEMON_DAEMON_CONFIG_H_
