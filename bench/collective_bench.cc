// collective-bench: nccl-tests-style benchmark of the GPU collectives.
//
// Without -D: the in-process baseline, -g N virtual ranks on one GPU, each
// rank's kernel on its own stream (or one fused launch with -a fused), no
// daemon. With -D SOCKET: the same ops through collectived's client library
// (client-executed GPU communicators over daemon-owned memory), -g N ranks as
// sessions of this process, or, with -M 1 under mpirun, one rank per process.
// -z 1 puts the buffers on the communicator's symmetric heap (zero-copy),
// -z 2 in each rank's own cuMem allocation, registered (zero-copy), -z 0 on
// cudaMalloc (staged through the fixed slots).
// Per size: out-of-place and in-place `time algbw busbw #wrong`,
// plus the least-traffic bandwidth (every input read once, every output
// written once: 2nS for all-reduce, nS + n*nS for all-gather; in place, each
// rank's own chunk of an all-gather's output already is its input, so
// nS + n*(n-1)S) and its share of
// the 4.28 TB/s copy ceiling measured on the H200. -r 1 adds, per size, the
// plain one-shot reference's time (bench/reference_ranks.cu: the same number
// of ranks on this GPU, timed the same way right after, out of place) and the
// out-of-place time's ratio to it: the small-op latency target is a ratio.
// Exit status 1 on any wrong element. `-t ceilings` instead measures this GPU's copy and memset
// (write-only) ceilings at each size from -b to -e, to put beside a run's
// percentages (the last row is the ceiling; smaller rows say what a lone
// copy of the same traffic reaches).
//
//   collective-bench [-t all_reduce|all_gather|ceilings] [-g ranks] [-b 16M] [-e 1G] [-f 2]
//                    [-n 20] [-w 5] [-d float32] [-o sum] [-c 1] [-G 0] [-a auto|oneshot|twoshot|fused]
//                    [-p single|post]   (one launch per op, or post + collective + complete)
//                    [-B 1]             (blocks per SM shared by the ranks' kernels; 2 is experimental:
//                                        residency is not guaranteed, a run may end in a device deadline)
//                    [-D socket] [-z 0|1|2] [-M 0|1] [-k key] [-m client|daemon]   (through collectived, see above)
//                    [-r 0|1]           (the reference beside: float32 sum all-reduce only)
//                    [-K blocks]        (in-process: blocks per rank instead of -B's share of the SMs)
//                    [-Y 0|1|2]         (eager only: the host waits for each op before the next, as a
//                                        caller that synchronizes per op does: 1 the stream, 2 the op's
//                                        handle, as the Python bench's loop does; through collectived)
//                    [-H 0|1]           (eager only: a last column, host(us), the time per op the slowest
//                                        process spent enqueueing its out-of-place ops, before its
//                                        stream caught up: where eager time goes beside the GPU's)
//                    [-P 0|1|2]         (in-process, single launch: 1 completes a word per block as the client
//                                        library's captured ops do, no verdict copy (docs/latency.md, the fifth
//                                        cut); 2 as its eager zero-copy ops do, the generation copied (the ninth))
//                    [-S bits]          (in-process, the latency breakdown only: parts of the op protocol
//                                        left out, ring::kSkip* (1: none since the fences were cut, 2 descriptor match,
//                                        4 deadline/abort polls in spins, 8 abort checks, 16 last-block
//                                        count) and 32 the end barrier; 64 puts the start flag's release
//                                        fence back (the eighth cut's before); 512 launches each op plainly,
//                                        not as a programmatic dependent launch (the tenth cut's before;
//                                        through the daemon: COLLECTIVED_PROGRAMMATIC_LAUNCH=0); 1024 has no
//                                        op place the next one's blocks early (the eleventh cut's before);
//                                        docs/latency.md)
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "bench/memory_ceilings.h"
#include "bench/rank_set.h"
#include "kernels/device/device_collectives.h"
#include "base/gpu/gpu_check.h"

#ifdef COLLECTIVED_BENCH_MPI
#include <mpi.h>
#endif

using namespace collectived;
using bench::OpSpec;
using bench::RankSet;

namespace {

constexpr double kCopyCeilingGBs = 4280.0;  // docs/design.md section 4

uint64_t ParseSize(const char* s) {
  char* end = nullptr;
  double v = std::strtod(s, &end);
  switch (*end) {
    case 'K': case 'k': v *= 1024; break;
    case 'M': case 'm': v *= 1024 * 1024; break;
    case 'G': case 'g': v *= 1024.0 * 1024 * 1024; break;
    default: break;
  }
  return static_cast<uint64_t>(v);
}

DataType ParseType(const std::string& s) {
  for (DataType d : {DataType::kFloat32, DataType::kFloat64, DataType::kFloat16, DataType::kBFloat16, DataType::kInt32,
                     DataType::kInt64, DataType::kUint32}) {
    if (s == DataTypeName(d)) return d;
  }
  std::fprintf(stderr, "unknown dtype %s\n", s.c_str());
  std::exit(2);
}

ReduceOp ParseOp(const std::string& s) {
  for (ReduceOp o : {ReduceOp::kSum, ReduceOp::kProd, ReduceOp::kMin, ReduceOp::kMax, ReduceOp::kAvg}) {
    if (s == ReduceOpName(o)) return o;
  }
  std::fprintf(stderr, "unknown op %s\n", s.c_str());
  std::exit(2);
}

void Check(const Status& s, const char* what) {
  if (!s.ok()) {
    std::fprintf(stderr, "%s: %s\n", what, s.ToString().c_str());
    std::exit(2);
  }
}

struct Options {
  OpSpec spec;
  uint32_t ranks = 2;
  uint64_t min_bytes = 16u << 20, max_bytes = 1u << 30;
  double factor = 2;
  int iters = 20, warmup = 5, check = 1, graph = 0;
  int sync_each = 0;  // -Y: 1 the stream, 2 the op's handle
  bool single_launch = true;  // -p single|post (in-process)
  int blocks_per_sm = static_cast<int>(device::kResidentBlocksPerSm);  // -B (in-process)
  uint32_t blocks = 0;      // -K: blocks per rank (in-process; 0: from -B)
  uint32_t bench_skip = 0;  // -S: the latency breakdown's parts left out (in-process)
  int per_block = 0;        // -P 1|2: block completion words (in-process), 2 with the generation copied
  std::string socket;           // -D: through collectived
  int placement = 1;            // -z: bench::Placement
  bool mpi = false;             // -M: one rank per MPI process
  bool daemon_executed = false;  // -m daemon
  std::string key = "collective-bench";
  bool ceilings = false;  // -t ceilings: the memory ceilings only
  bool reference = false;  // -r 1: the plain one-shot reference beside each size
  bool host_column = false;  // -H 1: eager ops' host enqueue time per op
};

// Across the processes of an MPI run; trivial in one process.
struct Group {
  int rank = 0, size = 1;
  void Barrier() const {
#ifdef COLLECTIVED_BENCH_MPI
    if (size > 1) MPI_Barrier(MPI_COMM_WORLD);
#endif
  }
  double Max(double v) const {
#ifdef COLLECTIVED_BENCH_MPI
    if (size > 1) MPI_Allreduce(MPI_IN_PLACE, &v, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
#endif
    return v;
  }
  uint64_t Sum(uint64_t v) const {
#ifdef COLLECTIVED_BENCH_MPI
    if (size > 1) MPI_Allreduce(MPI_IN_PLACE, &v, 1, MPI_UINT64_T, MPI_SUM, MPI_COMM_WORLD);
#endif
    return v;
  }
};

class Runner {
 public:
  Runner(const Options& o, RankSet* ranks, const Group& group) : o_(o), ranks_(ranks), group_(group) {}

  void Enqueue(uint64_t count, bool in_place) { Check(ranks_->Enqueue(o_.spec, count, in_place), "enqueue"); }

  uint64_t Wrong(uint64_t count, bool in_place) {
    Check(ranks_->Prepare(o_.spec, 77, count, in_place), "prepare");
    group_.Barrier();
    Enqueue(count, in_place);
    Check(ranks_->Sync(), "sync");
    return group_.Sum(ranks_->Wrong(o_.spec, 77, count));
  }

  // An eager op; with -Y 1 or 2 the host waits for it before returning.
  void EnqueueEager(uint64_t count, bool in_place) {
    Enqueue(count, in_place);
    if (o_.sync_each == 1) Check(ranks_->Sync(), "sync");
    if (o_.sync_each == 2) Check(ranks_->WaitLast(), "wait");
  }

  // Seconds per op: iters ops back to back (or graphs of iters ops per rank),
  // the slowest process's time.
  double Time(uint64_t count, bool in_place) {
    for (int i = 0; i < o_.warmup; ++i) EnqueueEager(count, in_place);
    Check(ranks_->Sync(), "sync");
    const std::vector<uint32_t>& local = ranks_->local();
    const uint32_t n = o_.spec.algo == "fused" ? 1 : static_cast<uint32_t>(local.size());
    gpuStream_t first = ranks_->stream(local[0]);
    std::vector<gpuGraphExec_t> execs;
    if (o_.graph > 0) {
      // Capture every local rank's stream into one graph: fork from the first.
      gpuEvent_t fork;
      Check(Gpu(gpuEventCreate(&fork)), "event");
      gpuGraph_t graph;
      Check(Gpu(gpuStreamBeginCapture(first, gpuStreamCaptureModeThreadLocal)), "capture");
      Check(Gpu(gpuEventRecord(fork, first)), "record");
      for (uint32_t i = 1; i < n; ++i) Check(Gpu(gpuStreamWaitEvent(ranks_->stream(local[i]), fork, 0)), "fork");
      for (int i = 0; i < o_.iters; ++i) Enqueue(count, in_place);
      std::vector<gpuEvent_t> joins(n);
      for (uint32_t i = 1; i < n; ++i) {
        Check(Gpu(gpuEventCreate(&joins[i])), "event");
        Check(Gpu(gpuEventRecord(joins[i], ranks_->stream(local[i]))), "record");
        Check(Gpu(gpuStreamWaitEvent(first, joins[i], 0)), "join");
      }
      Check(Gpu(gpuStreamEndCapture(first, &graph)), "end capture");
      execs.resize(1);
      Check(Gpu(gpuGraphInstantiate(&execs[0], graph)), "instantiate");
      gpuGraphDestroy(graph);
      Check(Gpu(gpuGraphLaunch(execs[0], first)), "warm launch");
      Check(ranks_->Sync(), "sync");
    }
    group_.Barrier();
    const auto t0 = std::chrono::steady_clock::now();
    if (o_.graph > 0) {
      for (int g = 0; g < o_.graph; ++g) Check(Gpu(gpuGraphLaunch(execs[0], first)), "graph launch");
    } else {
      for (int i = 0; i < o_.iters; ++i) EnqueueEager(count, in_place);
    }
    const double enqueued = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    Check(ranks_->Sync(), "sync");
    last_enqueue_s_ = group_.Max(enqueued) / (o_.graph > 0 ? static_cast<double>(o_.graph) * o_.iters : o_.iters);
    const double secs = group_.Max(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    for (auto e : execs) gpuGraphExecDestroy(e);
    return secs / (o_.graph > 0 ? static_cast<double>(o_.graph) * o_.iters : o_.iters);
  }
  // Of the last Time(): seconds per op the slowest process took to enqueue.
  double last_enqueue_s() const { return last_enqueue_s_; }

 private:
  static Status Gpu(gpuError_t e) {
    return e == gpuSuccess ? Status::Ok() : Status::Internal(gpuGetErrorString(e));
  }
  const Options& o_;
  RankSet* ranks_;
  const Group& group_;
  double last_enqueue_s_ = 0;
};

}  // namespace

constexpr char kUsage[] =
    "usage: collective-bench [-t all_reduce|all_gather|ceilings] [-g ranks] [-b 16M] [-e 1G] [-f 2]\n"
    "         [-n 20] [-w 5] [-d float32] [-o sum] [-c 1] [-G 0] [-a auto|oneshot|twoshot|fused]\n"
    "         [-p single|post] [-B 1] [-D socket] [-z 0|1|2] [-M 0|1] [-k key] [-m client|daemon] [-r 0|1]\n"
    "         [-K blocks] [-P 0|1|2] [-S bits] [-Y 0|1|2] [-H 0|1]\n"
    "(the header of bench/collective_bench.cc says what each does)\n";

int main(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "-h") == 0 || std::strcmp(argv[i], "--help") == 0) {
      std::fputs(kUsage, stdout);
      return 0;
    }
  }
  if (argc % 2 == 0) {  // every option takes a value
    std::fprintf(stderr, "option %s needs a value\n%s", argv[argc - 1], kUsage);
    return 2;
  }
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string f = argv[i];
    const char* v = argv[i + 1];
    if (f == "-t") {
      const std::string t = v;
      if (t != "all_reduce" && t != "all_gather" && t != "ceilings") {
        std::fprintf(stderr, "-t is all_reduce, all_gather or ceilings, not %s\n", v);
        return 2;
      }
      o.spec.gather = t == "all_gather";
      o.ceilings = t == "ceilings";
    }
    else if (f == "-g") o.ranks = std::atoi(v);
    else if (f == "-b") o.min_bytes = ParseSize(v);
    else if (f == "-e") o.max_bytes = ParseSize(v);
    else if (f == "-f") o.factor = std::atof(v);
    else if (f == "-n") o.iters = std::atoi(v);
    else if (f == "-w") o.warmup = std::atoi(v);
    else if (f == "-d") o.spec.dtype = ParseType(v);
    else if (f == "-o") o.spec.op = ParseOp(v);
    else if (f == "-c") o.check = std::atoi(v);
    else if (f == "-G") o.graph = std::atoi(v);
    else if (f == "-a") o.spec.algo = v;
    else if (f == "-p") o.single_launch = std::string(v) != "post";
    else if (f == "-B") o.blocks_per_sm = std::clamp(std::atoi(v), 1, 2);  // 2: experimental, see kResidentBlocksPerSm
    else if (f == "-K") o.blocks = static_cast<uint32_t>(std::atoi(v));
    else if (f == "-Y") o.sync_each = std::clamp(std::atoi(v), 0, 2);
    else if (f == "-P") o.per_block = std::atoi(v);
    else if (f == "-S") o.bench_skip = static_cast<uint32_t>(std::strtoul(v, nullptr, 0));
    else if (f == "-D") o.socket = v;
    else if (f == "-z") {
      const std::string z = v;
      if (z != "0" && z != "1" && z != "2") {
        std::fprintf(stderr, "-z is 0 (staged), 1 (heap) or 2 (registered cuMem buffers), not %s\n", v);
        return 2;
      }
      o.placement = std::atoi(v);
    }
    else if (f == "-M") o.mpi = std::atoi(v) != 0;
    else if (f == "-k") o.key = v;
    else if (f == "-m") o.daemon_executed = std::string(v) == "daemon";
    else if (f == "-r") o.reference = std::atoi(v) != 0;
    else if (f == "-H") o.host_column = std::atoi(v) != 0;
    else {
      std::fprintf(stderr, "unknown option %s\n%s", f.c_str(), kUsage);
      return 2;
    }
  }
  // -a fused times one stream only, which would replay rank 0's reference
  // kernel alone: its barrier would wait for the others forever.
  if (o.reference && (o.spec.gather || o.ceilings || o.spec.dtype != DataType::kFloat32 ||
                      o.spec.op != ReduceOp::kSum || o.ranks < 2 || o.ranks > 8 || o.spec.algo == "fused")) {
    std::fprintf(stderr, "collective-bench: -r 1 compares float32 sum all-reduces of 2 to 8 ranks (not -a fused)\n");
    return 2;
  }
  if (o.ceilings && o.mpi) {
    std::fprintf(stderr, "collective-bench: -t ceilings runs in one process (drop -M)\n");
    return 2;
  }
  Group group;
  if (o.mpi) {
#ifdef COLLECTIVED_BENCH_MPI
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &group.rank);
    MPI_Comm_size(MPI_COMM_WORLD, &group.size);
    o.ranks = static_cast<uint32_t>(group.size);
#else
    std::fprintf(stderr, "collective-bench: built without MPI; -M 1 is unavailable\n");
    return 2;
#endif
    if (o.socket.empty()) {
      std::fprintf(stderr, "collective-bench: -M 1 needs -D SOCKET (ranks through collectived)\n");
      return 2;
    }
  }
  int ndev = 0;
  if (gpuGetDeviceCount(&ndev) != gpuSuccess || ndev == 0) {
    std::fprintf(stderr, "collective-bench: no GPU\n");
    return 2;
  }
  if (o.ceilings) {
    // Per size, because at tens of MiB a lone copy is far from the 2 GiB
    // figure too: launch and ramp cost it as they cost a collective. A row's
    // traffic (read + write) is what an op of the same least traffic moves:
    // a 2-rank all-reduce of S bytes moves 4S, the traffic of a 2S copy.
    std::printf("# memory ceilings per copy size: copy = cudaMemcpyAsync device to device, back to back, "
                "read + write counted; memset = writes only; %% of the %.0f GB/s that collective-bench's %% uses\n",
                kCopyCeilingGBs);
    std::printf("#%13s %14s %10s %9s %6s %10s %6s\n", "copy bytes", "traffic", "copy(us)", "GB/s", "%", "memset", "%");
    bench::MemoryCeilings c;
    uint64_t last = 0;
    for (uint64_t bytes = o.min_bytes; bytes <= o.max_bytes;
         bytes = std::max<uint64_t>(bytes + 1, static_cast<uint64_t>(bytes * o.factor))) {
      Check(bench::MeasureMemoryCeilings(bytes, o.iters, o.warmup, &c), "ceilings");
      last = bytes;
      std::printf("%14llu %14llu %10.2f %9.1f %6.1f %10.1f %6.1f\n", (unsigned long long)bytes,
                  (unsigned long long)(2 * bytes), 2e6 * bytes / (c.copy_gbs * 1e9), c.copy_gbs,
                  100.0 * c.copy_gbs / kCopyCeilingGBs, c.memset_gbs, 100.0 * c.memset_gbs / kCopyCeilingGBs);
    }
    std::printf("# memory ceilings at %llu bytes: copy %.1f GB/s (read + write), memset %.1f GB/s (write only); "
                "collective-bench's %% uses %.0f GB/s\n",
                (unsigned long long)last, c.copy_gbs, c.memset_gbs, kCopyCeilingGBs);
    return 0;
  }
  const size_t es = DataTypeSize(o.spec.dtype);
  const uint32_t n = o.ranks;
  const uint64_t max_count = o.max_bytes / es;
  const uint64_t in_bytes = max_count * es, out_bytes = (o.spec.gather ? n : 1) * max_count * es;
  std::unique_ptr<RankSet> ranks;
  if (o.socket.empty()) {
    Check(bench::MakeInProcessRanks(n, in_bytes, out_bytes, o.single_launch, o.blocks_per_sm, o.blocks, o.bench_skip,
                                    o.per_block, &ranks),
          "init");
  } else {
    std::vector<uint32_t> local;
    if (o.mpi) {
      local.push_back(static_cast<uint32_t>(group.rank));
    } else {
      for (uint32_t r = 0; r < n; ++r) local.push_back(r);
    }
    Check(bench::MakeDaemonRanks(o.socket, o.key, n, local, in_bytes, out_bytes, static_cast<bench::Placement>(o.placement), o.daemon_executed,
                                 &ranks),
          "init");
  }
  Runner runner(o, ranks.get(), group);
  const bool root = group.rank == 0;
  // The reference runs in the first process only (all of its ranks there),
  // while the others wait: the GPU is theirs too.
  std::unique_ptr<RankSet> reference;
  const Group alone;
  if (o.reference && root) Check(bench::MakeReferenceRanks(n, in_bytes, out_bytes, &reference), "reference init");
  Runner ref_runner(o, reference.get(), alone);
  auto say = [root](const char* fmt, auto... args) {
    if (root) std::printf(fmt, args...);
  };

  say("# collective-bench: %s, %s; algo %s, graph %d, iters %d, warmup %d\n",
      o.spec.gather ? "all_gather" : "all_reduce", ranks->Describe().c_str(), o.spec.algo.c_str(), o.graph, o.iters,
      o.warmup);
  say("# least-traffic bandwidth (ltbw) counts each input read once and each output written once (in place: "
      "an all-gather's own chunk is not written); %% of the %.0f GB/s copy ceiling\n", kCopyCeilingGBs);
  if (reference) say("# ref: %s, timed the same way after each size; ratio = out-of-place time / ref\n",
                     reference->Describe().c_str());
  say("#%13s %12s %8s %6s   %10s %8s %8s %6s %8s %5s   %10s %8s %8s %6s %8s %5s%s%s\n", "size", "count", "type", "redop",
      "time(us)", "algbw", "busbw", "#wrong", "ltbw", "%", "time(us)", "algbw", "busbw", "#wrong", "ltbw", "%",
      o.reference ? "    ref(us) #wrong  ratio" : "", o.host_column ? "   host(us)" : "");
  uint64_t total_wrong = 0;
  double bus_sum = 0;
  int rows = 0;
  for (uint64_t bytes = o.min_bytes; bytes <= o.max_bytes;
       bytes = std::max<uint64_t>(bytes + 1, static_cast<uint64_t>(bytes * o.factor))) {
    // all_gather: size is the total output (nccl-tests); count is per rank.
    const uint64_t count = o.spec.gather ? bytes / es / n : bytes / es;
    if (count == 0) continue;
    const uint64_t size = o.spec.gather ? count * es * n : count * es;
    say("%14llu %12llu %8s %6s", (unsigned long long)size, (unsigned long long)count, DataTypeName(o.spec.dtype),
        o.spec.gather ? "none" : ReduceOpName(o.spec.op));
    double out_of_place_t = 0, out_of_place_host = 0;
    for (bool in_place : {false, true}) {
      const uint64_t wrong = o.check ? runner.Wrong(count, in_place) : 0;
      const double t = runner.Time(count, in_place);
      if (!in_place) out_of_place_t = t, out_of_place_host = runner.last_enqueue_s();
      const double algbw = size / t / 1e9;
      const double busbw = algbw * (o.spec.gather ? (n - 1.0) / n : 2.0 * (n - 1) / n);
      // In place, an all-gather's own chunk is not written again (the kernels skip it).
      const double gather_writes = in_place ? n * (size - count * es) : n * size;
      const double least = o.spec.gather ? (n * count * es + gather_writes) : 2.0 * n * size;
      const double ltbw = least / t / 1e9;
      say("   %10.2f %8.2f %8.2f %6llu %8.1f %5.1f", t * 1e6, algbw, busbw, (unsigned long long)wrong, ltbw,
          100.0 * ltbw / kCopyCeilingGBs);
      total_wrong += wrong;
      bus_sum += busbw;
      ++rows;
    }
    if (o.reference) {
      group.Barrier();  // every process's ops done: the GPU is the reference's
      if (reference) {
        const uint64_t wrong = o.check ? ref_runner.Wrong(count, false) : 0;
        const double t = ref_runner.Time(count, false);
        say("   %10.2f %6llu %6.2f", t * 1e6, (unsigned long long)wrong, out_of_place_t / t);
        total_wrong += wrong;
      }
      group.Barrier();
    }
    if (o.host_column) say("   %8.2f", out_of_place_host * 1e6);
    say("\n");
  }
  say("# Out of bounds values : %llu %s\n", (unsigned long long)total_wrong, total_wrong ? "FAILED" : "OK");
  say("# Avg bus bandwidth    : %.3f\n", rows ? bus_sum / rows : 0.0);
  std::fflush(stdout);
  reference.reset();
  ranks.reset();  // leave the communicator before MPI goes away
#ifdef COLLECTIVED_BENCH_MPI
  if (o.mpi) MPI_Finalize();
#endif
  return total_wrong == 0 ? 0 : 1;
}
