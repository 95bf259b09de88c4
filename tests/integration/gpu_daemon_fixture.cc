#include "tests/integration/gpu_daemon_fixture.h"

#include <chrono>
#include <csignal>
#include <cstdlib>
#include <thread>

#include "tests/support/gpu_upload.h"

namespace collectived::gpu_test {

bool HaveGpu() {
  int n = 0;
  return gpuGetDeviceCount(&n) == gpuSuccess && n > 0;
}

Status Upload(void* dst, const std::vector<uint8_t>& host) {
  return testing::UploadToDevice(dst, host.data(), host.size());
}

std::vector<uint8_t> Download(const void* src, uint64_t bytes) {
  std::vector<uint8_t> host(bytes);
  EXPECT_EQ(gpuMemcpy(host.data(), src, bytes, gpuMemcpyDeviceToHost), gpuSuccess);
  return host;
}

void Prepare(DataType dt, ReduceOp op, bool gather, uint32_t world, uint32_t r, uint64_t seed, uint64_t count,
             void* send, void* recv) {
  const size_t es = DataTypeSize(dt);
  const uint64_t out_count = gather ? world * count : count;
  std::vector<uint8_t> host(out_count * es);
  testing::Poison(dt, host.data(), out_count);
  ASSERT_TRUE(Upload(recv, host).ok());
  std::vector<uint8_t> in(count * es);
  testing::FillInput(dt, op, r, seed, in.data(), count);
  ASSERT_TRUE(Upload(send, in).ok());
}

void CheckedAllReduce(const Daemon& d, Ranks& ranks, Buffers& b, DataType dt, ReduceOp op, uint64_t count,
                      bool in_place, uint64_t seed, const std::string& what) {
  CheckedAllReduce([&d] { return d.Log(); }, ranks, b, dt, op, count, in_place, seed, what);
}

void CheckedAllReduce(const std::function<std::string()>& log, Ranks& ranks, Buffers& b, DataType dt, ReduceOp op,
                      uint64_t count, bool in_place, uint64_t seed, const std::string& what) {
  const uint32_t n = ranks.n();
  std::vector<Handle> h(n);
  for (uint32_t r = 0; r < n; ++r) {  // in place: poison first, then the input into recv
    Prepare(dt, op, false, n, r, seed, count, in_place ? b.recv[r] : b.send[r], b.recv[r]);
  }
  for (uint32_t r = 0; r < n; ++r) {
    Status s = ranks.comms[r]->AllReduce(in_place ? b.recv[r] : b.send[r], b.recv[r], count, dt, op,
                                         ranks.streams[r], &h[r]);
    ASSERT_TRUE(s.ok()) << s.ToString();
  }
  for (uint32_t r = 0; r < n; ++r) {
    Status s = h[r].Wait();
    ASSERT_TRUE(s.ok()) << s.ToString() << log();
    auto out = Download(b.recv[r], count * DataTypeSize(dt));
    EXPECT_EQ(testing::CountWrongAllReduce(dt, op, n, seed, out.data(), count), 0u)
        << what << " n=" << n << " " << DataTypeName(dt) << " " << ReduceOpName(op) << " count=" << count
        << (in_place ? " in place" : "") << " rank " << r;
  }
}

void CheckedAllGather(Ranks& ranks, const std::vector<void*>& send, const std::vector<void*>& recv, uint64_t count,
                      bool in_place, uint64_t seed, const std::string& what) {
  const uint32_t n = ranks.n();
  std::vector<Handle> h(n);
  auto send_of = [&](uint32_t r) {
    return in_place ? static_cast<uint8_t*>(recv[r]) + r * count * 4 : static_cast<uint8_t*>(send[r]);
  };
  for (uint32_t r = 0; r < n; ++r) {
    Prepare(DataType::kFloat32, ReduceOp::kUnspecified, true, n, r, seed, count, send_of(r), recv[r]);
  }
  for (uint32_t r = 0; r < n; ++r) {
    Status s = ranks.comms[r]->AllGather(send_of(r), recv[r], count, DataType::kFloat32, ranks.streams[r], &h[r]);
    ASSERT_TRUE(s.ok()) << s.ToString();
  }
  for (uint32_t r = 0; r < n; ++r) {
    Status s = h[r].Wait();
    ASSERT_TRUE(s.ok()) << s.ToString();
    auto out = Download(recv[r], n * count * 4);
    EXPECT_EQ(testing::CountWrongAllGather(DataType::kFloat32, n, seed, out.data(), count), 0u)
        << what << " all-gather n=" << n << " count=" << count << (in_place ? " in place" : "") << " rank " << r;
  }
}

std::unique_ptr<v1::CollectiveService::Stub> RawStub(const Daemon& d) {
  return v1::CollectiveService::NewStub(grpc::CreateChannel("unix:" + d.socket(), grpc::InsecureChannelCredentials()));
}

v1::GetStatsResponse Stats(const Daemon& d) {
  v1::GetStatsResponse r;
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
  EXPECT_TRUE(RawStub(d)->GetStats(&ctx, v1::GetStatsRequest(), &r).ok());
  return r;
}

std::vector<std::string> DaemonFlags(std::vector<std::string> extra) {
  std::vector<std::string> f = {"--backend", "cuda", "--max-message-bytes", std::to_string(kMaxMessage)};
  f.insert(f.end(), extra.begin(), extra.end());
  return f;
}

std::string GpuClientBin() {
  const char* e = std::getenv("COLLECTIVED_GPU_TEST_CLIENT_BIN");
  return e != nullptr ? e : COLLECTIVED_GPU_TEST_CLIENT_BIN;
}

void ExpectKilledPeerAborts(const Daemon& d, const std::string& key) {
  auto spawn = [&](uint32_t rank, std::vector<std::string> extra) {
    std::vector<std::string> argv = {GpuClientBin(), "--socket", d.socket(), "--key", key, "--world", "2",
                                     "--rank", std::to_string(rank)};
    argv.insert(argv.end(), extra.begin(), extra.end());
    return std::make_unique<testing::Process>(argv, d.dir() + "/gpu-" + key + std::to_string(rank) + ".log");
  };
  auto survivor = spawn(0, {"--expect", std::to_string(static_cast<int>(StatusCode::kAborted))});
  auto victim = spawn(1, {"--hang", "1"});
  for (int i = 0; i < 600 && survivor->Output().find("posted") == std::string::npos; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  ASSERT_NE(survivor->Output().find("posted"), std::string::npos) << survivor->Output() << victim->Output();
  std::this_thread::sleep_for(std::chrono::milliseconds(200));  // its kernel is spinning for rank 1
  const auto t0 = std::chrono::steady_clock::now();
  victim->Kill(SIGKILL);
  EXPECT_EQ(survivor->Wait(kOpTimeoutMs), 0) << survivor->Output();
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(10));
  EXPECT_NE(survivor->Output().find("rank 1"), std::string::npos) << survivor->Output();
}

}  // namespace collectived::gpu_test
