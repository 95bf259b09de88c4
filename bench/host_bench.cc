// collectived-host-bench: host-backend latency and throughput, launched by
// mpirun (one client process per rank) against a running collectived, with
// Open MPI's MPI_Allreduce timed in the same run on the same processes.
//
//   mpirun -np 8 collectived-host-bench --socket S [--bytes 1048576[,...]] [--iters 200] [--warmup 20]
//       [--series N] [--ops 4000] [--modes client,daemon] [--ranks-per-node P]
//
// Several daemons (docs/multinode.md): a socket path holding {node} names
// node rank / P's daemon, so the communicators span the nodes (daemon-
// executed only: --modes daemon). --ops 0 skips the throughput part.
//
// Latency: per iteration, MPI_Barrier, then each rank times one float32 sum
// all-reduce (post + wait); the iteration's time is the slowest rank's; the
// median over iterations is reported. Results are checked exactly.
// --series N also prints each run's medians of consecutive N-iteration
// blocks, in order: where in a run a slow stretch starts and ends, which the
// one median cannot tell.
// Throughput: a window of 32 one-element all-reduces in flight per rank,
// ops completed per second, from 1 client and from every client.
#include <mpi.h>
#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <string>
#include <vector>

#include "collectived/client.h"
#include "tests/support/args.h"
#include "tests/support/exact_data.h"

using namespace collectived;
using collectived::testing::Arg;

namespace {

double Now() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }

void Die(const char* what, const Status& s) {
  std::fprintf(stderr, "%s: %s\n", what, s.ToString().c_str());
  MPI_Abort(MPI_COMM_WORLD, 1);
}

long MinorFaults() {
  rusage u;
  getrusage(RUSAGE_SELF, &u);
  return u.ru_minflt;
}

std::vector<std::string> Split(const std::string& list) {
  std::vector<std::string> out;
  size_t at = 0;
  while (at <= list.size()) {
    const size_t comma = std::min(list.find(',', at), list.size());
    if (comma > at) out.push_back(list.substr(at, comma - at));
    at = comma + 1;
  }
  return out;
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// Slowest rank's time per iteration (on every rank).
std::vector<double> MaxOverRanks(const std::vector<double>& mine) {
  std::vector<double> worst(mine.size());
  MPI_Allreduce(mine.data(), worst.data(), static_cast<int>(mine.size()), MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
  return worst;
}

// --series: "series PATH: m1 m2 ...", the medians of consecutive blocks of
// `block` iterations (a last partial block too).
void PrintSeries(const std::string& path, const std::vector<double>& worst, int block) {
  std::printf("series %s:", path.c_str());
  for (size_t i = 0; i < worst.size(); i += block) {
    const size_t end = std::min(worst.size(), i + static_cast<size_t>(block));
    std::printf(" %.1f", Median(std::vector<double>(worst.begin() + i, worst.begin() + end)));
  }
  std::printf("\n");
}

std::unique_ptr<Communicator> Join(Client& c, const std::string& key, uint32_t world, uint32_t rank,
                                   ExecutionMode mode) {
  CommunicatorOptions o;
  o.key = key;
  o.world_size = world;
  o.rank = rank;
  o.mode = mode;
  std::unique_ptr<Communicator> comm;
  Status s = c.CreateCommunicator(o, &comm);
  if (!s.ok()) Die("create communicator", s);
  return comm;
}

// Ops per second with `window` one-element all-reduces in flight.
double Throughput(Client& c, Communicator& comm, int ops, bool via_rpc) {
  const int window = 32;
  std::vector<Buffer> bufs(window);
  for (auto& b : bufs) {
    Status s = c.AllocBuffer(64, &b);
    if (!s.ok()) Die("alloc", s);
  }
  std::deque<Handle> inflight;
  const double t0 = Now();
  for (int k = 0; k < ops; ++k) {
    if (static_cast<int>(inflight.size()) == window) {
      Status s = inflight.front().Wait();
      if (!s.ok()) Die("wait", s);
      inflight.pop_front();
    }
    Buffer& b = bufs[k % window];
    b.as<float>()[0] = 1.0f;
    Handle h;
    Status s = via_rpc ? comm.SubmitAllReduce(b, b, 1, DataType::kFloat32, ReduceOp::kSum, &h)
                       : comm.AllReduce(b, b, 1, DataType::kFloat32, ReduceOp::kSum, &h);
    if (!s.ok()) Die("post", s);
    inflight.push_back(h);
  }
  while (!inflight.empty()) {
    Status s = inflight.front().Wait();
    if (!s.ok()) Die("wait", s);
    inflight.pop_front();
  }
  return ops / (Now() - t0);
}

}  // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank = 0, size = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  const int cli = collectived::testing::CheckFlags(
      argc, argv, {"--socket", "--bytes", "--iters", "--warmup", "--series", "--ops", "--modes", "--ranks-per-node"},
      "usage: mpirun -np N collectived-host-bench --socket S [--bytes 1048576[,...]] [--iters 200] [--warmup 20]\n"
      "         [--series N] [--ops 4000] [--modes client,daemon] [--ranks-per-node P]\n");
  if (cli >= 0) {
    MPI_Finalize();
    return cli;
  }
  std::string socket = Arg(argc, argv, "--socket", "/run/collectived/collectived.sock");
  const int per_node = std::stoi(Arg(argc, argv, "--ranks-per-node", "0"));
  if (auto at = socket.find("{node}"); at != std::string::npos) {
    socket.replace(at, 6, std::to_string(per_node > 0 ? rank / per_node : 0));
  }
  std::vector<uint64_t> sizes;
  for (const std::string& b : Split(Arg(argc, argv, "--bytes", "1048576"))) sizes.push_back(std::stoull(b));
  std::vector<ExecutionMode> modes;
  for (const std::string& m : Split(Arg(argc, argv, "--modes", "client,daemon"))) {
    modes.push_back(m == "client" ? ExecutionMode::kClient : ExecutionMode::kDaemon);
  }
  const int iters = std::stoi(Arg(argc, argv, "--iters", "200"));
  const int warmup = std::stoi(Arg(argc, argv, "--warmup", "20"));
  const int series = std::stoi(Arg(argc, argv, "--series", "0"));
  const int ops = std::stoi(Arg(argc, argv, "--ops", "4000"));
  unsigned tag_value = static_cast<unsigned>(Now() * 1000) % 1000000;  // one key prefix for the whole job
  MPI_Bcast(&tag_value, 1, MPI_UNSIGNED, 0, MPI_COMM_WORLD);
  const std::string tag = std::to_string(tag_value);

  std::unique_ptr<Client> client;
  Status s = Client::Connect({.socket_path = socket, .client_name = "bench rank " + std::to_string(rank)}, &client);
  if (!s.ok()) Die("connect", s);
  for (uint64_t bytes : sizes) {
    const uint64_t count = bytes / 4;
    Buffer send, recv;
    if (!(s = client->AllocBuffer(bytes, &send)).ok() || !(s = client->AllocBuffer(bytes, &recv)).ok()) Die("alloc", s);
    testing::FillInput(DataType::kFloat32, ReduceOp::kSum, rank, 5, send.data(), count);

    if (rank == 0) {
      std::printf("# collectived host backend, %d client processes, float32 sum all-reduce of %llu bytes per rank\n",
                  size, (unsigned long long)bytes);
      std::printf("# latency: median over %d iterations of the slowest rank's post+wait (MPI_Barrier between)\n",
                  iters);
      std::printf("%-34s %12s %12s\n", "path", "median_us", "wrong");
    }
    for (ExecutionMode mode : modes) {
      auto comm = Join(*client, "bench-lat-" + tag + ExecutionModeName(mode) + "-" + std::to_string(bytes), size,
                       rank, mode);
      std::vector<double> times;
      uint64_t wrong = 0;
      long faults_at_warmup = 0;
      for (int it = 0; it < warmup + iters; ++it) {
        if (it == warmup) faults_at_warmup = MinorFaults();
        if (it == warmup) {  // check one result exactly
          testing::Poison(DataType::kFloat32, recv.data(), count);
        }
        MPI_Barrier(MPI_COMM_WORLD);
        const double t0 = Now();
        Handle h;
        if (!(s = comm->AllReduce(send, recv, count, DataType::kFloat32, ReduceOp::kSum, &h)).ok()) Die("post", s);
        if (!(s = h.Wait()).ok()) Die("wait", s);
        const double t1 = Now();
        if (it == warmup) {
          wrong = testing::CountWrongAllReduce(DataType::kFloat32, ReduceOp::kSum, size, 5, recv.data(), count);
        }
        if (it >= warmup) times.push_back((t1 - t0) * 1e6);
      }
      uint64_t total_wrong = 0;
      MPI_Reduce(&wrong, &total_wrong, 1, MPI_UINT64_T, MPI_SUM, 0, MPI_COMM_WORLD);
      const std::vector<double> worst = MaxOverRanks(times);
      const double faults = static_cast<double>(MinorFaults() - faults_at_warmup) / iters;
      const std::string path = std::string("collectived ") + ExecutionModeName(mode) + "-executed";
      if (rank == 0) {
        std::printf("%-34s %12.1f %12llu   (rank 0: %.1f page faults per op)\n", path.c_str(), Median(worst),
                    (unsigned long long)total_wrong, faults);
        if (series > 0) PrintSeries(path, worst, series);
      }
      comm->Destroy();
    }
    {
      std::vector<float> in(count), out(count);
      testing::FillInput(DataType::kFloat32, ReduceOp::kSum, rank, 5, in.data(), count);
      std::vector<double> times;
      uint64_t wrong = 0;
      for (int it = 0; it < warmup + iters; ++it) {
        MPI_Barrier(MPI_COMM_WORLD);
        const double t0 = Now();
        MPI_Allreduce(in.data(), out.data(), static_cast<int>(count), MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
        const double t1 = Now();
        if (it == warmup) wrong = testing::CountWrongAllReduce(DataType::kFloat32, ReduceOp::kSum, size, 5, out.data(), count);
        if (it >= warmup) times.push_back((t1 - t0) * 1e6);
      }
      uint64_t total_wrong = 0;
      MPI_Reduce(&wrong, &total_wrong, 1, MPI_UINT64_T, MPI_SUM, 0, MPI_COMM_WORLD);
      const std::vector<double> worst = MaxOverRanks(times);
      if (rank == 0) {
        std::printf("%-34s %12.1f %12llu\n", "Open MPI MPI_Allreduce", Median(worst), (unsigned long long)total_wrong);
        if (series > 0) PrintSeries("Open MPI MPI_Allreduce", worst, series);
      }
    }
  }  // sizes
  if (ops == 0) {
    MPI_Finalize();
    return 0;
  }

  if (rank == 0) {
    std::printf("# throughput: one-element all-reduces, 32 in flight per rank, %d ops\n", ops);
    std::printf("%-34s %12s %12s\n", "path", "clients", "ops_per_s");
  }
  struct Case {
    const char* name;
    ExecutionMode mode;
    bool rpc;
  } cases[] = {{"ring, client-executed", ExecutionMode::kClient, false},
               {"ring, daemon-executed", ExecutionMode::kDaemon, false},
               {"Submit RPC, daemon-executed", ExecutionMode::kDaemon, true}};
  for (const Case& c : cases) {
    for (int clients : {1, size}) {
      MPI_Barrier(MPI_COMM_WORLD);
      double rate = 1e300;  // ranks outside this case do not bound it
      if (rank < clients) {
        auto comm = Join(*client, "bench-tput-" + tag + c.name + std::to_string(clients), clients, rank, c.mode);
        rate = Throughput(*client, *comm, ops, c.rpc);
        comm->Destroy();
      }
      double slowest = rate;  // a collective completes at the slowest rank's rate
      MPI_Allreduce(&rate, &slowest, 1, MPI_DOUBLE, MPI_MIN, MPI_COMM_WORLD);
      if (rank == 0) std::printf("%-34s %12d %12.0f\n", c.name, clients, slowest);
      if (size == 1) break;
    }
  }
  MPI_Finalize();
  return 0;
}
