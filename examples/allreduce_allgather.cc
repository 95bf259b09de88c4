// One rank of a collectived job: all-reduce and all-gather through the daemon,
// each result checked element by element against the exact answer.
//
//   allreduce_allgather --socket S --key K --world N --rank R [--mode client|daemon] [--count C]
//
// Start N of them with the same key (one per rank); exit status 0 iff every
// element of every result is exact.
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "collectived/client.h"

using namespace collectived;

namespace {

const char* Arg(int argc, char** argv, const char* name, const char* fallback) {
  for (int i = 1; i + 1 < argc; ++i) {
    if (std::strcmp(argv[i], name) == 0) return argv[i + 1];
  }
  return fallback;
}

int Check(const char* what, const Status& s) {
  if (s.ok()) return 0;
  std::fprintf(stderr, "%s: %s\n", what, s.ToString().c_str());
  std::exit(1);
}

}  // namespace

int main(int argc, char** argv) {
  const std::string socket = Arg(argc, argv, "--socket", "/run/collectived/collectived.sock");
  const std::string key = Arg(argc, argv, "--key", "example");
  const uint32_t world = std::strtoul(Arg(argc, argv, "--world", "1"), nullptr, 10);
  const uint32_t rank = std::strtoul(Arg(argc, argv, "--rank", "0"), nullptr, 10);
  const std::string mode = Arg(argc, argv, "--mode", "client");
  const uint64_t count = std::strtoull(Arg(argc, argv, "--count", "1048576"), nullptr, 10);

  std::unique_ptr<Client> client;
  Check("connect", Client::Connect({.socket_path = socket, .client_name = "example rank " + std::to_string(rank)},
                                   &client));
  Buffer send, recv, gathered;
  Check("alloc", client->AllocBuffer(count * sizeof(float), &send));
  Check("alloc", client->AllocBuffer(count * sizeof(float), &recv));
  Check("alloc", client->AllocBuffer(count * world * sizeof(int32_t), &gathered));

  std::unique_ptr<Communicator> comm;
  CommunicatorOptions opts;
  opts.key = key;
  opts.world_size = world;
  opts.rank = rank;
  opts.mode = mode == "daemon" ? ExecutionMode::kDaemon : ExecutionMode::kClient;
  Check("create communicator", client->CreateCommunicator(opts, &comm));

  // all_reduce sum: rank r contributes (r + 1) * (j % 7 + 1); the exact sum is
  // world * (world + 1) / 2 * (j % 7 + 1). Outputs poisoned with NaN first.
  float* in = send.as<float>();
  float* out = recv.as<float>();
  for (uint64_t j = 0; j < count; ++j) {
    in[j] = static_cast<float>((rank + 1) * (j % 7 + 1));
    out[j] = std::nanf("");
  }
  Handle h;
  Check("all_reduce", comm->AllReduce(send, recv, count, DataType::kFloat32, ReduceOp::kSum, &h));
  Check("all_reduce wait", h.Wait());
  uint64_t wrong = 0;
  const float tri = static_cast<float>(world * (world + 1) / 2);
  for (uint64_t j = 0; j < count; ++j) wrong += out[j] != tri * static_cast<float>(j % 7 + 1);
  std::printf("rank %u: all_reduce sum float32 x %llu (%s-executed): out[0]=%g out[%llu]=%g, %s\n", rank,
              (unsigned long long)count, ExecutionModeName(comm->mode()), out[0], (unsigned long long)(count - 1),
              out[count - 1], wrong == 0 ? "every element exact" : "WRONG");

  // In place: the input buffer becomes the sum.
  for (uint64_t j = 0; j < count; ++j) in[j] = static_cast<float>((rank + 1) * (j % 7 + 1));
  Check("all_reduce in place", comm->AllReduce(send, send, count, DataType::kFloat32, ReduceOp::kSum, &h));
  Check("all_reduce in place wait", h.Wait());
  uint64_t wrong_inplace = 0;
  for (uint64_t j = 0; j < count; ++j) wrong_inplace += in[j] != tri * static_cast<float>(j % 7 + 1);
  std::printf("rank %u: all_reduce in place: %s\n", rank, wrong_inplace == 0 ? "every element exact" : "WRONG");

  // all_gather int32: rank r contributes r * 1000000 + j.
  int32_t* g = gathered.as<int32_t>();
  for (uint64_t j = 0; j < count * world; ++j) g[j] = -1;
  int32_t* mine = g + rank * count;  // in place: own chunk of the output is the input
  for (uint64_t j = 0; j < count; ++j) mine[j] = static_cast<int32_t>(rank * 1000000 + j);
  Check("all_gather", comm->AllGather(BufferSpan(gathered, rank * count * sizeof(int32_t)), gathered, count,
                                      DataType::kInt32, &h));
  Check("all_gather wait", h.Wait());
  uint64_t wrong_gather = 0;
  for (uint32_t k = 0; k < world; ++k) {
    for (uint64_t j = 0; j < count; ++j) wrong_gather += g[k * count + j] != static_cast<int32_t>(k * 1000000 + j);
  }
  std::printf("rank %u: all_gather int32 x %llu per rank: %s\n", rank, (unsigned long long)count,
              wrong_gather == 0 ? "every element exact" : "WRONG");

  Check("destroy", comm->Destroy());
  return wrong + wrong_inplace + wrong_gather == 0 ? 0 : 1;
}
