// collective-bench: nccl-tests-style benchmark of the GPU collectives.
//
// This build measures the in-process baseline: -g N virtual ranks on one GPU,
// each rank's kernel on its own stream (or one fused launch with -a fused),
// no daemon. Per size: out-of-place and in-place `time algbw busbw #wrong`,
// plus the least-traffic bandwidth (every input read once, every output
// written once: 2nS for all-reduce, nS + n*nS for all-gather) and its share of
// the 4.28 TB/s copy ceiling measured on the H200. Exit status 1 on any wrong
// element.
//
//   collective-bench [-t all_reduce|all_gather] [-g ranks] [-b 16M] [-e 1G] [-f 2]
//                    [-n 20] [-w 5] [-d float32] [-o sum] [-c 1] [-G 0] [-a auto|oneshot|twoshot|fused]
//                    [-p single|post]   (one launch per op, or post + collective + complete)
//                    [-B 1]             (blocks per SM shared by the ranks' kernels; 2 is experimental:
//                                        residency is not guaranteed, a run may end in a device deadline)
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "kernels/device/device_collectives.h"
#include "kernels/device/gpu_check.h"
#include "tests/support/exact_data.h"
#include "tests/support/virtual_ranks.h"

using namespace collectived;
using device::DeviceAlgorithm;

namespace {

constexpr double kCopyCeilingGBs = 4280.0;  // DESIGN.md section 4

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
  bool gather = false;
  uint32_t ranks = 2;
  uint64_t min_bytes = 16u << 20, max_bytes = 1u << 30;
  double factor = 2;
  int iters = 20, warmup = 5, check = 1, graph = 0;
  DataType dtype = DataType::kFloat32;
  ReduceOp op = ReduceOp::kSum;
  std::string algo = "auto";
  bool single_launch = true;  // -p single|post
  int blocks_per_sm = static_cast<int>(device::kResidentBlocksPerSm);  // -B: blocks per SM shared by the ranks
};

class Runner {
 public:
  Runner(const Options& o, testing::VirtualRanks* vr, uint32_t blocks) : o_(o), vr_(vr), blocks_(blocks) {}

  DeviceAlgorithm AlgoFor(uint64_t bytes) const {
    if (o_.algo == "oneshot") return DeviceAlgorithm::kOneShot;
    if (o_.algo == "twoshot") return DeviceAlgorithm::kTwoShotPush;
    return bytes <= (256u << 10) ? DeviceAlgorithm::kOneShot : DeviceAlgorithm::kTwoShotPush;
  }

  // One op on every rank.
  void Enqueue(uint64_t count, bool in_place) {
    const uint64_t bytes = count * DataTypeSize(o_.dtype);
    if (o_.gather) {
      Check(vr_->AllGather(o_.dtype, count, in_place, blocks_), "all_gather");
    } else if (o_.algo == "fused") {
      Check(device::LaunchFusedAllReduce(o_.dtype, o_.op, vr_->Args(0, count, in_place), device::kMaxBlocks,
                                         vr_->stream(0)),
            "fused");
    } else {
      Check(vr_->AllReduce(o_.dtype, o_.op, AlgoFor(bytes), count, in_place, blocks_), "all_reduce");
    }
  }

  uint64_t Wrong(uint64_t count, bool in_place) {
    Check(vr_->Prepare(o_.dtype, o_.op, o_.gather, 77, count, in_place), "prepare");
    Enqueue(count, in_place);
    Check(vr_->Sync(), "sync");
    return vr_->Wrong(o_.dtype, o_.op, o_.gather, 77, count);
  }

  // Seconds per op: iters ops back to back (or one graph of iters ops per rank).
  double Time(uint64_t count, bool in_place) {
    for (int i = 0; i < o_.warmup; ++i) Enqueue(count, in_place);
    Check(vr_->Sync(), "sync");
    const uint32_t n = o_.algo == "fused" ? 1 : vr_->world();
    std::vector<gpuGraphExec_t> execs;
    if (o_.graph > 0) {
      // Capture every rank's stream into one graph: fork from stream 0.
      gpuEvent_t fork;
      Check(Gpu(gpuEventCreate(&fork)), "event");
      gpuGraph_t graph;
      Check(Gpu(gpuStreamBeginCapture(vr_->stream(0), gpuStreamCaptureModeThreadLocal)), "capture");
      Check(Gpu(gpuEventRecord(fork, vr_->stream(0))), "record");
      for (uint32_t r = 1; r < n; ++r) Check(Gpu(gpuStreamWaitEvent(vr_->stream(r), fork, 0)), "fork");
      for (int i = 0; i < o_.iters; ++i) Enqueue(count, in_place);
      std::vector<gpuEvent_t> joins(n);
      for (uint32_t r = 1; r < n; ++r) {
        Check(Gpu(gpuEventCreate(&joins[r])), "event");
        Check(Gpu(gpuEventRecord(joins[r], vr_->stream(r))), "record");
        Check(Gpu(gpuStreamWaitEvent(vr_->stream(0), joins[r], 0)), "join");
      }
      Check(Gpu(gpuStreamEndCapture(vr_->stream(0), &graph)), "end capture");
      execs.resize(1);
      Check(Gpu(gpuGraphInstantiate(&execs[0], graph)), "instantiate");
      gpuGraphDestroy(graph);
      Check(Gpu(gpuGraphLaunch(execs[0], vr_->stream(0))), "warm launch");
      Check(vr_->Sync(), "sync");
    }
    const auto t0 = std::chrono::steady_clock::now();
    if (o_.graph > 0) {
      for (int g = 0; g < o_.graph; ++g) Check(Gpu(gpuGraphLaunch(execs[0], vr_->stream(0))), "graph launch");
    } else {
      for (int i = 0; i < o_.iters; ++i) Enqueue(count, in_place);
    }
    Check(vr_->Sync(), "sync");
    const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    for (auto e : execs) gpuGraphExecDestroy(e);
    if (vr_->Error() != 0) {
      std::fprintf(stderr, "device error %d during timing\n", vr_->Error());
      std::exit(1);
    }
    return secs / (o_.graph > 0 ? static_cast<double>(o_.graph) * o_.iters : o_.iters);
  }

 private:
  static Status Gpu(gpuError_t e) {
    return e == gpuSuccess ? Status::Ok() : Status::Internal(gpuGetErrorString(e));
  }
  const Options& o_;
  testing::VirtualRanks* vr_;
  uint32_t blocks_;
};

}  // namespace

int main(int argc, char** argv) {
  Options o;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string f = argv[i];
    const char* v = argv[i + 1];
    if (f == "-t") o.gather = std::string(v) == "all_gather";
    else if (f == "-g") o.ranks = std::atoi(v);
    else if (f == "-b") o.min_bytes = ParseSize(v);
    else if (f == "-e") o.max_bytes = ParseSize(v);
    else if (f == "-f") o.factor = std::atof(v);
    else if (f == "-n") o.iters = std::atoi(v);
    else if (f == "-w") o.warmup = std::atoi(v);
    else if (f == "-d") o.dtype = ParseType(v);
    else if (f == "-o") o.op = ParseOp(v);
    else if (f == "-c") o.check = std::atoi(v);
    else if (f == "-G") o.graph = std::atoi(v);
    else if (f == "-a") o.algo = v;
    else if (f == "-p") o.single_launch = std::string(v) != "post";
    else if (f == "-B") o.blocks_per_sm = std::clamp(std::atoi(v), 1, 2);  // 2: experimental, see kResidentBlocksPerSm
    else {
      std::fprintf(stderr, "unknown option %s (see the header of bench/collective_bench.cc)\n", f.c_str());
      return 2;
    }
  }
  int ndev = 0;
  if (gpuGetDeviceCount(&ndev) != gpuSuccess || ndev == 0) {
    std::fprintf(stderr, "collective-bench: no GPU\n");
    return 2;
  }
  int sms = 0;
  gpuDeviceGetAttribute(&sms, gpuDevAttrMultiProcessorCount, 0);
  const uint32_t blocks =
      std::max<uint32_t>(1, std::min<uint32_t>(device::kMaxBlocks, o.blocks_per_sm * sms / o.ranks));
  const size_t es = DataTypeSize(o.dtype);
  const uint32_t n = o.ranks;
  testing::VirtualRanks vr;
  const uint64_t max_count = o.max_bytes / es;
  Check(vr.Init(n, max_count * es, (o.gather ? n : 1) * max_count * es), "init");
  vr.SetSingleLaunch(o.single_launch);
  Runner runner(o, &vr, blocks);

  std::printf("# collective-bench (in-process baseline): %s, %u virtual ranks on one GPU, %u blocks per rank, "
              "algo %s, %s, graph %d, iters %d, warmup %d\n",
              o.gather ? "all_gather" : "all_reduce", n, blocks, o.algo.c_str(),
              o.single_launch ? "single launch" : "post/complete launches", o.graph, o.iters, o.warmup);
  std::printf("# least-traffic bandwidth (ltbw) counts each input read once and each output written once; "
              "%% of the %.0f GB/s copy ceiling\n", kCopyCeilingGBs);
  std::printf("#%13s %12s %8s %6s   %10s %8s %8s %6s %8s %5s   %10s %8s %8s %6s %8s %5s\n", "size", "count", "type",
              "redop", "time(us)", "algbw", "busbw", "#wrong", "ltbw", "%", "time(us)", "algbw", "busbw", "#wrong",
              "ltbw", "%");
  uint64_t total_wrong = 0;
  double bus_sum = 0;
  int rows = 0;
  for (uint64_t bytes = o.min_bytes; bytes <= o.max_bytes;
       bytes = std::max<uint64_t>(bytes + 1, static_cast<uint64_t>(bytes * o.factor))) {
    // all_gather: size is the total output (nccl-tests); count is per rank.
    const uint64_t count = o.gather ? bytes / es / n : bytes / es;
    if (count == 0) continue;
    const uint64_t size = o.gather ? count * es * n : count * es;
    std::printf("%14llu %12llu %8s %6s", (unsigned long long)size, (unsigned long long)count,
                DataTypeName(o.dtype), o.gather ? "none" : ReduceOpName(o.op));
    for (bool in_place : {false, true}) {
      const uint64_t wrong = o.check ? runner.Wrong(count, in_place) : 0;
      const double t = runner.Time(count, in_place);
      const double algbw = size / t / 1e9;
      const double busbw = algbw * (o.gather ? (n - 1.0) / n : 2.0 * (n - 1) / n);
      const double least = o.gather ? (n * count * es + n * size) : 2.0 * n * size;
      const double ltbw = least / t / 1e9;
      std::printf("   %10.2f %8.2f %8.2f %6llu %8.1f %5.1f", t * 1e6, algbw, busbw, (unsigned long long)wrong, ltbw,
                  100.0 * ltbw / kCopyCeilingGBs);
      total_wrong += wrong;
      bus_sum += busbw;
      ++rows;
    }
    std::printf("\n");
  }
  std::printf("# Out of bounds values : %llu %s\n", (unsigned long long)total_wrong, total_wrong ? "FAILED" : "OK");
  std::printf("# Avg bus bandwidth    : %.3f\n", rows ? bus_sum / rows : 0.0);
  return total_wrong == 0 ? 0 : 1;
}
