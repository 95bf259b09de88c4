// collective-stress: an mpirun-launched stress harness (one client process per
// rank) against a running collectived.
//
//   mpirun -np N collective-stress --socket S [--seconds 10 | --ops N] [--seed 1]
//       [--mode client|daemon|both] [--max-count 4096] [--window 8] [--skew-us 500] [--gpu 0|1]
//
// --gpu 1: GPU communicators on the ranks' CUDA streams (tests/stress/gpu_stress.h):
// heap and staged buffers, eager and graph-replayed, results read from a
// second and a third stream after Handle::WaitOn. Of the race windows only the
// end barrier's is timed there (client-executed, from the device trace); the
// negative controls are caught by their wrong elements.
//
// A seeded random mix (the same sequence on every rank): all-reduce of every
// dtype x op and all-gather, 1 element to --max-count, odd sizes, in place and
// out of place; up to --window ops in flight; random rank skew before posts;
// every handle also waited on from a second and a third thread, and again
// later; send buffers overwritten right after completion. Every element is
// checked exactly when the op completes.
//
// Race windows: per op the harness reads when each rank finished reading,
// wrote its output, and completed (Communicator::GetOpTrace). A window is
// open when a rank completed before a peer finished reading its slots (the
// end barrier's window) or when this rank saw completion before its output was
// written (the epilogue's window). Safe runs must show none.
//
// Prints "N passed, M failed" on a line of its own, then "windows opened: W",
// and exits non-zero on any wrong element, error or hang (every wait bounded).
#include <mpi.h>
#include <time.h>

#include <atomic>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <deque>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "collectived/client.h"
#include "tests/support/args.h"
#include "tests/support/op_mix.h"
#ifdef COLLECTIVED_STRESS_GPU
#include "tests/stress/gpu_stress.h"
#endif

using namespace collectived;
using collectived::testing::Arg;
using collectived::testing::CheckFlags;

namespace {

int64_t NowNs() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<int64_t>(ts.tv_sec) * 1000000000LL + ts.tv_nsec;
}

struct Op {
  uint64_t index = 0;
  testing::MixedOp mix;
  int slot = 0;
  Handle handle;
  int64_t seen_ns = 0;  // when this rank saw completion
};

// Second and third waiters: each waits on every handle it is given.
class ExtraWaiters {
 public:
  ExtraWaiters() {
    for (int i = 0; i < 2; ++i) threads_.emplace_back([this, i] { Loop(i); });
  }
  ~ExtraWaiters() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    for (auto& t : threads_) t.join();
  }
  void Add(const Handle& h) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      queues_[0].push_back(h);
      queues_[1].push_back(h);
    }
    cv_.notify_all();
  }
  uint64_t failures() const { return failures_.load(); }

 private:
  void Loop(int i) {
    for (;;) {
      Handle h;
      {
        std::unique_lock<std::mutex> lock(mu_);
        cv_.wait(lock, [&] { return stop_ || !queues_[i].empty(); });
        if (queues_[i].empty()) return;
        h = queues_[i].front();
        queues_[i].pop_front();
      }
      if (!h.Wait().ok()) failures_++;
    }
  }
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Handle> queues_[2];
  bool stop_ = false;
  std::atomic<uint64_t> failures_{0};
  std::vector<std::thread> threads_;
};

struct Totals {
  uint64_t passed = 0, failed = 0, wrong = 0, windows = 0;
};

// Op traces judged once every rank finished the op's phases.
struct PendingTrace {
  uint64_t index;
  int64_t seen_ns;
};

void JudgeTraces(Communicator& comm, std::vector<PendingTrace>* pending, bool final, Totals* t) {
  std::vector<OpTrace> tr;
  const int64_t give_up = NowNs() + (final ? 2'000'000'000LL : 0);
  for (auto it = pending->begin(); it != pending->end();) {
    comm.GetOpTrace(it->index, &tr);
    bool ready = true;
    for (const auto& x : tr) ready = ready && x.valid && x.output_done_ns != 0 && x.completed_ns != 0;
    if (!ready) {
      if (final && NowNs() < give_up) {
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
        continue;
      }
      ++it;
      continue;
    }
    // Epilogue window: this rank saw completion before its output was written.
    bool open = it->seen_ns < tr[comm.rank()].output_done_ns;
    // End-barrier window (judged by rank 0 only): a rank completed before a peer finished reading.
    if (comm.rank() == 0) {
      for (size_t k = 0; k < tr.size(); ++k) {
        for (size_t j = 0; j < tr.size(); ++j) {
          if (j != k && tr[k].completed_ns < tr[j].reads_done_ns) open = true;
        }
      }
    }
    t->windows += open;
    it = pending->erase(it);
  }
}

Totals RunMode(Client& client, ExecutionMode mode, const std::string& key, int rank, int world, double seconds,
               int max_ops, uint64_t seed, uint64_t max_count, int window, int skew_us) {
  Totals t;
  CommunicatorOptions copts;
  copts.key = key;
  copts.world_size = world;
  copts.rank = rank;
  copts.mode = mode;
  std::unique_ptr<Communicator> comm;
  Status s = client.CreateCommunicator(copts, &comm);
  if (!s.ok()) {
    std::fprintf(stderr, "rank %d: create communicator: %s\n", rank, s.ToString().c_str());
    t.failed = 1;
    return t;
  }
  std::vector<Buffer> send(window), recv(window);
  for (int i = 0; i < window; ++i) {
    if (!client.AllocBuffer(max_count * 8, &send[i]).ok() || !client.AllocBuffer(max_count * 8 * world, &recv[i]).ok()) {
      t.failed = 1;
      return t;
    }
  }
  std::mt19937_64 rng(seed);  // same on every rank: same op sequence
  std::mt19937_64 skew(seed * 31 + rank);
  ExtraWaiters extra;
  std::deque<Op> inflight;
  std::vector<PendingTrace> traces;

  auto finish = [&](Op& op) {
    Status st = op.handle.Wait();
    op.seen_ns = NowNs();
    uint64_t wrong = 0;
    if (st.ok()) {
      wrong = testing::CountWrongMixedOp(op.mix, world, send[op.slot], recv[op.slot]);
    } else if (t.failed < 3) {
      std::fprintf(stderr, "rank %d: op %llu failed: %s\n", rank, (unsigned long long)op.index, st.ToString().c_str());
    }
    if (!st.ok() || wrong != 0) {
      t.failed++;
      t.wrong += wrong;
    } else {
      t.passed++;
    }
    // Overwrite the send buffer at once: exposes anyone still reading it.
    std::memset(send[op.slot].data(), 0x5A, send[op.slot].size());
    // And wait again later, from this thread.
    if (!op.handle.Wait().ok() && st.ok()) t.failed++;
    traces.push_back({op.index, op.seen_ns});
  };

  const int64_t end = NowNs() + static_cast<int64_t>(seconds * 1e9);
  int k = 0;
  for (;; ++k) {
    // Same stop decision on every rank: the op count, or rank 0's clock
    // (broadcast every 16 ops; in between every rank goes on).
    if (max_ops > 0) {
      if (k >= max_ops) break;
    } else if (k % 16 == 0) {
      int go = NowNs() < end;
      MPI_Bcast(&go, 1, MPI_INT, 0, MPI_COMM_WORLD);
      if (!go) break;
    }
    Op op;
    op.mix = testing::NextMixedOp(rng, max_count, seed, k);
    op.slot = k % window;
    if (static_cast<int>(inflight.size()) == window) {
      finish(inflight.front());
      inflight.pop_front();
    }
    if (skew_us > 0 && skew() % 8 == 0) std::this_thread::sleep_for(std::chrono::microseconds(skew() % skew_us));
    s = testing::PostMixedOp(*comm, op.mix, send[op.slot], recv[op.slot], false, &op.handle);
    if (!s.ok()) {
      std::fprintf(stderr, "rank %d: post failed: %s\n", rank, s.ToString().c_str());
      t.failed++;
      break;
    }
    op.index = op.handle.op_index();
    extra.Add(op.handle);
    inflight.push_back(std::move(op));
    if (k % 512 == 511) JudgeTraces(*comm, &traces, false, &t);
  }
  while (!inflight.empty()) {
    finish(inflight.front());
    inflight.pop_front();
  }
  MPI_Barrier(MPI_COMM_WORLD);
  JudgeTraces(*comm, &traces, true, &t);
  t.failed += extra.failures();
  s = comm->Destroy();
  if (!s.ok() && s.code() != StatusCode::kAborted) t.failed++;
  return t;
}

}  // namespace

constexpr char kUsage[] =
    "usage: mpirun -np N collective-stress --socket S [--seconds 10 | --ops N] [--seed 1]\n"
    "         [--mode client|daemon|both] [--max-count 4096] [--window 8] [--skew-us 500] [--gpu 0|1]\n"
    "Prints \"N passed, M failed\", the wrong elements and the race windows opened; exits non-zero on any\n"
    "wrong element, error or hang.\n";

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank = 0, world = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &world);
  // Every rank sees the same command line, so every rank gives the same answer.
  const int cli = CheckFlags(argc, argv, {"--socket", "--seconds", "--ops", "--seed", "--mode", "--max-count",
                                          "--window", "--skew-us", "--gpu"}, kUsage);
  if (cli >= 0) {
    MPI_Finalize();
    return cli;
  }
  std::string socket, mode;
  double seconds = 0;
  int max_ops = 0, window = 0, skew_us = 0;
  uint64_t seed = 0, max_count = 0;
  bool gpu = false;
  try {
    socket = Arg(argc, argv, "--socket", "/run/collectived/collectived.sock");
    seconds = std::stod(Arg(argc, argv, "--seconds", "10"));
    max_ops = std::stoi(Arg(argc, argv, "--ops", "0"));
    seed = std::stoull(Arg(argc, argv, "--seed", "1"));
    mode = Arg(argc, argv, "--mode", "both");
    max_count = std::stoull(Arg(argc, argv, "--max-count", "4096"));
    window = std::stoi(Arg(argc, argv, "--window", "8"));
    skew_us = std::stoi(Arg(argc, argv, "--skew-us", "500"));
    gpu = std::stoi(Arg(argc, argv, "--gpu", "0")) != 0;
  } catch (const std::exception&) {
    if (rank == 0) std::fprintf(stderr, "collective-stress: a value is not a number\n%s", kUsage);
    MPI_Finalize();
    return 2;
  }
  if ((mode != "client" && mode != "daemon" && mode != "both") || seconds <= 0 || max_ops < 0 || max_count == 0 ||
      window <= 0 || skew_us < 0) {
    if (rank == 0) {
      std::fprintf(stderr, "collective-stress: --mode is client, daemon or both; --seconds, --max-count and "
                           "--window are positive; --ops and --skew-us are not negative\n");
    }
    MPI_Finalize();
    return 2;
  }
  unsigned tag = static_cast<unsigned>(NowNs() / 1000) % 1000000;
  MPI_Bcast(&tag, 1, MPI_UNSIGNED, 0, MPI_COMM_WORLD);

  std::unique_ptr<Client> client;
  Status s = Client::Connect({.socket_path = socket, .client_name = "stress rank " + std::to_string(rank)}, &client);
  Totals total;
  if (!s.ok()) {
    std::fprintf(stderr, "rank %d: connect: %s\n", rank, s.ToString().c_str());
    total.failed = 1;
  } else {
    std::vector<ExecutionMode> modes;
    if (mode != "daemon") modes.push_back(ExecutionMode::kClient);
    if (mode != "client") modes.push_back(ExecutionMode::kDaemon);
#ifndef COLLECTIVED_STRESS_GPU
    if (gpu) {
      std::fprintf(stderr, "collective-stress was built without CUDA: --gpu 1 is unavailable\n");
      MPI_Abort(MPI_COMM_WORLD, 2);
    }
#else
    if (gpu) {
      for (ExecutionMode m : modes) {
        stress::GpuStressOptions go;
        go.mode = m;
        go.key = "gpu-stress-" + std::to_string(tag) + "-" + ExecutionModeName(m);
        go.rank = rank;
        go.world = world;
        go.seconds = seconds / modes.size();
        go.max_ops = max_ops;
        go.seed = seed;
        go.max_count = max_count;
        go.window = window;
        go.skew_us = skew_us;
        stress::GpuTotals g = stress::RunGpuStress(*client, go, [](double left) {
          int go_on = left > 0;
          MPI_Bcast(&go_on, 1, MPI_INT, 0, MPI_COMM_WORLD);
          return go_on != 0;
        });
        if (rank == 0) {
          std::printf("gpu %s-executed: %llu graph-replayed ops, %llu staged ops (rank 0)\n", ExecutionModeName(m),
                      (unsigned long long)g.graph_ops, (unsigned long long)g.staged_ops);
        }
        total.passed += g.passed;
        total.failed += g.failed;
        total.wrong += g.wrong;
        total.windows += g.windows;
      }
      modes.clear();
    }
#endif
    for (ExecutionMode m : modes) {
      Totals t = RunMode(*client, m, "stress-" + std::to_string(tag) + "-" + ExecutionModeName(m), rank, world,
                         seconds / modes.size(), max_ops, seed, max_count, window, skew_us);
      total.passed += t.passed;
      total.failed += t.failed;
      total.wrong += t.wrong;
      total.windows += t.windows;
    }
  }
  uint64_t mine[4] = {total.passed, total.failed, total.wrong, total.windows}, sum[4] = {};
  MPI_Reduce(mine, sum, 4, MPI_UINT64_T, MPI_SUM, 0, MPI_COMM_WORLD);
  int bad = 0;
  if (rank == 0) {
    std::printf("%llu passed, %llu failed\n", (unsigned long long)sum[0], (unsigned long long)sum[1]);
    std::printf("wrong elements: %llu\n", (unsigned long long)sum[2]);
    std::printf("windows opened: %llu\n", (unsigned long long)sum[3]);
    bad = sum[1] != 0;
  }
  MPI_Bcast(&bad, 1, MPI_INT, 0, MPI_COMM_WORLD);
  MPI_Finalize();
  return bad;
}
