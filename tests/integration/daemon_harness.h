// Test harness: a real collectived on a private socket in a temp dir, and
// client processes spawned from the test helper binary. Cleans up after itself.
#ifndef COLLECTIVED_TESTS_INTEGRATION_DAEMON_HARNESS_H_
#define COLLECTIVED_TESTS_INTEGRATION_DAEMON_HARNESS_H_

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "collectived/client.h"

extern char** environ;

namespace collectived::testing {

// Binaries under test: the build's, unless the environment names others
// (a bundle carried to another machine).
inline std::string DaemonBin() {
  const char* e = std::getenv("COLLECTIVED_DAEMON_BIN");
  return e != nullptr ? e : COLLECTIVED_DAEMON_BIN;
}
inline std::string TestClientBin() {
  const char* e = std::getenv("COLLECTIVED_TEST_CLIENT_BIN");
  return e != nullptr ? e : COLLECTIVED_TEST_CLIENT_BIN;
}

// A spawned process with stdout+stderr captured to a file.
class Process {
 public:
  Process(const std::vector<std::string>& argv, const std::string& log_path) : log_path_(log_path) {
    std::vector<char*> args;
    for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
    args.push_back(nullptr);
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_addopen(&fa, 1, log_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    posix_spawn_file_actions_adddup2(&fa, 1, 2);
    if (posix_spawn(&pid_, args[0], &fa, nullptr, args.data(), environ) != 0) pid_ = -1;
    posix_spawn_file_actions_destroy(&fa);
  }
  ~Process() {
    if (pid_ > 0 && !exited_) {
      kill(pid_, SIGKILL);
      waitpid(pid_, nullptr, 0);
    }
  }
  pid_t pid() const { return pid_; }
  // Exit code, or -1 on timeout (the process keeps running), 128+sig if killed.
  int Wait(int timeout_ms) {
    if (exited_) return code_;
    const auto end = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
    for (;;) {
      int st = 0;
      if (waitpid(pid_, &st, WNOHANG) == pid_) {
        exited_ = true;
        code_ = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
        return code_;
      }
      if (std::chrono::steady_clock::now() >= end) return -1;
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
  }
  void Kill(int sig) { kill(pid_, sig); }
  std::string Output() const {
    std::ifstream f(log_path_);
    std::stringstream ss;
    ss << f.rdbuf();
    return ss.str();
  }

 private:
  pid_t pid_ = -1;
  bool exited_ = false;
  int code_ = -1;
  std::string log_path_;
};

// A process's user + system CPU time, in seconds (all its threads).
inline double CpuSeconds(pid_t pid) {
  std::ifstream f("/proc/" + std::to_string(pid) + "/stat");
  std::string stat((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  std::istringstream rest(stat.substr(stat.rfind(')') + 2));  // the name may hold spaces
  std::string field;
  double ticks = 0;
  for (int i = 3; i <= 15 && rest >> field; ++i) {
    if (i == 14 || i == 15) ticks += std::stod(field);  // utime, stime
  }
  return ticks / static_cast<double>(sysconf(_SC_CLK_TCK));
}

// The options of rank `rank` of communicator `key` (world `world`), as most tests join.
inline CommunicatorOptions CommOptions(const std::string& key, uint32_t world, uint32_t rank,
                                       ExecutionMode mode = ExecutionMode::kDefault) {
  CommunicatorOptions o;
  o.key = key;
  o.world_size = world;
  o.rank = rank;
  o.mode = mode;
  return o;
}

class TempDir {
 public:
  TempDir() {
    char tmpl[] = "/tmp/collectived-test-XXXXXX";
    path_ = mkdtemp(tmpl);
  }
  ~TempDir() { std::filesystem::remove_all(path_); }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

// A daemon on `<tmp>/c.sock`, ready when constructed (or failed()).
class Daemon {
 public:
  // `wrapper`: argv the daemon's command line is appended to (e.g. a shell
  // that lowers its limits and execs it: the pid stays the daemon's).
  explicit Daemon(std::vector<std::string> extra_flags = {}, std::vector<std::string> wrapper = {}) {
    std::vector<std::string> argv = wrapper;
    for (const std::string& a : {DaemonBin(), std::string("--socket"), socket(), std::string("--log-level"),
                                 std::string("info")}) {
      argv.push_back(a);
    }
    argv.insert(argv.end(), extra_flags.begin(), extra_flags.end());
    process_ = std::make_unique<Process>(argv, dir_.path() + "/daemon.log");
    for (int i = 0; i < 400 && !ready_; ++i) {  // up to 4 s
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
      if (process_->Wait(0) != -1) break;
      ready_ = std::filesystem::exists(socket()) && std::filesystem::exists(socket() + ".fds");
    }
  }
  ~Daemon() {
    process_->Kill(SIGTERM);
    if (process_->Wait(15000) == -1) process_->Kill(SIGKILL);
  }
  bool ready() const { return ready_; }
  std::string socket() const { return dir_.path() + "/c.sock"; }
  std::string dir() const { return dir_.path(); }
  std::string Log() const { return process_->Output(); }
  Process& process() { return *process_; }

  std::unique_ptr<Client> Connect(const std::string& name = "test") const {
    std::unique_ptr<Client> c;
    Status s = Client::Connect({.socket_path = socket(), .client_name = name}, &c);
    if (!s.ok()) std::fprintf(stderr, "connect: %s\n", s.ToString().c_str());
    return c;
  }
  // A helper client process (tests/integration/test_client.cc).
  std::unique_ptr<Process> SpawnClient(const std::string& key, uint32_t world, uint32_t rank,
                                       std::vector<std::string> extra = {}) const {
    std::vector<std::string> argv = {TestClientBin(), "--socket", socket(), "--key", key, "--world",
                                     std::to_string(world), "--rank", std::to_string(rank)};
    argv.insert(argv.end(), extra.begin(), extra.end());
    return std::make_unique<Process>(argv, dir_.path() + "/client-" + key + "-" + std::to_string(rank) + ".log");
  }

 private:
  TempDir dir_;
  std::unique_ptr<Process> process_;
  bool ready_ = false;
};

}  // namespace collectived::testing

#endif  // COLLECTIVED_TESTS_INTEGRATION_DAEMON_HARNESS_H_
