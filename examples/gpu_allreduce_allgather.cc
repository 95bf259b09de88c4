// One rank of a GPU collectived job (daemon on the cuda backend): all-reduce
// on the communicator's symmetric heap (zero-copy) waited on from a second
// stream, the same op captured into a CUDA graph and replayed, and an
// all-gather of plain cudaMalloc memory (staged). Every result is checked
// element by element against the exact answer.
//
//   gpu_allreduce_allgather --socket S --key K --world N --rank R [--device D] [--count C]
//
// Ranks that share one GPU from separate processes run concurrently under
// MPS; without it the GPU time-slices between them (correct, but each op
// waits for context switches). Exit status 0 iff every element is exact.
#include <cuda_runtime.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "collectived/client.h"

using namespace collectived;

namespace {

const char* Arg(int argc, char** argv, const char* name, const char* fallback) {
  for (int i = 1; i + 1 < argc; ++i) {
    if (std::strcmp(argv[i], name) == 0) return argv[i + 1];
  }
  return fallback;
}

void Check(const char* what, const Status& s) {
  if (s.ok()) return;
  std::fprintf(stderr, "%s: %s\n", what, s.ToString().c_str());
  std::exit(1);
}
void Cuda(const char* what, cudaError_t e) {
  if (e == cudaSuccess) return;
  std::fprintf(stderr, "%s: %s\n", what, cudaGetErrorString(e));
  std::exit(1);
}

}  // namespace

int main(int argc, char** argv) {
  const std::string socket = Arg(argc, argv, "--socket", "/run/collectived/collectived.sock");
  const std::string key = Arg(argc, argv, "--key", "gpu-example");
  const uint32_t world = std::strtoul(Arg(argc, argv, "--world", "1"), nullptr, 10);
  const uint32_t rank = std::strtoul(Arg(argc, argv, "--rank", "0"), nullptr, 10);
  const int device = std::atoi(Arg(argc, argv, "--device", "0"));
  const uint64_t count = std::strtoull(Arg(argc, argv, "--count", "1048576"), nullptr, 10);
  Cuda("set device", cudaSetDevice(device));

  std::unique_ptr<Client> client;
  Check("connect", Client::Connect({.socket_path = socket, .client_name = "gpu example rank " + std::to_string(rank)},
                                   &client));
  std::unique_ptr<Communicator> comm;
  CommunicatorOptions opts;
  opts.key = key;
  opts.world_size = world;
  opts.rank = rank;
  opts.device = device;
  opts.gpu_heap_bytes = 2 * count * sizeof(float);
  Check("create communicator", client->CreateCommunicator(opts, &comm));
  cudaStream_t stream, reader;
  Cuda("stream", cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  Cuda("stream", cudaStreamCreateWithFlags(&reader, cudaStreamNonBlocking));

  // all_reduce sum: rank r contributes (r + 1) * (j % 7 + 1); the exact sum is
  // world * (world + 1) / 2 * (j % 7 + 1). The output is poisoned with -1 first.
  Buffer send, recv;  // symmetric heap: the same offsets on every rank, so the op runs zero-copy
  Check("alloc", comm->AllocBuffer(count * sizeof(float), &send));
  Check("alloc", comm->AllocBuffer(count * sizeof(float), &recv));
  std::vector<float> host(count);
  auto fill = [&](float scale) {
    for (uint64_t j = 0; j < count; ++j) host[j] = scale * static_cast<float>((rank + 1) * (j % 7 + 1));
    Cuda("upload", cudaMemcpy(send.data(), host.data(), count * sizeof(float), cudaMemcpyHostToDevice));
    Cuda("poison", cudaMemset(recv.data(), 0xff, count * sizeof(float)));
  };
  auto wrong_sum = [&](float scale) {
    const float tri = static_cast<float>(world * (world + 1) / 2);
    uint64_t wrong = 0;
    for (uint64_t j = 0; j < count; ++j) wrong += host[j] != scale * tri * static_cast<float>(j % 7 + 1);
    return wrong;
  };
  fill(1);
  Handle h;
  Check("all_reduce", comm->AllReduce(send.data(), recv.data(), count, DataType::kFloat32, ReduceOp::kSum, stream, &h));
  // A second stream waits for the whole op on the GPU, then copies the result out.
  Check("wait on stream", h.WaitOn(reader));
  Cuda("download", cudaMemcpyAsync(host.data(), recv.data(), count * sizeof(float), cudaMemcpyDeviceToHost, reader));
  Cuda("sync", cudaStreamSynchronize(reader));
  Check("all_reduce status", h.Wait());
  uint64_t wrong = wrong_sum(1);
  std::printf("rank %u: GPU all_reduce sum float32 x %llu (zero-copy, waited on another stream): %s\n", rank,
              (unsigned long long)count, wrong == 0 ? "every element exact" : "WRONG");

  // The same op captured into a graph: each replay takes a new op index on the device.
  cudaGraph_t graph;
  cudaGraphExec_t exec;
  Cuda("capture", cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
  Check("captured all_reduce",
        comm->AllReduce(send.data(), recv.data(), count, DataType::kFloat32, ReduceOp::kSum, stream, &h));
  Cuda("end capture", cudaStreamEndCapture(stream, &graph));
  Cuda("instantiate", cudaGraphInstantiate(&exec, graph, 0));
  uint64_t wrong_graph = 0;
  for (int replay = 1; replay <= 3; ++replay) {
    fill(static_cast<float>(replay + 1));  // new values every replay
    Cuda("replay", cudaGraphLaunch(exec, stream));
    Cuda("download", cudaMemcpyAsync(host.data(), recv.data(), count * sizeof(float), cudaMemcpyDeviceToHost, stream));
    Cuda("sync", cudaStreamSynchronize(stream));
    wrong_graph += wrong_sum(static_cast<float>(replay + 1));
  }
  std::printf("rank %u: GPU all_reduce in a CUDA graph, 3 replays with new values: %s\n", rank,
              wrong_graph == 0 ? "every element exact" : "WRONG");
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);

  // all_gather int32 of cudaMalloc memory (staged through the fixed slots): rank r contributes r * 1000000 + j.
  const uint64_t gcount = std::min<uint64_t>(count, comm->max_message_bytes() / sizeof(int32_t));
  int32_t *gin = nullptr, *gout = nullptr;
  Cuda("malloc", cudaMalloc(&gin, gcount * sizeof(int32_t)));
  Cuda("malloc", cudaMalloc(&gout, gcount * world * sizeof(int32_t)));
  std::vector<int32_t> g(gcount * world);
  for (uint64_t j = 0; j < gcount; ++j) g[j] = static_cast<int32_t>(rank * 1000000 + j);
  Cuda("upload", cudaMemcpy(gin, g.data(), gcount * sizeof(int32_t), cudaMemcpyHostToDevice));
  Cuda("poison", cudaMemset(gout, 0xff, gcount * world * sizeof(int32_t)));
  Check("all_gather", comm->AllGather(gin, gout, gcount, DataType::kInt32, stream, &h));
  Check("all_gather wait", h.Wait());
  Cuda("download", cudaMemcpy(g.data(), gout, gcount * world * sizeof(int32_t), cudaMemcpyDeviceToHost));
  uint64_t wrong_gather = 0;
  for (uint32_t k = 0; k < world; ++k) {
    for (uint64_t j = 0; j < gcount; ++j) wrong_gather += g[k * gcount + j] != static_cast<int32_t>(k * 1000000 + j);
  }
  std::printf("rank %u: GPU all_gather int32 x %llu per rank (staged): %s\n", rank, (unsigned long long)gcount,
              wrong_gather == 0 ? "every element exact" : "WRONG");

  Check("destroy", comm->Destroy());
  cudaFree(gin);
  cudaFree(gout);
  return wrong + wrong_graph + wrong_gather == 0 ? 0 : 1;
}
