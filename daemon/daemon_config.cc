#include "daemon/daemon_config.h"

#include <sys/resource.h>

#include <cerrno>
#include <cstring>
#include <iterator>

namespace collectived::daemon {
namespace {

template <typename E>
struct Spelling {
  const char* name;
  E value;
};

constexpr Spelling<Backend> kBackends[] = {
    {"auto", Backend::kAuto}, {"host", Backend::kHost}, {"cuda", Backend::kCuda}};
constexpr Spelling<GpuPath> kGpuPaths[] = {{"fused", GpuPath::kFused}, {"copy-engine", GpuPath::kCopyEngine}};
constexpr Spelling<GpuMemoryExport> kGpuMemoryExports[] = {
    {"auto", GpuMemoryExport::kAuto}, {"cumem", GpuMemoryExport::kCuMem}, {"legacy-ipc", GpuMemoryExport::kLegacyIpc}};
constexpr Spelling<ClusterMode> kClusterModes[] = {
    {"none", ClusterMode::kNone}, {"mpi", ClusterMode::kMpi}, {"coordinator", ClusterMode::kCoordinator}};

template <typename E, size_t N>
std::vector<std::string> Names(const Spelling<E> (&table)[N]) {
  std::vector<std::string> out;
  for (const auto& s : table) out.push_back(s.name);
  return out;
}

// "--flag must be a, b or c, got 'x'": the form main.cc has always used.
template <typename E, size_t N>
Status Parse(const char* flag, const Spelling<E> (&table)[N], const std::string& text, E* out) {
  std::string choices;
  for (size_t i = 0; i < N; ++i) {
    if (table[i].name == text) {
      *out = table[i].value;
      return Status::Ok();
    }
    choices += (i == 0 ? "" : i + 1 == N ? " or " : ", ") + std::string(table[i].name);
  }
  return Status::InvalidArgument(std::string(flag) + " must be " + choices + ", got '" + text + "'");
}

}  // namespace

Status ParseConfigChoices(const ConfigChoices& in, DaemonConfig* cfg) {
  DaemonConfig parsed = *cfg;
  COLLECTIVED_RETURN_IF_ERROR(Parse("--backend", kBackends, in.backend, &parsed.backend));
  COLLECTIVED_RETURN_IF_ERROR(Parse("--gpu-gather-path", kGpuPaths, in.gpu_gather_path, &parsed.gpu_gather_path));
  COLLECTIVED_RETURN_IF_ERROR(Parse("--gpu-reduce-path", kGpuPaths, in.gpu_reduce_path, &parsed.gpu_reduce_path));
  COLLECTIVED_RETURN_IF_ERROR(
      Parse("--gpu-memory-export", kGpuMemoryExports, in.gpu_memory_export, &parsed.gpu_memory_export));
  COLLECTIVED_RETURN_IF_ERROR(Parse("--cluster", kClusterModes, in.cluster, &parsed.cluster));
  *cfg = parsed;
  return Status::Ok();
}

std::vector<std::string> BackendChoices() { return Names(kBackends); }
std::vector<std::string> ClusterChoices() { return Names(kClusterModes); }
std::vector<std::string> GpuPathChoices() { return Names(kGpuPaths); }
std::vector<std::string> GpuMemoryExportChoices() { return Names(kGpuMemoryExports); }

const char* BackendName(Backend backend) {
  for (const auto& s : kBackends) {
    if (s.value == backend) return s.name;
  }
  return "unknown";
}

uint64_t FdsNeeded(const DaemonConfig& cfg) {
  return kFdReserve + uint64_t{cfg.max_fd_connections} + 2 * (uint64_t{cfg.max_grpc_connections} + kAdminConnectionReserve) + cfg.max_buffers +
         cfg.max_communicators;
}

Status FitFdLimit(const DaemonConfig& cfg, uint64_t* limit) {
  rlimit rl{};
  if (getrlimit(RLIMIT_NOFILE, &rl) != 0) return Status::Internal(std::string("getrlimit: ") + std::strerror(errno));
  const uint64_t need = FdsNeeded(cfg);
  if (rl.rlim_cur != RLIM_INFINITY && rl.rlim_cur < need) {
    if (rl.rlim_max != RLIM_INFINITY && rl.rlim_max < need) {
      return Status::FailedPrecondition(
          "the caps may hold " + std::to_string(need) + " file descriptors (" + std::to_string(kFdReserve) +
          " reserved + --max-fd-connections " + std::to_string(cfg.max_fd_connections) + " + 2 x --max-grpc-connections " +
          std::to_string(cfg.max_grpc_connections) + " + --max-buffers " + std::to_string(cfg.max_buffers) +
          " + --max-communicators " + std::to_string(cfg.max_communicators) + ") but RLIMIT_NOFILE allows " +
          std::to_string(rl.rlim_max) + ": raise LimitNOFILE (ulimit -n) or lower the caps");
    }
    rl.rlim_cur = rl.rlim_max;  // the hard limit, not just `need`: headroom costs nothing
    if (setrlimit(RLIMIT_NOFILE, &rl) != 0) {
      return Status::Internal(std::string("setrlimit(RLIMIT_NOFILE): ") + std::strerror(errno));
    }
  }
  *limit = rl.rlim_cur;
  return Status::Ok();
}

}  // namespace collectived::daemon
