// A GPU rank in its own process, for the GPU integration tests:
//   gpu_test_client --socket S --key K --world N --rank R [--hang 1] [--expect CODE]
// Joins a GPU communicator on device 0. With --hang 1 it then sleeps without
// posting (a peer to kill mid-op). Otherwise it posts one all-reduce of exact
// inputs, prints "posted", waits, and prints the status; it exits 0 iff the
// status code is --expect (default 0, OK) and, when OK, every element is exact.
#include <cuda_runtime.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "collectived/client.h"
#include "tests/support/args.h"

using namespace collectived;
using collectived::testing::Arg;

int main(int argc, char** argv) {
  const uint32_t world = std::stoul(Arg(argc, argv, "--world", "2"));
  const uint32_t rank = std::stoul(Arg(argc, argv, "--rank", "0"));
  const int expect = std::stoi(Arg(argc, argv, "--expect", "0"));
  std::unique_ptr<Client> client;
  Status s = Client::Connect({.socket_path = Arg(argc, argv, "--socket", ""), .client_name = "gpu test client"},
                             &client);
  std::unique_ptr<Communicator> comm;
  CommunicatorOptions o;
  o.key = Arg(argc, argv, "--key", "k");
  o.world_size = world;
  o.rank = rank;
  o.device = 0;
  if (s.ok()) s = client->CreateCommunicator(o, &comm);
  if (!s.ok()) {
    std::printf("setup: %s\n", s.ToString().c_str());
    return 2;
  }
  std::printf("joined\n");
  std::fflush(stdout);
  if (std::stoi(Arg(argc, argv, "--hang", "0")) != 0) {
    std::this_thread::sleep_for(std::chrono::hours(1));
    return 3;
  }
  const uint64_t count = 4096;
  float *send = nullptr, *recv = nullptr;
  cudaMalloc(&send, count * 4);
  cudaMalloc(&recv, count * 4);
  std::vector<float> host(count);
  for (uint64_t j = 0; j < count; ++j) host[j] = static_cast<float>((rank + 1) * (j % 5 + 1));
  cudaMemcpy(send, host.data(), count * 4, cudaMemcpyHostToDevice);
  cudaMemset(recv, 0xff, count * 4);
  cudaDeviceSynchronize();  // the legacy stream's copy and memset, before the op's non-blocking stream
  cudaStream_t stream;
  cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking);
  Handle h;
  s = comm->AllReduce(send, recv, count, DataType::kFloat32, ReduceOp::kSum, stream, &h);
  if (s.ok()) {
    std::printf("posted\n");
    std::fflush(stdout);
    s = h.Wait();
  }
  std::printf("status: %s\n", s.ToString().c_str());
  uint64_t wrong = 0;
  if (s.ok()) {
    cudaMemcpy(host.data(), recv, count * 4, cudaMemcpyDeviceToHost);
    const float tri = static_cast<float>(world * (world + 1) / 2);
    for (uint64_t j = 0; j < count; ++j) wrong += host[j] != tri * static_cast<float>(j % 5 + 1);
    std::printf("wrong elements: %llu\n", static_cast<unsigned long long>(wrong));
  }
  return static_cast<int>(s.code()) == expect && wrong == 0 ? 0 : 1;
}
