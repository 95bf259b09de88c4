// A client process for the integration tests and the quickstart's checks.
//
//   collectived_test_client --socket S --key K --world N --rank R
//       [--mode client|daemon] [--scenario mixed|join-and-sleep]
//       [--ops N] [--seed X] [--max-count C] [--window W] [--via-rpc 0|1] [--gpu 0|1]
//
// mixed: N seeded random ops (all-reduce every dtype x op, all-gather), odd
//   sizes, in place and out of place, up to W in flight, each result checked
//   exactly when it completes. Prints "rank R: N ops, W wrong, F failed".
// join-and-sleep: joins, prints "rank R: joined" (as every scenario does), then sleeps (to be killed).
// --gpu 1 (cuda builds): the mixed scenario on a GPU communicator of device
//   0 (tests/stress/gpu_stress.h: heap and staged buffers, eager and
//   graph-replayed), printing the same line; the GPU soak runs it.
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <random>
#include <string>
#include <vector>

#include "collectived/client.h"
#include "tests/support/args.h"
#include "tests/support/op_mix.h"
#ifdef COLLECTIVED_TEST_CLIENT_GPU
#include "tests/stress/gpu_stress.h"
#endif

using namespace collectived;
using collectived::testing::Arg;

namespace {

struct Op {
  testing::MixedOp mix;
  int slot;
  Handle handle;
};

}  // namespace

int main(int argc, char** argv) {
  const std::string socket = Arg(argc, argv, "--socket", "");
  const std::string key = Arg(argc, argv, "--key", "test");
  const uint32_t world = std::stoul(Arg(argc, argv, "--world", "1"));
  const uint32_t rank = std::stoul(Arg(argc, argv, "--rank", "0"));
  const std::string mode = Arg(argc, argv, "--mode", "client");
  const std::string scenario = Arg(argc, argv, "--scenario", "mixed");
  const int ops = std::stoi(Arg(argc, argv, "--ops", "100"));
  const uint64_t seed = std::stoull(Arg(argc, argv, "--seed", "1"));
  const uint64_t max_count = std::stoull(Arg(argc, argv, "--max-count", "4096"));
  const int window = std::stoi(Arg(argc, argv, "--window", "16"));
  const bool via_rpc = Arg(argc, argv, "--via-rpc", "0") == "1";

  if (Arg(argc, argv, "--gpu", "0") == "1") {
#ifdef COLLECTIVED_TEST_CLIENT_GPU
    std::unique_ptr<Client> gc;
    Status cs = Client::Connect({.socket_path = socket, .client_name = "test rank " + std::to_string(rank)}, &gc);
    if (!cs.ok()) {
      std::fprintf(stderr, "rank %u: connect: %s\n", rank, cs.ToString().c_str());
      return 2;
    }
    stress::GpuStressOptions o;
    o.mode = mode == "daemon" ? ExecutionMode::kDaemon : ExecutionMode::kClient;
    o.key = key;
    o.rank = static_cast<int>(rank);
    o.world = static_cast<int>(world);
    o.max_ops = ops;
    o.seed = seed;
    o.max_count = max_count;
    o.window = window;
    o.skew_us = 0;
    o.say_joined = true;
    const stress::GpuTotals t = stress::RunGpuStress(*gc, o, [](double) { return true; });
    std::printf("rank %u: %llu ops, %llu wrong, %llu failed\n", rank, (unsigned long long)(t.passed + t.failed),
                (unsigned long long)t.wrong, (unsigned long long)t.failed);
    return t.wrong == 0 && t.failed == 0 && t.passed == static_cast<uint64_t>(ops) ? 0 : 1;
#else
    std::fprintf(stderr, "collectived_test_client was built without CUDA: --gpu 1 is unavailable\n");
    return 2;
#endif
  }
  std::unique_ptr<Client> client;
  Status s = Client::Connect({.socket_path = socket, .client_name = "test rank " + std::to_string(rank)}, &client);
  if (!s.ok()) {
    std::fprintf(stderr, "rank %u: connect: %s\n", rank, s.ToString().c_str());
    return 2;
  }
  CommunicatorOptions copts;
  copts.key = key;
  copts.world_size = world;
  copts.rank = rank;
  copts.mode = mode == "daemon" ? ExecutionMode::kDaemon : ExecutionMode::kClient;
  std::unique_ptr<Communicator> comm;
  s = client->CreateCommunicator(copts, &comm);
  if (!s.ok()) {
    std::fprintf(stderr, "rank %u: create communicator: %s\n", rank, s.ToString().c_str());
    return 2;
  }
  std::printf("rank %u: joined\n", rank);  // soak.py times its mid-op kills from it
  std::fflush(stdout);
  if (scenario == "join-and-sleep") {
    for (;;) pause();
  }

  // One send and one receive buffer per in-flight slot.
  std::vector<Buffer> send(window), recv(window);
  for (int i = 0; i < window; ++i) {
    if (!client->AllocBuffer(max_count * 8, &send[i]).ok() ||
        !client->AllocBuffer(max_count * 8 * world, &recv[i]).ok()) {
      std::fprintf(stderr, "rank %u: alloc failed\n", rank);
      return 2;
    }
  }
  std::mt19937_64 rng(seed);  // same seed on every rank: same op sequence
  uint64_t wrong = 0, failed = 0;
  std::deque<Op> inflight;
  auto finish = [&](Op& op) {
    Status st = op.handle.Wait();
    if (!st.ok()) {
      ++failed;
      if (failed < 5) std::fprintf(stderr, "rank %u: op failed: %s\n", rank, st.ToString().c_str());
      return;
    }
    const uint64_t w = testing::CountWrongMixedOp(op.mix, world, send[op.slot], recv[op.slot]);
    if (w != 0 && wrong == 0) {
      // When each rank read, wrote and completed this op: whether a barrier held.
      std::vector<OpTrace> tr;
      if (comm->GetOpTrace(op.handle.op_index(), &tr).ok()) {
        for (size_t q = 0; q < tr.size(); ++q) {
          std::fprintf(stderr, "rank %u: op %llu on rank %zu: reads done %lld, output done %lld, completed %lld\n", rank,
                       (unsigned long long)op.handle.op_index(), q, (long long)tr[q].reads_done_ns,
                       (long long)tr[q].output_done_ns, (long long)tr[q].completed_ns);
        }
      }
      std::fprintf(stderr, "rank %u: %llu wrong in %s %s %s count=%llu%s\n", rank, (unsigned long long)w,
                   op.mix.gather ? "all_gather" : "all_reduce", DataTypeName(op.mix.dtype), ReduceOpName(op.mix.op),
                   (unsigned long long)op.mix.count, op.mix.in_place ? " in place" : "");
    }
    wrong += w;
  };
  for (int k = 0; k < ops; ++k) {
    Op op{};
    op.mix = testing::NextMixedOp(rng, max_count, seed, k);
    op.slot = k % window;
    if (static_cast<int>(inflight.size()) == window) {  // the slot's previous op must be done
      finish(inflight.front());
      inflight.pop_front();
    }
    Status ps = testing::PostMixedOp(*comm, op.mix, send[op.slot], recv[op.slot], via_rpc, &op.handle);
    if (!ps.ok()) {
      // Stop here: a refused op never joins the window, so posting on would
      // refill a slot whose earlier op is still in flight and report its
      // elements as wrong.
      std::fprintf(stderr, "rank %u: post of op %d failed: %s\n", rank, k, ps.ToString().c_str());
      ++failed;
      break;
    }
    inflight.push_back(std::move(op));
  }
  while (!inflight.empty()) {
    finish(inflight.front());
    inflight.pop_front();
  }
  s = comm->Destroy();
  std::printf("rank %u: %d ops, %llu wrong, %llu failed%s\n", rank, ops, (unsigned long long)wrong,
              (unsigned long long)failed, s.ok() ? "" : (", destroy: " + s.ToString()).c_str());
  return wrong == 0 && failed == 0 && s.ok() ? 0 : 1;
}
