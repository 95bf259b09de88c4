#include "daemon/grpc_acceptor.h"

#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <thread>
#include <vector>

#include "collectived/v1/collectived.grpc.pb.h"
#include "ipc/fd_channel.h"

namespace collectived::daemon {
namespace {

// True when the daemon closed `fd` (read gives EOF or an error) within `ms`.
bool Closed(int fd, int ms) {
  pollfd p{fd, POLLIN, 0};
  if (poll(&p, 1, ms) <= 0) return false;
  char c;
  return recv(fd, &c, 1, MSG_DONTWAIT) <= 0;
}

class GrpcAcceptorTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/collectived-acceptor-XXXXXX";
    dir_ = mkdtemp(tmpl);
    grpc::ServerBuilder builder;
    builder.RegisterService(&service_);  // a server needs a service; its calls are not made here
    server_ = builder.BuildAndStart();
    ASSERT_NE(server_, nullptr);
  }
  void TearDown() override {
    for (int fd : fds_) close(fd);
    acceptor_.reset();
    if (server_) server_->Shutdown(std::chrono::system_clock::now());
    std::filesystem::remove_all(dir_);
  }
  void Start(GrpcAcceptor::Limits limits) {
    acceptor_ = std::make_unique<GrpcAcceptor>(dir_ + "/g.sock", limits);
    ASSERT_TRUE(acceptor_->Listen().ok());
    acceptor_->Start(server_.get());
  }
  // Opens `n` connections; returns how many the acceptor kept.
  size_t Connect(int n) {
    for (int i = 0; i < n; ++i) {
      int fd = -1;
      EXPECT_TRUE(ipc::ConnectUnix(dir_ + "/g.sock", &fd).ok());
      fds_.push_back(fd);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    return acceptor_->connections();
  }
  std::string dir_;
  v1::CollectiveService::CallbackService service_;
  std::unique_ptr<grpc::Server> server_;
  std::unique_ptr<GrpcAcceptor> acceptor_;
  std::vector<int> fds_;
};

TEST_F(GrpcAcceptorTest, OneUidCannotTakeEverySlot) {
  Start({/*max_connections=*/10, /*max_connections_per_uid=*/3, [](const ipc::PeerCredentials&) { return false; }});
  EXPECT_EQ(Connect(5), 3u);
  EXPECT_FALSE(Closed(fds_[0], 50));  // the first three are kept
  EXPECT_TRUE(Closed(fds_[3], 1000));
  EXPECT_TRUE(Closed(fds_[4], 1000));
}

TEST_F(GrpcAcceptorTest, AnAdministratorCanConnectPastTheCapsWithinItsReserve) {
  Start({10, 3, [](const ipc::PeerCredentials&) { return true; }});
  EXPECT_EQ(Connect(3 + GrpcAcceptor::kAdminReserve + 2), 3u + GrpcAcceptor::kAdminReserve);
}

TEST_F(GrpcAcceptorTest, TheGlobalCapHoldsForEveryone) {
  Start({2, 100, nullptr});
  EXPECT_EQ(Connect(4), 2u);
}

}  // namespace
}  // namespace collectived::daemon
