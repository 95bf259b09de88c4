// collectived: the per-node collective runtime daemon.
#include <fcntl.h>
#include <grpcpp/grpcpp.h>
#include <grpcpp/health_check_service_interface.h>
#include <signal.h>
#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <memory>
#include <vector>

#include "daemon/daemon_config.h"
#include "cluster/membership.h"
#include "cluster/mpi_bootstrap.h"
#include "cluster/tcp_bootstrap.h"
#include "cluster/ucx_transport.h"
#include "daemon/access.h"
#include "daemon/fd_server.h"
#include "daemon/grpc_acceptor.h"
#include "daemon/gpu_comm_memory.h"
#include "daemon/metrics.h"
#include "daemon/mps.h"
#include "daemon/registry.h"
#include "daemon/service.h"
#include "daemon/systemd_notify.h"
#include "daemon/validate.h"
#include "ring/gpu_control_layout.h"
#include "ring/segment_layout.h"
#include "ring/wait.h"

namespace cd = collectived::daemon;

namespace {

// Env COLLECTIVED_<NAME> becomes --name=value unless the flag is on the
// command line, so precedence is flags > env > config file > defaults.
std::vector<std::string> ArgsWithEnv(int argc, char** argv, const std::vector<std::string>& names) {
  std::vector<std::string> args(argv, argv + argc);
  for (const auto& name : names) {
    std::string env = "COLLECTIVED_" + name;
    for (auto& c : env) c = c == '-' ? '_' : static_cast<char>(std::toupper(c));
    const char* value = std::getenv(env.c_str());
    if (value == nullptr) continue;
    bool on_command_line = false;
    for (int i = 1; i < argc; ++i) {
      std::string a = argv[i];
      on_command_line |= a == "--" + name || a.rfind("--" + name + "=", 0) == 0;
    }
    if (!on_command_line) args.push_back("--" + name + "=" + value);
  }
  return args;
}

// Holds an exclusive flock on `<socket>.lock` for the daemon's life: gRPC
// unlinks an existing socket when it binds, so without it a second daemon
// would silently steal the first one's socket.
bool LockSocket(const std::string& socket_path, int* fd) {
  const std::string lock_path = socket_path + ".lock";
  *fd = open(lock_path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0660);
  if (*fd < 0) {
    spdlog::critical("cannot open lock file {}: {}", lock_path, std::strerror(errno));
    return false;
  }
  if (flock(*fd, LOCK_EX | LOCK_NB) != 0) {
    spdlog::critical("another collectived already serves {} (lock {} is held)", socket_path, lock_path);
    return false;
  }
  return true;
}

// Every setting, bound to `cfg` (enum options to `choices`): main's parse
// and SIGHUP's reparse define the same options.
void DefineOptions(CLI::App& app, cd::DaemonConfig& cfg, cd::ConfigChoices& choices, bool& dump_config) {
  app.set_config("--config", "", "TOML config file (e.g. /etc/collectived/collectived.toml)");
  // A misspelt key would otherwise leave its setting at the default, silently.
  app.allow_config_extras(false);
  app.add_option("--socket", cfg.socket_path, "gRPC Unix socket path")->capture_default_str();
  app.add_option("--backend", choices.backend, "auto | host | cuda")->capture_default_str()
      ->check(CLI::IsMember(cd::BackendChoices()));
  app.add_option("--max-message-bytes", cfg.max_message_bytes, "largest per-rank message; sizes the fixed slots")
      ->capture_default_str()->check(CLI::Range(uint64_t{8}, uint64_t{1} << 34));
  // Every numeric option has a range: a value outside it stops start-up
  // naming the option, instead of a daemon that starts and then fails clients.
  app.add_option("--one-shot-max-bytes", cfg.one_shot_max_bytes,
                 "all-reduce above this uses two-shot (host communicators of more than 2 ranks: above 2048 at most; "
                 "daemon-executed host communicators of 2 ranks: never)")
      ->capture_default_str()->check(CLI::Range(uint64_t{0}, uint64_t{1} << 34));
  app.add_option("--host-lead-max-bytes", cfg.host_lead_max_bytes,
                 "daemon-executed host ops whose outputs (all ranks') total at most this run on one executor thread (0: off)")
      ->capture_default_str()->check(CLI::Range(uint64_t{0}, uint64_t{1} << 34));
  app.add_option("--ring-depth", cfg.ring_depth, "ops in flight per rank (power of two)")->capture_default_str()
      ->check(CLI::Range(1u, collectived::ring::kStatusHistory));
  app.add_option("--op-timeout-ms", cfg.op_timeout_ms, "default deadline of every op wait")->capture_default_str()
      ->check(CLI::Range(1u, cd::validate::kMaxTimeoutMs));
  app.add_option("--join-timeout-ms", cfg.join_timeout_ms, "how long a communicator may take to form")
      ->capture_default_str()->check(CLI::Range(1u, cd::validate::kMaxTimeoutMs));
  app.add_option("--max-buffer-bytes", cfg.max_buffer_bytes, "budget for all sessions' buffers")
      ->capture_default_str()->check(CLI::Range(uint64_t{1} << 12, uint64_t{1} << 44));
  app.add_option("--drain-timeout-ms", cfg.drain_timeout_ms, "on SIGTERM, how long to wait for sessions to end")
      ->capture_default_str()->check(CLI::Range(0u, cd::validate::kMaxTimeoutMs));
  app.add_option("--max-fd-connections", cfg.max_fd_connections, "fd-socket connections at once")
      ->capture_default_str()->check(CLI::Range(1u, 1u << 20));
  app.add_option("--max-grpc-connections", cfg.max_grpc_connections,
                 "gRPC-socket connections at once (more are closed at accept)")
      ->capture_default_str()->check(CLI::Range(1u, 1u << 20));
  app.add_option("--max-grpc-connections-per-uid", cfg.max_grpc_connections_per_uid,
                 "gRPC-socket connections one uid may hold at once")
      ->capture_default_str()->check(CLI::Range(1u, 1u << 20));
  app.add_option("--admin-group", cfg.admin_group,
                 "group (name or number) that may drain the daemon and see every key in the stats")
      ->capture_default_str();
  app.add_option("--shared-group", cfg.shared_group,
                 "group whose members may join communicators formed by other members of it")
      ->capture_default_str();
  app.add_option("--cluster", choices.cluster,
                 "none (a daemon alone) | mpi (one daemon per rank of an mpirun job) | coordinator (daemons "
                 "started on their own meet at node 0; docs/multinode.md)")
      ->capture_default_str()->check(CLI::IsMember(cd::ClusterChoices()));
  app.add_option("--coordinator", cfg.coordinator, "cluster coordinator: node 0's HOST:PORT")->capture_default_str();
  app.add_option("--node-rank", cfg.node_rank, "cluster coordinator: this daemon's node id")
      ->capture_default_str()->check(CLI::Range(0u, 4095u));
  app.add_option("--nodes", cfg.nodes, "cluster coordinator: how many daemons form the cluster")
      ->capture_default_str()->check(CLI::Range(1u, 4096u));
  app.add_option("--cluster-secret", cfg.cluster_secret,
                 "cluster coordinator: a secret every daemon of the cluster shares (keep the file 0600)");
  app.add_option("--cluster-timeout-ms", cfg.cluster_timeout_ms, "cluster coordinator: how long the cluster may take to form")
      ->capture_default_str()->check(CLI::Range(100u, cd::validate::kMaxTimeoutMs));
  app.add_option("--heartbeat-interval-ms", cfg.heartbeat_interval_ms, "cluster: how often daemons tell each other they live")
      ->capture_default_str()->check(CLI::Range(10u, 60000u));
  app.add_option("--heartbeat-timeout-ms", cfg.heartbeat_timeout_ms, "cluster: a daemon silent this long is lost")
      ->capture_default_str()->check(CLI::Range(50u, 600000u));
  app.add_option("--fd-handshake-timeout-ms", cfg.fd_handshake_timeout_ms,
                 "close fd-socket connections silent this long before hello or inside a request")
      ->capture_default_str()->check(CLI::Range(1u, cd::validate::kMaxTimeoutMs));
  // Caps (each refused with RESOURCE_EXHAUSTED naming the flag; see daemon_config.h).
  for (auto [flag, field, what] : {std::tuple{"--max-sessions", &cfg.max_sessions, "sessions at once"},
                                   {"--max-buffers-per-session", &cfg.max_buffers_per_session,
                                    "buffers (and GPU fd deposits) one session may hold"},
                                   {"--max-buffers", &cfg.max_buffers, "buffers of all sessions together"},
                                   {"--max-communicators-per-session", &cfg.max_communicators_per_session,
                                    "communicators one session may be a member of"},
                                   {"--max-communicators", &cfg.max_communicators, "communicators at once"},
                                   {"--max-pending-joins", &cfg.max_pending_joins, "joins waiting at once"}}) {
    app.add_option(flag, *field, what)->capture_default_str()->check(CLI::Range(1u, 1u << 20));
  }
  // spdlog maps an unknown level name to "off": checked here so a typo cannot silence the log.
  app.add_option("--log-level", cfg.log_level, "trace | debug | info | warn | error | critical | off")
      ->capture_default_str()->check(CLI::IsMember({"trace", "debug", "info", "warn", "error", "critical", "off"}));
  app.add_option("--gpu-gather-path", choices.gpu_gather_path,
                 "daemon-executed GPU all-gather: fused (one kernel) | copy-engine (peer copies, no SMs)")
      ->capture_default_str()->check(CLI::IsMember(cd::GpuPathChoices()));
  app.add_option("--gpu-reduce-path", choices.gpu_reduce_path,
                 "daemon-executed GPU all-reduce: fused (one kernel) | copy-engine (copy engines move, SMs reduce)")
      ->capture_default_str()->check(CLI::IsMember(cd::GpuPathChoices()));
  app.add_option("--gpu-memory-export", choices.gpu_memory_export,
                 "how members map GPU communicator memory: auto | cumem (fds) | legacy-ipc (cudaIpc handles)")
      ->capture_default_str()->check(CLI::IsMember(cd::GpuMemoryExportChoices()));
  app.add_option("--gpu-copy-engine-scratch-bytes", cfg.gpu_copy_engine_scratch_bytes,
                 "scratch per communicator for the copy-engine all-reduce (larger ops run in pieces)")
      ->capture_default_str()->check(CLI::Range(uint64_t{1} << 16, uint64_t{1} << 40));
  app.add_option("--gpu-max-blocks-per-rank", cfg.gpu_max_blocks_per_rank,
                 "at most this many blocks per rank's kernel in GPU communicators (0: SMs / ranks on the GPU, "
                 "counting other live communicators' ranks where processes share it); lower it if the daemon warns "
                 "that communicators could need more blocks at once than a GPU holds (docs/operating.md)")
      ->capture_default_str()->check(CLI::Range(0u, collectived::ring::kMaxBlocks));
  app.add_flag("--gpu-start-flag-release", cfg.gpu_start_flag_release,
               "client-executed GPU ops publish each start flag with a system-scope release (0.7-2 us an op), for "
               "a platform where the kernel boundary's flush is in doubt (docs/proof.md)");
  app.add_flag("--gpu-system-end-fence", cfg.gpu_system_end_fence,
               "client-executed GPU ops keep each end flag's fence at system scope where every rank of the "
               "communicator shares one GPU (0.4-1.6 us an op), for a platform where a GPU-scope fence is in doubt "
               "across processes (docs/proof.md)");
  app.add_flag("--gpu-static-two-shot", cfg.gpu_static_two_shot,
               "client-executed GPU two-shot all-reduces split their work statically (rank r's blocks reduce "
               "chunk r) where every rank of the communicator shares one GPU, instead of claiming it from a "
               "shared counter where each block moves at least 1.5 MiB (docs/gpu-backend.md, \"Claimed two-shot\")");
  app.add_flag("--unsafe-skip-end-barrier", cfg.unsafe_skip_end_barrier,
               "NEGATIVE CONTROL: ranks leave ops without the final barrier (AITER bug class)");
  app.add_flag("--unsafe-event-before-epilogue", cfg.unsafe_event_before_epilogue,
               "NEGATIVE CONTROL: completion is published before the output is written (DeepEP bug class)");
  app.add_flag("--unsafe-size-dependent-slots", cfg.unsafe_size_dependent_slots,
               "NEGATIVE CONTROL (cuda backend): GPU staging slots packed by the current message size, so a "
               "rank's next copy-in can land on a peer's unread result (mori bug class)");
  app.add_option("--debug-delay-rank", cfg.debug_delay_rank, "debug: this rank's reads start late (-1: none)")
      ->capture_default_str()->check(CLI::Range(-1, static_cast<int>(collectived::ring::kMaxRanks) - 1));
  app.add_option("--debug-delay-us", cfg.debug_delay_us, "debug: how late, in microseconds")
      ->capture_default_str()->check(CLI::Range(0u, 10000000u));
  app.add_option("--debug-delay-copyout-us", cfg.debug_delay_copyout_us,
                 "debug: output writes start this late, in microseconds (GPU staged copy-outs: rank r's "
                 "(r + 1) times this)")
      ->capture_default_str()->check(CLI::Range(0u, 10000000u));
  app.add_option("--metrics-listen", cfg.metrics_listen,
                 "serve Prometheus metrics on HOST:PORT (e.g. 127.0.0.1:9464; empty: off; reloaded on SIGHUP)")
      ->capture_default_str();
  app.add_option("--stall-threshold-ms", cfg.stall_threshold_ms,
                 "log (once) and show an op some ranks posted and others not for this long (0: never)")
      ->capture_default_str()->check(CLI::Range(0u, cd::validate::kMaxTimeoutMs));
  // Not a setting: kept out of the config file (a dumped config fed back
  // must start a daemon, not dump again).
  app.add_flag("--dump-config", dump_config, "print the effective configuration as TOML and exit")
      ->configurable(false);
}

// SIGHUP: the start's command line and environment over the config file as
// it is now, so precedence stays flags > env > file > defaults.
bool Reparse(const std::vector<std::string>& args, cd::DaemonConfig* out, std::string* error) {
  cd::DaemonConfig fresh;
  cd::ConfigChoices choices;
  bool dump = false;
  CLI::App app{"collectived"};
  DefineOptions(app, fresh, choices, dump);
  std::vector<std::string> copy = args;
  std::vector<char*> cargs;
  for (auto& a : copy) cargs.push_back(a.data());
  try {
    app.parse(static_cast<int>(cargs.size()), cargs.data());
  } catch (const CLI::Error& e) {
    *error = e.what();
    return false;
  }
  *out = fresh;
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  cd::DaemonConfig cfg;
  cd::ConfigChoices choices;  // the enum options as given; parsed into cfg below
  CLI::App app{"collectived: per-node collective runtime daemon"};
  bool dump_config = false;
  DefineOptions(app, cfg, choices, dump_config);
  // Every setting has its COLLECTIVED_* variable (not --config or --dump-config).
  std::vector<std::string> env_names;
  for (const CLI::Option* o : app.get_options()) {
    if (o->get_configurable() && !o->get_lnames().empty() && o->get_lnames()[0] != "config" &&
        o->get_lnames()[0] != "help") {
      env_names.push_back(o->get_lnames()[0]);
    }
  }
  std::vector<std::string> args = ArgsWithEnv(argc, argv, env_names);
  std::vector<char*> cargs;
  for (auto& a : args) cargs.push_back(a.data());
  CLI11_PARSE(app, static_cast<int>(cargs.size()), cargs.data());
  if (dump_config) {
    std::cout << app.config_to_str(true, false);
    return 0;
  }

  // Plain lines on stderr: journald adds its own timestamps and priorities.
  auto logger = spdlog::stderr_color_mt("collectived");
  spdlog::set_default_logger(logger);
  spdlog::set_level(spdlog::level::from_str(cfg.log_level));
  spdlog::set_pattern(getenv("JOURNAL_STREAM") ? "[%l] %v" : "%Y-%m-%d %H:%M:%S.%e [%l] %v");

  // The CLI checked these already (the file and env too); this is the one
  // place their strings become enums.
  if (collectived::Status s = cd::ParseConfigChoices(choices, &cfg); !s.ok()) {
    spdlog::critical("{}", s.message());
    return 2;
  }
  bool gpu_visible = false;
  {
    std::string why_not;
    const bool cuda = collectived::daemon::CudaBackendAvailable(&why_not);
    gpu_visible = cuda;
    if (cfg.backend == cd::Backend::kCuda && !cuda) {
      spdlog::critical("backend 'cuda' requested but unavailable: {}", why_not);
      return 2;
    }
    if (cfg.backend == cd::Backend::kAuto) {
      cfg.backend = cuda ? cd::Backend::kCuda : cd::Backend::kHost;
      if (!cuda) spdlog::info("backend auto: host ({})", why_not);
    }
  }
  if (cfg.unsafe_size_dependent_slots && cfg.backend != cd::Backend::kCuda) {
    // The host backend's unconditional end barrier makes a slot's position
    // irrelevant there (docs/protocol.md): the flag would re-create nothing.
    spdlog::critical("--unsafe-size-dependent-slots re-creates a GPU staging bug; it needs --backend cuda");
    return 2;
  }
  if (cfg.heartbeat_timeout_ms < 2 * cfg.heartbeat_interval_ms) {
    spdlog::critical("--heartbeat-timeout-ms ({}) must be at least twice --heartbeat-interval-ms ({})",
                     cfg.heartbeat_timeout_ms, cfg.heartbeat_interval_ms);
    return 2;
  }
  if (cfg.ring_depth == 0 || (cfg.ring_depth & (cfg.ring_depth - 1)) != 0) {
    spdlog::critical("--ring-depth must be a power of two, got {}", cfg.ring_depth);
    return 2;
  }
  if (cfg.max_message_bytes % 8 != 0) {
    spdlog::critical("--max-message-bytes must be a multiple of 8, got {}", cfg.max_message_bytes);
    return 2;
  }
  {
    // The largest communicator's segment must be laid out with these
    // settings, or every CreateCommunicator would fail later.
    collectived::ring::SegmentParams p;
    p.world_size = collectived::ring::kMaxRanks;
    p.ring_depth = cfg.ring_depth;
    p.max_message_bytes = cfg.max_message_bytes;
    collectived::ring::SegmentLayout layout;
    if (collectived::Status s = collectived::ring::SegmentLayout::Compute(p, &layout); !s.ok()) {
      spdlog::critical("--ring-depth {} with --max-message-bytes {}: {}", cfg.ring_depth, cfg.max_message_bytes,
                       s.message());
      return 2;
    }
  }
  if (cfg.unsafe_skip_end_barrier || cfg.unsafe_event_before_epilogue || cfg.unsafe_size_dependent_slots) {
    spdlog::critical("UNSAFE MODE: {}{}{}: this daemon re-creates seed bug classes for negative controls; results "
                     "may be WRONG. Never run it for real work.",
                     cfg.unsafe_skip_end_barrier ? "--unsafe-skip-end-barrier " : "",
                     cfg.unsafe_event_before_epilogue ? "--unsafe-event-before-epilogue " : "",
                     cfg.unsafe_size_dependent_slots ? "--unsafe-size-dependent-slots" : "");
  }

  // Full caps must not run the daemon out of descriptors (then nothing is served).
  uint64_t fd_limit = 0;
  if (collectived::Status s = cd::FitFdLimit(cfg, &fd_limit); !s.ok()) {
    spdlog::critical("{}", s.message());
    return 2;
  }
  spdlog::info("RLIMIT_NOFILE {} (the caps may hold {} descriptors)", fd_limit, cd::FdsNeeded(cfg));

  // The cluster forms first: the node id names this daemon's socket.
  // Declared in this order so that the transport (whose progress thread and
  // callbacks use the membership) goes first on every return.
  std::unique_ptr<collectived::cluster::Membership> membership;
  std::unique_ptr<collectived::cluster::UcxTransport> transport;
  uint64_t cluster_secret = 0;
  std::vector<collectived::cluster::NodeInfo> nodes;
  uint32_t node_id = 0;
  int coordinator_fd = -1;  // node 0 in coordinator mode: kept for restarted daemons to rejoin
  collectived::cluster::CoordinatorOptions coordinator;
  std::unique_ptr<collectived::cluster::RejoinService> rejoin;
  if (cfg.cluster == cd::ClusterMode::kCoordinator && (cfg.coordinator.empty() || cfg.cluster_secret.empty())) {
    spdlog::critical("--cluster coordinator needs --coordinator HOST:PORT and --cluster-secret");
    return 2;
  }
  if (cfg.cluster != cd::ClusterMode::kNone) {
    if (collectived::Status s = collectived::cluster::UcxTransport::Create(&transport); !s.ok()) {
      spdlog::critical("cluster: {}", s.ToString());
      return 1;
    }
    collectived::cluster::NodeInfo self;
    self.epoch = static_cast<uint64_t>(std::chrono::system_clock::now().time_since_epoch().count());
    self.pid = static_cast<int32_t>(getpid());
    char host[256] = {};
    gethostname(host, sizeof(host) - 1);
    self.host = host;
    self.worker_address = transport->address();
    collectived::Status formed;
    if (cfg.cluster == cd::ClusterMode::kMpi) {
      formed = collectived::cluster::MpiBootstrap(self, &nodes, &node_id, &cluster_secret);
    } else {
      coordinator.address = cfg.coordinator;
      coordinator.node_rank = cfg.node_rank;
      coordinator.nodes = cfg.nodes;
      coordinator.secret = collectived::cluster::SecretOf(cfg.cluster_secret);
      coordinator.timeout_ns = int64_t{cfg.cluster_timeout_ms} * 1000000;
      spdlog::info("cluster: node {} of {} meeting at {}", cfg.node_rank, cfg.nodes, cfg.coordinator);
      formed = collectived::cluster::CoordinatorBootstrap(self, coordinator, &nodes, &coordinator_fd);
      node_id = cfg.node_rank;
      cluster_secret = coordinator.secret;
    }
    if (!formed.ok()) {
      spdlog::critical("cluster: {}", formed.ToString());
      return 1;
    }
  }
  if (auto at = cfg.socket_path.find("{node}"); at != std::string::npos) {
    cfg.socket_path.replace(at, 6, std::to_string(node_id));
  }

  std::error_code ec;
  const auto dir = std::filesystem::path(cfg.socket_path).parent_path();
  if (!dir.empty()) std::filesystem::create_directories(dir, ec);
  int lock_fd = -1;
  if (!LockSocket(cfg.socket_path, &lock_fd)) return 1;

  // Signals go to the main loop only: block them before any thread starts.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGINT);
  sigaddset(&signals, SIGHUP);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);
  signal(SIGPIPE, SIG_IGN);

  cd::AccessPolicy access(geteuid());
  if (collectived::Status s = cd::AccessPolicy::Resolve(geteuid(), cfg.admin_group, cfg.shared_group, &access);
      !s.ok()) {
    spdlog::critical("{}", s.message());
    return 2;
  }
  cd::Registry registry(cfg, access);
  // The transport's thread calls into the registry: it stops first on every return.
  struct StopTransport {
    collectived::cluster::UcxTransport* transport;
    ~StopTransport() {
      if (transport != nullptr) transport->Stop();
    }
  } stop_transport{transport.get()};
  if (cfg.cluster != cd::ClusterMode::kNone) {
    membership = std::make_unique<collectived::cluster::Membership>(
        node_id, nodes, [&registry](uint32_t node, const std::string& why) {
          spdlog::error("cluster: node {} lost: {}", node, why);
          registry.OnNodeLost(node, why);  // communicators spanning it fail now
        });
    registry.AttachCluster(transport.get(), membership.get());
    transport->SetControlHandler(
        [&registry](uint32_t node, const std::string& payload) { registry.OnClusterMessage(node, payload); });
    collectived::cluster::UcxTransport::Options o;
    o.secret = cluster_secret;
    o.heartbeat_interval_ns = int64_t{cfg.heartbeat_interval_ms} * 1000000;
    o.heartbeat_timeout_ns = int64_t{cfg.heartbeat_timeout_ms} * 1000000;
    if (collectived::Status s = transport->Start(membership.get(), o); !s.ok()) {
      spdlog::critical("cluster: {}", s.ToString());
      return 1;
    }
    if (coordinator_fd >= 0) {
      rejoin = std::make_unique<collectived::cluster::RejoinService>(
          coordinator_fd, coordinator, nodes,
          [m = membership.get()](uint32_t node) { return !m->Alive(node); },
          [t = transport.get()](const collectived::cluster::NodeInfo& info) { t->Rejoined(info); });
      rejoin->Start();
    }
    spdlog::info("cluster: node {} of {} ({}), heartbeats every {} ms, lost after {} ms; UCX {} CUDA-aware", node_id,
                 nodes.size(), cfg.cluster == cd::ClusterMode::kMpi ? "mpi" : "coordinator",
                 cfg.heartbeat_interval_ms, cfg.heartbeat_timeout_ms, transport->cuda_aware() ? "is" : "is not");
  }
  cd::FdServer fd_server(&registry, cfg.socket_path + ".fds");
  if (auto s = fd_server.Start(); !s.ok()) {
    spdlog::critical("fd socket: {}", s.ToString());
    return 1;
  }
  // The daemon accepts gRPC connections itself (GrpcAcceptor): every call's
  // caller is then known by its credentials, and connections are capped.
  cd::GrpcAcceptor::Limits limits;
  limits.max_connections = cfg.max_grpc_connections;
  limits.max_connections_per_uid = cfg.max_grpc_connections_per_uid;
  limits.is_admin = [&access](const collectived::ipc::PeerCredentials& p) { return access.IsAdmin(p); };
  cd::GrpcAcceptor acceptor(cfg.socket_path, limits);
  if (auto s = acceptor.Listen(); !s.ok()) {  // unlinks a dead daemon's stale socket; we hold the lock
    spdlog::critical("gRPC socket: {}", s.ToString());
    return 1;
  }
  std::unique_ptr<grpc::Server> server;
  cd::CollectiveServiceImpl service(
      &registry, fd_server.path(),
      [&acceptor](const std::string& peer, collectived::ipc::PeerCredentials* out) {
        return acceptor.Lookup(peer, out);
      },
      [&server] {
        if (server) server->GetHealthCheckService()->SetServingStatus(false);
      });
  service.SetCluster(cfg.cluster == cd::ClusterMode::kMpi           ? "mpi"
                     : cfg.cluster == cd::ClusterMode::kCoordinator ? "coordinator"
                                                                    : "none",
                     membership.get(), transport.get());
  grpc::EnableDefaultHealthCheckService(true);
  grpc::ServerBuilder builder;
  builder.RegisterService(&service);
  server = builder.BuildAndStart();
  if (!server) {
    spdlog::critical("cannot start the gRPC server");
    return 1;
  }
  acceptor.Start(server.get());
  server->GetHealthCheckService()->SetServingStatus(true);
  spdlog::info("collectived {} serving unix:{} (fd socket {}), backend {}, max message {} bytes, op timeout {} ms",
               COLLECTIVED_VERSION, cfg.socket_path, fd_server.path(), cd::BackendName(cfg.backend),
               cfg.max_message_bytes, cfg.op_timeout_ms);
  // The host backend does not need MPS; where a GPU is visible, say what GPU
  // work on this node would get (without one, MPS means nothing here).
  if (gpu_visible) spdlog::info("{}", cd::DetectMps().Describe());
  std::unique_ptr<cd::MetricsServer> metrics;
  auto serve_metrics = [&](const std::string& listen) -> collectived::Status {
    metrics.reset();
    if (listen.empty()) return collectived::Status::Ok();
    COLLECTIVED_RETURN_IF_ERROR(cd::MetricsServer::Start(listen, &registry, &metrics));
    spdlog::info("metrics: http://{}/metrics (port {})", listen, metrics->port());
    return collectived::Status::Ok();
  };
  if (collectived::Status s = serve_metrics(cfg.metrics_listen); !s.ok()) {
    spdlog::critical("{}", s.message());
    return 2;
  }
  cd::NotifyReady();

  const int64_t watchdog_ns = cd::WatchdogIntervalNs();
  int64_t last_ping = 0;
  int64_t drain_deadline = 0;
  for (;;) {
    // Signals end the wait at once; the tick paces housekeeping (join and
    // registration deadlines are kept to it) and the watchdog.
    timespec tick{0, 100'000'000};
    const int sig = sigtimedwait(&signals, nullptr, &tick);
    if (sig == SIGHUP) {
      // The log level and the metrics endpoint follow the config file as it
      // is now; sessions, communicators and every other setting stay.
      cd::DaemonConfig fresh;
      std::string error;
      if (!Reparse(args, &fresh, &error)) {
        spdlog::error("SIGHUP: the configuration does not parse, nothing changed: {}", error);
      } else {
        spdlog::set_level(spdlog::level::from_str(fresh.log_level));
        if (fresh.metrics_listen != cfg.metrics_listen) {
          collectived::Status s = serve_metrics(fresh.metrics_listen);
          if (!s.ok()) spdlog::error("SIGHUP: {}; metrics are off", s.message());
          cfg.metrics_listen = s.ok() ? fresh.metrics_listen : "";
        }
        cfg.log_level = fresh.log_level;
        spdlog::warn("SIGHUP: reloaded: log level {}, metrics {}", cfg.log_level,
                     metrics ? "http://" + cfg.metrics_listen + "/metrics (port " + std::to_string(metrics->port()) + ")"
                             : std::string("off"));
      }
    } else if (sig == SIGTERM || sig == SIGINT) {
      if (drain_deadline != 0) break;  // second signal: stop now
      spdlog::warn("signal {}: draining (up to {} ms for {} sessions)", sig, cfg.drain_timeout_ms,
                   registry.session_count());
      cd::NotifyStopping();
      registry.SetDraining();
      server->GetHealthCheckService()->SetServingStatus(false);
      drain_deadline = collectived::ring::NowNs() + static_cast<int64_t>(cfg.drain_timeout_ms) * 1000000;
    }
    registry.Housekeeping();
    const int64_t now = collectived::ring::NowNs();
    if (watchdog_ns > 0 && now - last_ping >= watchdog_ns / 2) {
      cd::NotifyWatchdog();
      last_ping = now;
    }
    if (drain_deadline != 0 && (registry.session_count() == 0 || now >= drain_deadline)) break;
  }
  spdlog::info("shutting down ({} sessions left)", registry.session_count());
  registry.CancelPendingJoins("collectived is shutting down");  // no reactor may stay unfinished
  acceptor.Stop();  // no new connections while the open ones finish
  server->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(2));
  fd_server.Stop();
  rejoin.reset();
  if (transport) transport->Stop();
  unlink(cfg.socket_path.c_str());
  close(lock_fd);
  spdlog::info("stopped");
  return 0;
}
