#include "daemon/mps.h"

#include <gtest/gtest.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>

namespace collectived::daemon {
namespace {

class MpsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/collectived-mps-XXXXXX";
    root_ = mkdtemp(tmpl);
    std::filesystem::create_directories(root_ + "/proc/1");
    std::ofstream(root_ + "/proc/1/comm") << "bash\n";
    std::filesystem::create_directories(root_ + "/pipes");
  }
  void TearDown() override { std::filesystem::remove_all(root_); }
  void StartFakeControl() {
    std::filesystem::create_directories(root_ + "/proc/4242");
    std::ofstream(root_ + "/proc/4242/comm") << "nvidia-cuda-mps\n";  // what /proc shows for nvidia-cuda-mps-control
  }
  std::string root_;
};

TEST_F(MpsTest, NothingRunning) {
  MpsState s = DetectMps(root_ + "/proc", (root_ + "/pipes").c_str());
  EXPECT_FALSE(s.active());
  EXPECT_NE(s.Describe().find("no nvidia-cuda-mps-control process"), std::string::npos) << s.Describe();
  EXPECT_NE(s.Describe().find("285 us"), std::string::npos);
}

TEST_F(MpsTest, ControlWithoutPipe) {
  StartFakeControl();
  MpsState s = DetectMps(root_ + "/proc", (root_ + "/pipes").c_str());
  EXPECT_TRUE(s.control_running);
  EXPECT_FALSE(s.active());
  EXPECT_NE(s.Describe().find("no control pipe"), std::string::npos) << s.Describe();
}

TEST_F(MpsTest, ActiveNamesTheServedUid) {
  StartFakeControl();
  ASSERT_EQ(mkfifo((root_ + "/pipes/control").c_str(), 0600), 0);
  MpsState s = DetectMps(root_ + "/proc", (root_ + "/pipes").c_str());
  EXPECT_TRUE(s.active());
  EXPECT_EQ(s.pipe_owner, getuid());
  EXPECT_NE(s.Describe().find("serving uid " + std::to_string(getuid())), std::string::npos) << s.Describe();
}

// Newer drivers' control daemon listens on a unix socket named control.
TEST_F(MpsTest, ActiveWithAControlSocket) {
  StartFakeControl();
  const std::string path = root_ + "/pipes/control";
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  ASSERT_LT(path.size(), sizeof(addr.sun_path));
  std::memcpy(addr.sun_path, path.c_str(), path.size() + 1);
  const int fd = socket(AF_UNIX, SOCK_STREAM, 0);
  ASSERT_GE(fd, 0);
  const int bound = bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr));
  close(fd);  // the socket file stays until TearDown removes the directory
  ASSERT_EQ(bound, 0);
  MpsState s = DetectMps(root_ + "/proc", (root_ + "/pipes").c_str());
  EXPECT_TRUE(s.active()) << s.Describe();
  EXPECT_NE(s.Describe().find("MPS active"), std::string::npos) << s.Describe();
}

TEST_F(MpsTest, RegularFileIsNotAPipe) {
  StartFakeControl();
  std::ofstream(root_ + "/pipes/control") << "x";
  EXPECT_FALSE(DetectMps(root_ + "/proc", (root_ + "/pipes").c_str()).active());
}

}  // namespace
}  // namespace collectived::daemon
