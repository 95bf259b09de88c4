// Programs written against nccl.h (nccl_check.cc) on a real cuda-backend
// collectived: ranks as processes under mpirun sharing the one GPU (run under
// MPS, as tools/gpu-lab/nccl_device_batch.sh does), or spawned one by one
// where a rank is killed (mpirun would end the job), or all in one process.
// Label nccl;gpu: skipped where no GPU is visible.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "tests/integration/daemon_harness.h"

namespace collectived::testing {
namespace {

bool HaveGpu() {
  int n = 0;
  return cudaGetDeviceCount(&n) == cudaSuccess && n > 0;
}

std::string Bin(const char* env, const char* built) {
  const char* e = std::getenv(env);
  return e != nullptr ? e : built;
}

class NcclGpu : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!HaveGpu()) GTEST_SKIP() << "no GPU on this machine";
    // The staging slot the pieces of big staged ops are cut to.
    daemon_ = std::make_unique<Daemon>(std::vector<std::string>{"--backend", "cuda", "--max-message-bytes",
                                                                std::to_string(16 << 20)});
    ASSERT_TRUE(daemon_->ready()) << daemon_->Log();
    setenv("COLLECTIVED_SOCKET", daemon_->socket().c_str(), 1);
  }
  void TearDown() override { unsetenv("COLLECTIVED_SOCKET"); }

  std::vector<std::string> Check(const std::string& mode, std::vector<std::string> extra = {}) const {
    std::vector<std::string> a = {Bin("COLLECTIVED_NCCL_CHECK_BIN", COLLECTIVED_NCCL_CHECK_BIN), "--mode", mode,
                                  "--dir", dir_.path()};
    a.insert(a.end(), extra.begin(), extra.end());
    return a;
  }
  // `np` ranks under mpirun; every rank must print PASS.
  void Mpirun(int np, const std::string& mode, std::vector<std::string> extra = {}, int timeout_ms = 600000) {
    std::vector<std::string> argv = {Bin("MPIEXEC", MPIEXEC_BIN), "--oversubscribe", "--bind-to", "none",
                                     "-np", std::to_string(np), "-x", "COLLECTIVED_SOCKET"};
    // Only variables that are set: mpirun refuses to forward a missing one.
    for (const char* v : {"LD_LIBRARY_PATH", "CUDA_MPS_PIPE_DIRECTORY", "CUDA_MPS_LOG_DIRECTORY"}) {
      if (std::getenv(v) != nullptr) {
        argv.push_back("-x");
        argv.push_back(v);
      }
    }
    for (const std::string& a : Check(mode, extra)) argv.push_back(a);
    Process p(argv, dir_.path() + "/mpirun-" + mode + ".log");
    int code = p.Wait(timeout_ms);
    if (code == -1) {
      // SIGTERM: mpirun ends its ranks (a SIGKILL, in ~Process, would leave
      // them spinning on the GPU for the tests after this one).
      p.Kill(SIGTERM);
      p.Wait(15000);
    }
    const std::string out = p.Output();
    std::printf("%s", out.c_str());
    ASSERT_EQ(code, 0) << out << "\n--- daemon ---\n" << daemon_->Log();
    size_t passes = 0;
    for (size_t at = out.find("PASS rank"); at != std::string::npos; at = out.find("PASS rank", at + 1)) ++passes;
    EXPECT_EQ(passes, static_cast<size_t>(np)) << out;
  }

  TempDir dir_;
  std::unique_ptr<Daemon> daemon_;
};

TEST_F(NcclGpu, EveryTypeAndOpExactTwoRanksTo256MiB) { Mpirun(2, "ops", {"--max-bytes", std::to_string(256 << 20)}); }
TEST_F(NcclGpu, EveryTypeAndOpExactFourRanksTo256MiB) { Mpirun(4, "ops", {"--max-bytes", std::to_string(256 << 20)}); }
TEST_F(NcclGpu, EveryTypeAndOpExactEightRanksTo256MiB) { Mpirun(8, "ops", {"--max-bytes", std::to_string(256 << 20)}); }
TEST_F(NcclGpu, CudaGraphReplayedWithNewValues) { Mpirun(4, "graph"); }
// Modes that take about a second: a rank still running after a minute says
// where it is and ends the run (the H100 once saw the split silent for 390 s).
TEST_F(NcclGpu, SplitByParity) { Mpirun(4, "split", {"--watchdog-s", "60"}); }
TEST_F(NcclGpu, NonBlockingInitReportsInProgressThenSuccess) { Mpirun(2, "nonblocking", {"--watchdog-s", "60"}); }
TEST_F(NcclGpu, AbortFromASecondThreadUnblocksAStalledOp) { Mpirun(2, "abort", {"--watchdog-s", "60"}); }

TEST_F(NcclGpu, EightRanksOfOneProcessOnOneGpu) {
  // A process holding several ranks of one GPU needs a hardware queue per rank (README).
  setenv("CUDA_DEVICE_MAX_CONNECTIONS", "8", 1);
  Process p(Check("initall", {"--rank", "0", "--world", "8"}), dir_.path() + "/initall.log");
  const int code = p.Wait(300000);
  unsetenv("CUDA_DEVICE_MAX_CONNECTIONS");
  ASSERT_EQ(code, 0) << p.Output() << daemon_->Log();
  EXPECT_NE(p.Output().find("PASS"), std::string::npos) << p.Output();
}

// A killed rank: its peers see ncclRemoteError naming it, long before the op deadline.
TEST_F(NcclGpu, AKilledRankIsSeenThroughGetAsyncError) {
  const int n = 3;
  std::vector<std::unique_ptr<Process>> ranks;
  for (int r = 0; r < n; ++r) {
    ranks.push_back(std::make_unique<Process>(Check("kill", {"--rank", std::to_string(r), "--world", std::to_string(n)}),
                                              dir_.path() + "/kill-" + std::to_string(r) + ".log"));
  }
  for (int r = 0; r < n; ++r) {
    const int code = ranks[r]->Wait(120000);
    const std::string out = ranks[r]->Output();
    std::printf("%s", out.c_str());
    if (r == n - 1) {
      EXPECT_EQ(code, 128 + SIGKILL) << out;
    } else {
      EXPECT_EQ(code, 0) << out << daemon_->Log();
      EXPECT_NE(out.find("PASS"), std::string::npos) << out;
    }
  }
}

}  // namespace
}  // namespace collectived::testing
