// Another local user (a process run as nobody) against a daemon serving
// root's jobs: every call on root's session is refused even with its token,
// as are joining or spoiling root's forming communicator, draining, and
// reading root's keys; its own session is served. The same process run as
// root is the negative control: the checks it passes are the ones that
// refused nobody.
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <map>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "collectived/v1/collectived.grpc.pb.h"
#include "tests/integration/daemon_harness.h"
#include "tests/support/exact_data.h"

namespace collectived {
namespace {

using testing::Daemon;
using testing::Process;

constexpr int kPermissionDenied = static_cast<int>(grpc::StatusCode::PERMISSION_DENIED);

struct Said {
  int code = -1;
  std::string message;
};

// Sanitizer builds (tests/sanitizers/run.sh) name a suppressions file in the
// source tree and a reports dir that another uid may not reach: TSan then
// dies at start (exit 66, its suppressions unreadable). For that uid: the
// suppressions copied into `dir`, reports to stderr (the test's own log; a
// report fails the run through its exit code).
std::vector<std::string> SanitizerEnvFor(const std::string& dir) {
  std::vector<std::string> words;
  for (const char* var : {"ASAN_OPTIONS", "UBSAN_OPTIONS", "LSAN_OPTIONS", "TSAN_OPTIONS"}) {
    const char* value = std::getenv(var);
    if (value == nullptr) continue;
    std::string kept;
    std::istringstream in(value);
    std::string option;
    while (std::getline(in, option, ':')) {
      if (option.rfind("log_path=", 0) == 0) continue;
      if (option.rfind("suppressions=", 0) == 0) {
        const std::string copy = dir + "/" + var + ".supp";
        std::error_code ec;
        std::filesystem::copy_file(option.substr(13), copy, std::filesystem::copy_options::overwrite_existing, ec);
        chmod(copy.c_str(), 0644);
        option = "suppressions=" + copy;
      }
      kept += (kept.empty() ? "" : ":") + option;
    }
    words.push_back(std::string(var) + "=" + kept);
  }
  return words;
}

// The intruder's lines: "<what> <code> <message>" (stats_comm lines kept whole).
std::map<std::string, Said> Parse(const std::string& out, std::vector<std::string>* stats_lines) {
  std::map<std::string, Said> said;
  std::istringstream in(out);
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("stats_comm ", 0) == 0) {
      stats_lines->push_back(line);
      continue;
    }
    std::istringstream l(line);
    std::string what;
    Said s;
    l >> what >> s.code;
    std::getline(l, s.message);
    said[what] = s;
  }
  return said;
}

class AccessTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (geteuid() != 0) GTEST_SKIP() << "running a client as another uid needs root";
    if (!std::filesystem::exists("/usr/bin/setpriv")) GTEST_SKIP() << "no setpriv (util-linux)";
    ASSERT_TRUE(daemon_.ready()) << daemon_.Log();
    // Let another user reach the sockets and the binary (the daemon makes its
    // sockets 0660: an operator grants access by group, a test by mode).
    chmod(daemon_.dir().c_str(), 0755);
    chmod(daemon_.socket().c_str(), 0666);
    chmod((daemon_.socket() + ".fds").c_str(), 0666);
    intruder_ = daemon_.dir() + "/intruder";
    std::filesystem::copy_file(COLLECTIVED_INTRUDER_BIN, intruder_);
    chmod(intruder_.c_str(), 0755);
    // And the client library beside it: the build tree may be out of another
    // uid's reach (a checkout under /root, or in a 0700 temp dir).
    std::filesystem::copy_file(COLLECTIVED_CLIENT_LIB, daemon_.dir() + "/" + COLLECTIVED_CLIENT_SONAME);
    chmod((daemon_.dir() + "/" + COLLECTIVED_CLIENT_SONAME).c_str(), 0755);

    victim_ = daemon_.Connect("victim");
    ASSERT_NE(victim_, nullptr);
    CommunicatorOptions o = testing::CommOptions("victim-solo", 1, 0, ExecutionMode::kDaemon);
    ASSERT_TRUE(victim_->CreateCommunicator(o, &comm_).ok());
    ASSERT_TRUE(victim_->AllocBuffer(64 * 4, &buffer_).ok());
    // A second job of root's, still forming: rank 0 waits for rank 1.
    forming_client_ = daemon_.Connect("victim-forming");
    ASSERT_NE(forming_client_, nullptr);
    forming_ = std::thread([this] {
      CommunicatorOptions f = testing::CommOptions("victim-forming", 2, 0);
      f.join_timeout_ms = 20000;
      forming_status_ = forming_client_->CreateCommunicator(f, &forming_comm_);
    });
    std::this_thread::sleep_for(std::chrono::milliseconds(200));  // rank 0 is waiting by now
  }
  void TearDown() override {
    if (forming_.joinable()) {
      // Form it from root's side if nobody did, so the thread ends.
      auto rank1 = daemon_.Connect("victim-rank1");
      CommunicatorOptions f = testing::CommOptions("victim-forming", 2, 1);
      std::unique_ptr<Communicator> c;
      if (rank1) rank1_status_ = rank1->CreateCommunicator(f, &c);
      forming_.join();
    }
  }

  // Runs the intruder (as `uid`, or as this process's own when -1).
  std::map<std::string, Said> RunIntruder(int uid, std::vector<std::string>* stats_lines) {
    std::vector<std::string> argv;
    if (uid >= 0) {
      argv = {"/usr/bin/setpriv", "--reuid=" + std::to_string(uid), "--regid=" + std::to_string(uid),
              "--clear-groups"};
    }
    argv.push_back("/usr/bin/env");
    argv.push_back("LD_LIBRARY_PATH=" + daemon_.dir());  // the client library copied there
    if (uid >= 0) {
      for (const std::string& w : SanitizerEnvFor(daemon_.dir())) argv.push_back(w);
    }
    for (const std::string& a :
         {intruder_, daemon_.socket(), std::to_string(victim_->session_id()), std::to_string(victim_->session_token()),
          std::to_string(comm_->id()), std::to_string(buffer_.id()), std::string("victim-forming")}) {
      argv.push_back(a);
    }
    Process p(argv, daemon_.dir() + "/intruder-" + std::to_string(uid) + ".log");
    EXPECT_EQ(p.Wait(60000), 0) << p.Output();
    return Parse(p.Output(), stats_lines);
  }

  Daemon daemon_{{"--join-timeout-ms", "20000", "--max-message-bytes", "1048576"}};
  std::string intruder_;
  std::unique_ptr<Client> victim_, forming_client_;
  std::unique_ptr<Communicator> comm_, forming_comm_;
  Buffer buffer_;
  std::thread forming_;
  Status forming_status_, rank1_status_;
};

TEST_F(AccessTest, AnotherUidIsRefusedEverythingButItsOwnSession) {
  std::vector<std::string> stats;
  auto said = RunIntruder(65534, &stats);
  ASSERT_EQ(said.count("own_session"), 1u) << daemon_.Log();
  EXPECT_EQ(said["own_session"].code, 0) << said["own_session"].message;  // it reaches the daemon
  // With root's session token in hand, still refused: the token is not enough.
  for (const char* what : {"alloc_buffer", "submit", "free_buffer", "destroy_communicator", "detach"}) {
    EXPECT_EQ(said[what].code, kPermissionDenied) << what << ": " << said[what].message;
    EXPECT_NE(said[what].message.find("belongs to uid 0; this call comes from uid 65534"), std::string::npos)
        << what << ": " << said[what].message;
  }
  EXPECT_EQ(said["fd_hello"].code, kPermissionDenied) << said["fd_hello"].message;
  for (const char* what : {"join", "join_refusing"}) {
    EXPECT_EQ(said[what].code, kPermissionDenied) << what << ": " << said[what].message;
    EXPECT_NE(said[what].message.find("uid 65534 may not join"), std::string::npos) << said[what].message;
  }
  EXPECT_EQ(said["drain"].code, kPermissionDenied) << said["drain"].message;
  EXPECT_EQ(said["stats"].code, 0);
  int root_comms = 0;
  for (const std::string& l : stats) {
    if (l.find(" owner 0 ") == std::string::npos) continue;
    ++root_comms;
    EXPECT_NE(l.find("hidden 1 key ''"), std::string::npos) << l;
  }
  EXPECT_GE(root_comms, 2);  // victim-solo and victim-forming, both hidden

  // Nothing of root's was touched: its op runs exact, its forming job forms.
  testing::FillInput(DataType::kFloat32, ReduceOp::kSum, 0, 11, buffer_.data(), 64);
  Handle h;
  ASSERT_TRUE(comm_->AllReduce(buffer_, buffer_, 64, DataType::kFloat32, ReduceOp::kSum, &h).ok());
  ASSERT_TRUE(h.Wait().ok());
  EXPECT_EQ(testing::CountWrongAllReduce(DataType::kFloat32, ReduceOp::kSum, 1, 11, buffer_.data(), 64), 0u);
  TearDown();
  EXPECT_TRUE(forming_status_.ok()) << forming_status_.ToString();
  EXPECT_TRUE(rank1_status_.ok()) << rank1_status_.ToString();
}

// The negative control: the same attempts from root's own uid (the victim's
// token in hand) are served, so each refusal above came from the uid check.
TEST_F(AccessTest, TheSameAttemptsFromTheOwnersUidAreServed) {
  std::vector<std::string> stats;
  auto said = RunIntruder(-1, &stats);
  for (const char* what : {"own_session", "alloc_buffer", "submit", "join", "stats", "drain"}) {
    EXPECT_EQ(said[what].code, 0) << what << ": " << said[what].message;
  }
  bool visible = false;
  for (const std::string& l : stats) visible |= l.find("hidden 0 key 'victim-solo'") != std::string::npos;
  EXPECT_TRUE(visible);
  forming_.join();  // the intruder's join formed it
  EXPECT_TRUE(forming_status_.ok()) << forming_status_.ToString();
}

}  // namespace
}  // namespace collectived
