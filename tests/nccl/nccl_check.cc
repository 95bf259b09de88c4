// A program written against nccl.h, as a user's would be: one rank per
// process (under mpirun, or spawned with --rank/--world), or every rank in
// this process (--mode initall). Each mode checks every element exactly
// (inputs of tests/support/exact_data.h, outputs poisoned first) and prints
// PASS or the first failure; the exit status says the same.
//
//   nccl_check --mode ops|graph|split|nonblocking|abort|kill|initall --dir DIR
//              [--rank R --world N] [--max-bytes B] [--watchdog-s S]
//   nccl_check --mode bench --dir DIR [--bytes 16384,1048576] [--zero-copy 0|1]
//
// --mode bench times ncclAllReduce (float32 sum, out of place) as
// collective-bench times the C++ client (-n 20 -w 5, -G 20, -Y 1), so the
// NCCL API library's own cost per op is one row against the other in the
// same run, with no framework in between (tests/frameworks/run_torch_nccl.sh
// prints the three side by side). Each size is checked exactly first.
//
// DIR is where rank 0 leaves the ncclUniqueId for the others (one machine).
// Ranks under mpirun take R and N from Open MPI's environment.
//
// --watchdog-s S: a rank still running after S seconds prints the step it is
// in (Step) and exits 4, so a stuck rank ends its mpirun with where it
// stuck, not in silence until the caller's timeout.
#include <cuda_runtime.h>
#include <execinfo.h>
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "nccl.h"
#include "tests/support/exact_data.h"

namespace {

using collectived::DataType;
using collectived::ReduceOp;
namespace ex = collectived::testing;

int g_rank = 0, g_world = 1;
std::string g_dir;
uint64_t g_max_bytes = 256ull << 20;
uint64_t g_checks = 0;

// The step this rank is in, for the watchdog (a string literal).
std::atomic<const char*> g_step{"start"};
void Step(const char* what) { g_step.store(what, std::memory_order_relaxed); }

[[noreturn]] void Die(const std::string& what) {
  std::fprintf(stderr, "FAIL rank %d: %s\n", g_rank, what.c_str());
  std::fflush(stderr);
  std::_Exit(1);
}

#define NCCL_OK(call)                                                                                     \
  do {                                                                                                    \
    ncclResult_t _r = (call);                                                                             \
    if (_r != ncclSuccess) {                                                                              \
      Die(std::string(#call) + " -> " + ncclGetErrorString(_r) + " | " + ncclGetLastError(nullptr));     \
    }                                                                                                     \
  } while (0)
#define CUDA_OK(call)                                                                       \
  do {                                                                                      \
    cudaError_t _e = (call);                                                                \
    if (_e != cudaSuccess) Die(std::string(#call) + " -> " + cudaGetErrorString(_e));       \
  } while (0)

double Ms(std::chrono::steady_clock::time_point since) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - since).count();
}

// Rank 0 makes the id and leaves it in DIR; the others wait for it.
ncclUniqueId ShareId(const std::string& name) {
  ncclUniqueId id;
  const std::string path = g_dir + "/" + name;
  if (g_rank == 0) {
    NCCL_OK(ncclGetUniqueId(&id));
    const std::string tmp = path + ".tmp";
    std::ofstream(tmp, std::ios::binary).write(id.internal, sizeof(id.internal));
    if (std::rename(tmp.c_str(), path.c_str()) != 0) Die("rename " + path);
    return id;
  }
  const auto start = std::chrono::steady_clock::now();
  for (;;) {
    std::ifstream in(path, std::ios::binary);
    if (in && in.read(id.internal, sizeof(id.internal))) return id;
    if (Ms(start) > 60000) Die("no unique id at " + path);
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
}

struct TypeCase {
  ncclDataType_t nccl;
  DataType data;  // exact_data's type of the same layout; kUnspecified: bytes
  const char* name;
};
const TypeCase kTypes[] = {
    {ncclFloat32, DataType::kFloat32, "float32"}, {ncclFloat64, DataType::kFloat64, "float64"},
    {ncclFloat16, DataType::kFloat16, "float16"}, {ncclBfloat16, DataType::kBFloat16, "bfloat16"},
    {ncclInt32, DataType::kInt32, "int32"},       {ncclUint32, DataType::kUint32, "uint32"},
    {ncclInt64, DataType::kInt64, "int64"},       {ncclUint64, DataType::kInt64, "uint64"},
    {ncclInt8, DataType::kUnspecified, "int8"},   {ncclUint8, DataType::kUnspecified, "uint8"},
    {ncclFloat8e4m3, DataType::kUnspecified, "fp8e4m3"},
};
size_t SizeOf(const TypeCase& t) { return t.data == DataType::kUnspecified ? 1 : collectived::DataTypeSize(t.data); }

const std::pair<ncclRedOp_t, ReduceOp> kOps[] = {{ncclSum, ReduceOp::kSum}, {ncclProd, ReduceOp::kProd},
                                                 {ncclMax, ReduceOp::kMax}, {ncclMin, ReduceOp::kMin},
                                                 {ncclAvg, ReduceOp::kAvg}};

uint8_t ByteOf(uint32_t rank, uint64_t j, uint64_t seed) { return static_cast<uint8_t>(rank * 131 + j * 7 + seed * 29 + 1); }

void FillHost(const TypeCase& t, ReduceOp op, uint32_t rank, uint64_t seed, std::vector<uint8_t>* h, uint64_t count) {
  h->resize(count * SizeOf(t));
  if (t.data == DataType::kUnspecified) {
    for (uint64_t j = 0; j < count; ++j) (*h)[j] = ByteOf(rank, j, seed);
  } else {
    ex::FillInput(t.data, op, rank, seed, h->data(), count);
  }
}

// The ops run on a non-blocking stream, which the legacy stream's memset and
// pageable copy do not order against (the copy may return before its DMA
// lands): both end with a device-wide sync.
void Upload(void* d, const std::vector<uint8_t>& h) {
  CUDA_OK(cudaMemcpy(d, h.data(), h.size(), cudaMemcpyHostToDevice));
  CUDA_OK(cudaDeviceSynchronize());
}
std::vector<uint8_t> Download(const void* d, uint64_t bytes) {
  std::vector<uint8_t> h(bytes);
  CUDA_OK(cudaMemcpy(h.data(), d, bytes, cudaMemcpyDeviceToHost));
  return h;
}
void PoisonDevice(void* d, uint64_t bytes) {
  CUDA_OK(cudaMemset(d, 0xA5, bytes));
  CUDA_OK(cudaDeviceSynchronize());
}

uint64_t WrongGather(const TypeCase& t, const std::vector<uint8_t>& out, uint64_t count, uint64_t seed) {
  if (t.data != DataType::kUnspecified) return ex::CountWrongAllGather(t.data, g_world, seed, out.data(), count);
  uint64_t wrong = 0;
  for (int k = 0; k < g_world; ++k) {
    for (uint64_t j = 0; j < count; ++j) wrong += out[k * count + j] != ByteOf(k, j, seed);
  }
  return wrong;
}

void Expect(uint64_t wrong, const std::string& what) {
  ++g_checks;
  if (wrong != 0) Die(what + ": " + std::to_string(wrong) + " wrong elements");
}

// Device buffers: cudaMalloc (staged) or ncclMemAlloc + ncclCommRegister on every rank (zero-copy).
struct DevBuf {
  void* p = nullptr;
  void* reg = nullptr;
  bool nccl_mem = false;
  ncclComm_t comm = nullptr;
  DevBuf(ncclComm_t c, uint64_t bytes, bool zero_copy) : nccl_mem(zero_copy), comm(c) {
    if (zero_copy) {
      NCCL_OK(ncclMemAlloc(&p, bytes));
      NCCL_OK(ncclCommRegister(comm, p, bytes, &reg));
    } else {
      CUDA_OK(cudaMalloc(&p, bytes));
    }
  }
  ~DevBuf() {
    if (nccl_mem) {
      NCCL_OK(ncclCommDeregister(comm, reg));
      NCCL_OK(ncclMemFree(p));
    } else {
      cudaFree(p);
    }
  }
  uint8_t* b() const { return static_cast<uint8_t*>(p); }
};

ncclComm_t InitComm(const std::string& id_name) {
  ncclUniqueId id = ShareId(id_name);
  ncclComm_t comm = nullptr;
  NCCL_OK(ncclCommInitRank(&comm, g_world, id, g_rank));
  int n = 0, r = -1, dev = -1;
  NCCL_OK(ncclCommCount(comm, &n));
  NCCL_OK(ncclCommUserRank(comm, &r));
  NCCL_OK(ncclCommCuDevice(comm, &dev));
  if (n != g_world || r != g_rank || dev != 0) Die("count/rank/device disagree");
  return comm;
}

// One all-reduce checked; in place works in recv.
void CheckAllReduce(ncclComm_t comm, cudaStream_t s, const TypeCase& t, ncclRedOp_t nop, ReduceOp op, uint64_t count,
                    bool in_place, bool zero_copy, uint64_t seed) {
  const uint64_t bytes = count * SizeOf(t);
  DevBuf send(comm, bytes, zero_copy), recv(comm, bytes, zero_copy);
  std::vector<uint8_t> h;
  FillHost(t, op, g_rank, seed, &h, count);
  PoisonDevice(recv.p, bytes);
  Upload(in_place ? recv.p : send.p, h);
  const void* src = in_place ? recv.p : send.p;
  NCCL_OK(ncclAllReduce(src, recv.p, count, t.nccl, nop, comm, s));
  CUDA_OK(cudaStreamSynchronize(s));
  std::vector<uint8_t> out = Download(recv.p, bytes);
  Expect(ex::CountWrongAllReduce(t.data, op, g_world, seed, out.data(), count),
         std::string("all-reduce ") + t.name + " " + collectived::ReduceOpName(op) + " count " + std::to_string(count) +
             (in_place ? " in place" : "") + (zero_copy ? " zero-copy" : " staged"));
}

void CheckAllGather(ncclComm_t comm, cudaStream_t s, const TypeCase& t, uint64_t count, bool in_place, bool zero_copy,
                    uint64_t seed) {
  const uint64_t bytes = count * SizeOf(t);
  DevBuf send(comm, bytes, zero_copy), recv(comm, bytes * g_world, zero_copy);
  std::vector<uint8_t> h;
  FillHost(t, ReduceOp::kUnspecified, g_rank, seed, &h, count);
  PoisonDevice(recv.p, bytes * g_world);
  void* src = in_place ? recv.b() + g_rank * bytes : send.p;
  Upload(src, h);
  NCCL_OK(ncclAllGather(src, recv.p, count, t.nccl, comm, s));
  CUDA_OK(cudaStreamSynchronize(s));
  Expect(WrongGather(t, Download(recv.p, bytes * g_world), count, seed),
         std::string("all-gather ") + t.name + " count " + std::to_string(count) + (in_place ? " in place" : "") +
             (zero_copy ? " zero-copy" : " staged"));
}

void CheckBroadcast(ncclComm_t comm, cudaStream_t s, const TypeCase& t, uint64_t count, int root, bool in_place,
                    uint64_t seed) {
  const uint64_t bytes = count * SizeOf(t);
  DevBuf send(comm, bytes, false), recv(comm, bytes, false);
  std::vector<uint8_t> h;
  FillHost(t, ReduceOp::kUnspecified, root, seed, &h, count);  // the root's input
  PoisonDevice(recv.p, bytes);
  PoisonDevice(send.p, bytes);
  void* src = in_place ? recv.p : send.p;
  if (g_rank == root) Upload(src, h);
  NCCL_OK(ncclBroadcast(src, recv.p, count, t.nccl, root, comm, s));
  CUDA_OK(cudaStreamSynchronize(s));
  std::vector<uint8_t> out = Download(recv.p, bytes);
  Expect(std::memcmp(out.data(), h.data(), bytes) != 0,
         std::string("broadcast ") + t.name + " count " + std::to_string(count) + " root " + std::to_string(root));
}

// Reduce-scatter and reduce of float32 sums: small integers, exact in any order.
void CheckReduceScatterAndReduce(ncclComm_t comm, cudaStream_t s, uint64_t rc, uint64_t seed) {
  const TypeCase t = kTypes[0];
  const uint64_t total = rc * g_world;
  DevBuf send(comm, total * 4, false), recv(comm, total * 4, false);
  std::vector<uint8_t> h;
  FillHost(t, ReduceOp::kSum, g_rank, seed, &h, total);
  Upload(send.p, h);
  PoisonDevice(recv.p, total * 4);
  NCCL_OK(ncclReduceScatter(send.p, recv.p, rc, ncclFloat32, ncclSum, comm, s));
  CUDA_OK(cudaStreamSynchronize(s));
  std::vector<uint8_t> out = Download(recv.p, rc * 4);
  const float* f = reinterpret_cast<const float*>(out.data());
  uint64_t wrong = 0;
  for (uint64_t j = 0; j < rc; ++j) {
    double want = 0;
    for (int r = 0; r < g_world; ++r) want += ex::InputValue(DataType::kFloat32, ReduceOp::kSum, r, g_rank * rc + j, seed);
    wrong += f[j] != static_cast<float>(want);
  }
  Expect(wrong, "reduce-scatter float32 sum recvcount " + std::to_string(rc));
  const int root = g_world - 1;
  PoisonDevice(recv.p, total * 4);
  NCCL_OK(ncclReduce(send.p, recv.p, total, ncclFloat32, ncclSum, root, comm, s));
  CUDA_OK(cudaStreamSynchronize(s));
  if (g_rank == root) {
    out = Download(recv.p, total * 4);
    Expect(ex::CountWrongAllReduce(DataType::kFloat32, ReduceOp::kSum, g_world, seed, out.data(), total),
           "reduce float32 sum count " + std::to_string(total));
  }
}

void ModeOps() {
  ncclComm_t comm = InitComm("ops");
  cudaStream_t s;
  CUDA_OK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  uint64_t seed = 1;
  // Every type and op, small and odd sizes, in and out of place, staged and zero-copy.
  for (const TypeCase& t : kTypes) {
    for (uint64_t count : {uint64_t{1}, uint64_t{7}, uint64_t{1000}, uint64_t{65539}}) {
      for (bool zero_copy : {false, true}) {
        for (bool in_place : {false, true}) {
          CheckAllGather(comm, s, t, count, in_place, zero_copy, ++seed);
          if (t.data == DataType::kUnspecified) continue;
          for (const auto& [nop, op] : kOps) {
            if (!collectived::IsValidReduction(t.data, op)) continue;
            if (t.nccl == ncclUint64 && op != ReduceOp::kSum && op != ReduceOp::kProd) continue;
            CheckAllReduce(comm, s, t, nop, op, count, in_place, zero_copy, ++seed);
          }
        }
      }
    }
  }
  // Sizes up to --max-bytes: beyond the daemon's staging slot too (pieces).
  for (uint64_t bytes = 1 << 20; bytes <= g_max_bytes; bytes *= 4) {
    for (bool zero_copy : {false, true}) {
      CheckAllReduce(comm, s, kTypes[0], ncclSum, ReduceOp::kSum, bytes / 4, false, zero_copy, ++seed);
      CheckAllReduce(comm, s, kTypes[3], ncclSum, ReduceOp::kSum, bytes / 2 + 1, true, zero_copy, ++seed);
      CheckAllGather(comm, s, kTypes[0], bytes / 4 / g_world, false, zero_copy, ++seed);
      CheckAllGather(comm, s, kTypes[9], bytes / g_world + 3, true, zero_copy, ++seed);
    }
  }
  for (const TypeCase& t : {kTypes[0], kTypes[3], kTypes[9]}) {
    for (uint64_t count : {uint64_t{1}, uint64_t{1001}, uint64_t{1} << 20}) {
      for (int root : {0, g_world - 1}) CheckBroadcast(comm, s, t, count, root, root == 0, ++seed);
    }
  }
  CheckReduceScatterAndReduce(comm, s, 1, ++seed);
  CheckReduceScatterAndReduce(comm, s, 100003, ++seed);
  // Negative controls: refused before anything is enqueued, named in the last error.
  void* p = nullptr;
  CUDA_OK(cudaMalloc(&p, 64));
  if (ncclAllReduce(p, p, 4, ncclFloat8e4m3, ncclSum, comm, s) != ncclInvalidArgument) Die("fp8 all-reduce accepted");
  if (std::string(ncclGetLastError(comm)).find("datatype 10") == std::string::npos) Die("fp8 error text");
  if (ncclAllReduce(p, p, 4, ncclInt32, ncclAvg, comm, s) != ncclInvalidArgument) Die("int avg accepted");
  if (ncclBroadcast(p, p, 4, ncclInt32, g_world, comm, s) != ncclInvalidArgument) Die("root out of range accepted");
  // A grouped pair of ops runs at ncclGroupEnd, in order.
  const TypeCase& f = kTypes[0];
  DevBuf a(comm, 4096, false), b(comm, 4096 * g_world, false);
  std::vector<uint8_t> h;
  FillHost(f, ReduceOp::kSum, g_rank, 77, &h, 1024);
  Upload(a.p, h);
  PoisonDevice(b.p, 4096 * g_world);
  NCCL_OK(ncclGroupStart());
  NCCL_OK(ncclAllGather(a.p, b.p, 1024, ncclFloat32, comm, s));
  NCCL_OK(ncclAllReduce(a.p, a.p, 1024, ncclFloat32, ncclSum, comm, s));
  NCCL_OK(ncclGroupEnd());
  CUDA_OK(cudaStreamSynchronize(s));
  // The all-gather ran first: it gathered the inputs as filled for the sum
  // (not the all-gather pattern), before the all-reduce rewrote them.
  {
    const std::vector<uint8_t> got = Download(b.p, 4096 * g_world);
    const float* v = reinterpret_cast<const float*>(got.data());
    uint64_t wrong = 0;
    for (int r = 0; r < g_world; ++r) {
      for (uint64_t j = 0; j < 1024; ++j) {
        wrong += v[r * 1024 + j] != static_cast<float>(ex::InputValue(DataType::kFloat32, ReduceOp::kSum, r, j, 77));
      }
    }
    Expect(wrong, "grouped all-gather");
  }
  Expect(ex::CountWrongAllReduce(DataType::kFloat32, ReduceOp::kSum, g_world, 77, Download(a.p, 4096).data(), 1024),
         "grouped all-reduce");
  cudaFree(p);
  ncclResult_t async;
  NCCL_OK(ncclCommGetAsyncError(comm, &async));
  if (async != ncclSuccess) Die("async error after clean ops");
  NCCL_OK(ncclCommFinalize(comm));
  NCCL_OK(ncclCommDestroy(comm));
  cudaStreamDestroy(s);
}

// Ops captured into a CUDA graph, replayed with new inputs each time.
void ModeGraph() {
  ncclComm_t comm = InitComm("graph");
  cudaStream_t s;
  CUDA_OK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  const uint64_t count = 1 << 16, big = (32ull << 20) / 4;  // big: above the staging slot
  {  // the buffers deregister (~DevBuf) before the communicator is destroyed
    DevBuf zin(comm, count * 4, true), zout(comm, count * 4, true);
    DevBuf sin(comm, big * 4, false), sout(comm, big * 4, false);
    DevBuf gin(comm, count * 2, false), gout(comm, count * 2 * g_world, false);
    DevBuf bc(comm, 1001, false);
    cudaGraph_t graph;
    cudaGraphExec_t exec;
    CUDA_OK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
    NCCL_OK(ncclAllReduce(zin.p, zout.p, count, ncclFloat32, ncclSum, comm, s));
    NCCL_OK(ncclAllReduce(sin.p, sout.p, big, ncclFloat32, ncclMax, comm, s));
    NCCL_OK(ncclAllGather(gin.p, gout.p, count, ncclBfloat16, comm, s));
    NCCL_OK(ncclBroadcast(bc.p, bc.p, 1001, ncclUint8, 0, comm, s));
    CUDA_OK(cudaStreamEndCapture(s, &graph));
    CUDA_OK(cudaGraphInstantiate(&exec, graph, 0));
    const TypeCase f32 = kTypes[0], bf = kTypes[3], u8 = kTypes[9];
    for (uint64_t replay = 0; replay < 3; ++replay) {
      const uint64_t seed = 1000 + replay;
      std::vector<uint8_t> h;
      FillHost(f32, ReduceOp::kSum, g_rank, seed, &h, count);
      Upload(zin.p, h);
      FillHost(f32, ReduceOp::kMax, g_rank, seed, &h, big);
      Upload(sin.p, h);
      FillHost(bf, ReduceOp::kUnspecified, g_rank, seed, &h, count);
      Upload(gin.p, h);
      std::vector<uint8_t> root;
      FillHost(u8, ReduceOp::kUnspecified, 0, seed, &root, 1001);
      if (g_rank == 0) Upload(bc.p, root); else PoisonDevice(bc.p, 1001);
      PoisonDevice(zout.p, count * 4);
      PoisonDevice(sout.p, big * 4);
      PoisonDevice(gout.p, count * 2 * g_world);
      CUDA_OK(cudaGraphLaunch(exec, s));
      CUDA_OK(cudaStreamSynchronize(s));
      const std::string r = " (replay " + std::to_string(replay) + ")";
      Expect(ex::CountWrongAllReduce(DataType::kFloat32, ReduceOp::kSum, g_world, seed, Download(zout.p, count * 4).data(), count),
             "graph zero-copy all-reduce" + r);
      Expect(ex::CountWrongAllReduce(DataType::kFloat32, ReduceOp::kMax, g_world, seed, Download(sout.p, big * 4).data(), big),
             "graph staged all-reduce in pieces" + r);
      Expect(ex::CountWrongAllGather(DataType::kBFloat16, g_world, seed, Download(gout.p, count * 2 * g_world).data(), count),
             "graph all-gather" + r);
      Expect(Download(bc.p, 1001) != root, "graph broadcast" + r);
    }
    CUDA_OK(cudaGraphExecDestroy(exec));
    CUDA_OK(cudaGraphDestroy(graph));
  }  // a use of the communicator after ncclCommDestroy (undefined, as in NCCL) killed a rank on the H100
  NCCL_OK(ncclCommDestroy(comm));
  cudaStreamDestroy(s);
}

// ncclCommSplit by parity, then a sum in each half.
void ModeSplit() {
  Step("split: ncclCommInitRank of the parent");
  ncclComm_t comm = InitComm("split");
  ncclComm_t half = nullptr, none = nullptr;
  Step("split: ncclCommSplit by parity");
  NCCL_OK(ncclCommSplit(comm, g_rank % 2, -g_rank, &half, nullptr));  // key -rank: reversed order
  Step("split: ncclCommSplit with NCCL_SPLIT_NOCOLOR");
  NCCL_OK(ncclCommSplit(comm, NCCL_SPLIT_NOCOLOR, 0, &none, nullptr));
  if (none != nullptr) Die("NCCL_SPLIT_NOCOLOR gave a communicator");
  int n = 0, r = 0;
  NCCL_OK(ncclCommCount(half, &n));
  NCCL_OK(ncclCommUserRank(half, &r));
  const int members = (g_world + 1 - g_rank % 2) / 2;
  // Members of my parity ordered by key -rank: the highest rank comes first.
  int expect_rank = 0;
  for (int q = g_world - 1; q > g_rank; --q) expect_rank += q % 2 == g_rank % 2;
  if (n != members || r != expect_rank) {
    Die("split: count " + std::to_string(n) + " rank " + std::to_string(r) + ", wanted " + std::to_string(members) +
        " and " + std::to_string(expect_rank));
  }
  cudaStream_t s;
  CUDA_OK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  int32_t* d = nullptr;
  CUDA_OK(cudaMalloc(&d, 4));
  const int32_t mine = 1000 + g_rank;
  CUDA_OK(cudaMemcpy(d, &mine, 4, cudaMemcpyHostToDevice));
  Step("split: ncclAllReduce in the half, and its stream synchronize");
  NCCL_OK(ncclAllReduce(d, d, 1, ncclInt32, ncclSum, half, s));
  CUDA_OK(cudaStreamSynchronize(s));
  int32_t got = 0;
  CUDA_OK(cudaMemcpy(&got, d, 4, cudaMemcpyDeviceToHost));
  int32_t want = 0;
  for (int q = 0; q < g_world; ++q) want += q % 2 == g_rank % 2 ? 1000 + q : 0;
  Expect(got != want, "split all-reduce");
  Step("split: ncclCommDestroy of the half");
  NCCL_OK(ncclCommDestroy(half));
  Step("split: ncclCommDestroy of the parent");
  NCCL_OK(ncclCommDestroy(comm));
  cudaFree(d);
}

// Non-blocking init: ncclInProgress, then polled to success.
void ModeNonblocking() {
  ncclUniqueId id = ShareId("nonblocking");
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;
  config.commName = "nonblocking-check";
  ncclComm_t comm = nullptr;
  ncclResult_t r = ncclCommInitRankConfig(&comm, g_world, id, g_rank, &config);
  if (r != ncclInProgress && r != ncclSuccess) Die(std::string("non-blocking init: ") + ncclGetErrorString(r));
  ncclResult_t state = ncclInProgress;
  const auto start = std::chrono::steady_clock::now();
  uint64_t polls = 0;
  while (state == ncclInProgress) {
    NCCL_OK(ncclCommGetAsyncError(comm, &state));
    ++polls;
    if (Ms(start) > 60000) Die("non-blocking init never finished");
  }
  if (state != ncclSuccess) Die(std::string("non-blocking init failed: ") + ncclGetLastError(comm));
  std::printf("rank %d: non-blocking init: %s at first, ready after %llu polls, %.1f ms\n", g_rank,
              r == ncclInProgress ? "ncclInProgress" : "ncclSuccess", static_cast<unsigned long long>(polls), Ms(start));
  cudaStream_t s;
  CUDA_OK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  CheckAllReduce(comm, s, kTypes[0], ncclSum, ReduceOp::kSum, 4096, false, false, 5);
  NCCL_OK(ncclCommDestroy(comm));
}

// Rank 0's op stalls (no peer posts); a second thread aborts the communicator.
void ModeAbort() {
  ncclComm_t comm = InitComm("abort");
  cudaStream_t s;
  CUDA_OK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  void* p = nullptr;
  CUDA_OK(cudaMalloc(&p, 1 << 20));
  if (g_rank == 0) {
    NCCL_OK(ncclAllReduce(p, p, 1 << 18, ncclFloat32, ncclSum, comm, s));
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    if (cudaStreamQuery(s) != cudaErrorNotReady) Die("the stalled op finished without its peers");
    double abort_ms = 0;
    std::thread aborter([&] {
      const auto t0 = std::chrono::steady_clock::now();
      NCCL_OK(ncclCommAbort(comm));
      abort_ms = Ms(t0);
    });
    const auto t0 = std::chrono::steady_clock::now();
    CUDA_OK(cudaStreamSynchronize(s));  // must come back: the stalled kernel gave up
    const double freed_ms = Ms(t0);
    aborter.join();
    std::printf("rank 0: ncclCommAbort returned in %.1f ms; the stalled stream moved on after %.1f ms (op timeout 600 s)\n",
                abort_ms, freed_ms);
    if (abort_ms > 5000 || freed_ms > 5000) Die("abort or the stalled stream took longer than 5 s");
  } else {
    // Peers learn of it through ncclCommGetAsyncError.
    const auto t0 = std::chrono::steady_clock::now();
    ncclResult_t async = ncclSuccess;
    while (async == ncclSuccess && Ms(t0) < 20000) {
      NCCL_OK(ncclCommGetAsyncError(comm, &async));
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    if (async != ncclRemoteError) Die(std::string("peer saw ") + ncclGetErrorString(async));
    std::printf("rank %d: ncclCommGetAsyncError -> ncclRemoteError (%s)\n", g_rank, ncclGetLastError(comm));
    NCCL_OK(ncclCommAbort(comm));
  }
  ++g_checks;
  cudaFree(p);
}

// The last rank is killed (SIGKILL) after one good op; the others see it
// through ncclCommGetAsyncError while their next op waits for it.
void ModeKill() {
  ncclComm_t comm = InitComm("kill");
  cudaStream_t s;
  CUDA_OK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  CheckAllReduce(comm, s, kTypes[0], ncclSum, ReduceOp::kSum, 1024, false, false, 3);
  void* p = nullptr;
  CUDA_OK(cudaMalloc(&p, 4096));
  if (g_rank == g_world - 1) {
    std::printf("rank %d: killing itself\n", g_rank);
    std::fflush(stdout);
    raise(SIGKILL);
  }
  NCCL_OK(ncclAllReduce(p, p, 1024, ncclFloat32, ncclSum, comm, s));
  const auto t0 = std::chrono::steady_clock::now();
  ncclResult_t async = ncclSuccess;
  while (async == ncclSuccess && Ms(t0) < 30000) {
    NCCL_OK(ncclCommGetAsyncError(comm, &async));
    std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
  const double seen_ms = Ms(t0);
  if (async != ncclRemoteError) Die(std::string("after the kill: ") + ncclGetErrorString(async));
  const std::string why = ncclGetLastError(comm);
  if (why.find("rank " + std::to_string(g_world - 1)) == std::string::npos) Die("the error does not name the dead rank: " + why);
  const auto t1 = std::chrono::steady_clock::now();
  CUDA_OK(cudaStreamSynchronize(s));
  std::printf("rank %d: saw the killed rank after %.1f ms (op timeout 600 s): %s; stream moved on in %.1f ms\n", g_rank,
              seen_ms, why.c_str(), Ms(t1));
  if (seen_ms > 10000) Die("took longer than 10 s");
  ++g_checks;
  NCCL_OK(ncclCommAbort(comm));
  cudaFree(p);
}

// Every rank in this process, all on device 0 (real NCCL refuses a repeated device).
void ModeInitAll() {
  std::vector<int> devs(g_world, 0);
  std::vector<ncclComm_t> comms(g_world);
  NCCL_OK(ncclCommInitAll(comms.data(), g_world, devs.data()));
  const uint64_t count = 1 << 20;
  std::vector<cudaStream_t> streams(g_world);
  std::vector<void*> bufs(g_world);
  for (int r = 0; r < g_world; ++r) {
    CUDA_OK(cudaStreamCreateWithFlags(&streams[r], cudaStreamNonBlocking));
    CUDA_OK(cudaMalloc(&bufs[r], count * 4));
    std::vector<uint8_t> h(count * 4);
    ex::FillInput(DataType::kFloat32, ReduceOp::kSum, r, 9, h.data(), count);
    Upload(bufs[r], h);
  }
  NCCL_OK(ncclGroupStart());
  for (int r = 0; r < g_world; ++r) NCCL_OK(ncclAllReduce(bufs[r], bufs[r], count, ncclFloat32, ncclSum, comms[r], streams[r]));
  NCCL_OK(ncclGroupEnd());
  for (int r = 0; r < g_world; ++r) {
    CUDA_OK(cudaStreamSynchronize(streams[r]));
    Expect(ex::CountWrongAllReduce(DataType::kFloat32, ReduceOp::kSum, g_world, 9, Download(bufs[r], count * 4).data(), count),
           "initall rank " + std::to_string(r));
  }
  for (int r = 0; r < g_world; ++r) {
    NCCL_OK(ncclCommDestroy(comms[r]));
    cudaFree(bufs[r]);
  }
}

// Seconds per op of `iters` ops (graph: `graphs` launches of a graph of
// `iters` ops; sync_each: the host waits for each op), the slowest rank's.
double TimeOps(ncclComm_t comm, cudaStream_t s, const void* in, void* out, uint64_t count, int iters, int graphs,
               bool sync_each, double* scratch) {
  auto op = [&] { NCCL_OK(ncclAllReduce(in, out, count, ncclFloat32, ncclSum, comm, s)); };
  for (int i = 0; i < 5; ++i) op();
  cudaGraphExec_t exec = nullptr;
  if (graphs > 0) {
    cudaGraph_t graph;
    CUDA_OK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
    for (int i = 0; i < iters; ++i) op();
    CUDA_OK(cudaStreamEndCapture(s, &graph));
    CUDA_OK(cudaGraphInstantiate(&exec, graph, 0));
    CUDA_OK(cudaGraphDestroy(graph));
    CUDA_OK(cudaGraphLaunch(exec, s));
  }
  CUDA_OK(cudaStreamSynchronize(s));
  // Every rank starts together: a one-element all-reduce, then its stream.
  NCCL_OK(ncclAllReduce(scratch, scratch, 1, ncclFloat64, ncclSum, comm, s));
  CUDA_OK(cudaStreamSynchronize(s));
  const auto start = std::chrono::steady_clock::now();
  if (graphs > 0) {
    for (int g = 0; g < graphs; ++g) CUDA_OK(cudaGraphLaunch(exec, s));
  } else {
    for (int i = 0; i < iters; ++i) {
      op();
      if (sync_each) CUDA_OK(cudaStreamSynchronize(s));
    }
  }
  CUDA_OK(cudaStreamSynchronize(s));
  double secs = Ms(start) / 1e3 / (graphs > 0 ? double(graphs) * iters : iters);
  if (exec != nullptr) CUDA_OK(cudaGraphExecDestroy(exec));
  CUDA_OK(cudaMemcpy(scratch, &secs, sizeof(secs), cudaMemcpyHostToDevice));
  NCCL_OK(ncclAllReduce(scratch, scratch, 1, ncclFloat64, ncclMax, comm, s));
  CUDA_OK(cudaStreamSynchronize(s));
  CUDA_OK(cudaMemcpy(&secs, scratch, sizeof(secs), cudaMemcpyDeviceToHost));
  return secs;
}

std::string g_bytes = "16384,1048576,67108864,1073741824";
bool g_zero_copy = false;

void ModeBench() {
  ncclComm_t comm = InitComm("bench");
  cudaStream_t s;
  CUDA_OK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  double* scratch = nullptr;
  CUDA_OK(cudaMalloc(&scratch, sizeof(double)));
  if (g_rank == 0) {
    std::printf("# nccl_check --mode bench: ncclAllReduce float32 sum out of place through the NCCL API library, %d "
                "ranks, %s buffers, slowest rank; eager -n 20 -w 5, eager with the host waiting for each op, graph "
                "-G 20 of 20 ops\n", g_world, g_zero_copy ? "ncclMemAlloc (zero-copy)" : "cudaMalloc (staged)");
    std::printf("%12s %10s %12s %10s\n", "bytes", "eager_us", "eager_sync_us", "graph_us");
  }
  for (size_t at = 0; at < g_bytes.size();) {
    size_t comma = g_bytes.find(',', at);
    if (comma == std::string::npos) comma = g_bytes.size();
    const uint64_t bytes = std::strtoull(g_bytes.substr(at, comma - at).c_str(), nullptr, 10);
    at = comma + 1;
    const uint64_t count = bytes / 4;
    if (count == 0) continue;
    {
      DevBuf in(comm, count * 4, g_zero_copy), out(comm, count * 4, g_zero_copy);
      std::vector<uint8_t> h;
      FillHost(kTypes[0], ReduceOp::kSum, g_rank, 7, &h, count);
      Upload(in.p, h);
      PoisonDevice(out.p, count * 4);
      NCCL_OK(ncclAllReduce(in.p, out.p, count, ncclFloat32, ncclSum, comm, s));
      CUDA_OK(cudaStreamSynchronize(s));
      Expect(ex::CountWrongAllReduce(DataType::kFloat32, ReduceOp::kSum, g_world, 7, Download(out.p, count * 4).data(),
                                     count),
             "bench all-reduce of " + std::to_string(bytes) + " bytes");
      const double eager = TimeOps(comm, s, in.p, out.p, count, 20, 0, false, scratch);
      const double eager_sync = TimeOps(comm, s, in.p, out.p, count, 20, 0, true, scratch);
      const double graph = TimeOps(comm, s, in.p, out.p, count, 20, 20, false, scratch);
      if (g_rank == 0) {
        std::printf("%12llu %10.2f %12.2f %10.2f\n", static_cast<unsigned long long>(bytes), eager * 1e6,
                    eager_sync * 1e6, graph * 1e6);
        std::fflush(stdout);
      }
    }
  }
  CUDA_OK(cudaFree(scratch));
  NCCL_OK(ncclCommDestroy(comm));
  cudaStreamDestroy(s);
}

}  // namespace

// A crash prints where it was (the graph mode's one rank died of SIGSEGV on
// the H100 with nothing else to go on): frames as object+offset, for
// addr2line against the same build's unstripped objects.
void OnFatalSignal(int sig) {
  void* frames[64];
  const int n = backtrace(frames, 64);
  const char msg[] = "nccl_check: fatal signal, backtrace:\n";
  if (write(2, msg, sizeof(msg) - 1) < 0) _exit(128 + sig);
  backtrace_symbols_fd(frames, n, 2);
  signal(sig, SIG_DFL);
  raise(sig);
}

int main(int argc, char** argv) {
  signal(SIGSEGV, OnFatalSignal);
  signal(SIGBUS, OnFatalSignal);
  signal(SIGABRT, OnFatalSignal);
  std::string mode;
  int watchdog_s = 0;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string k = argv[i], v = argv[i + 1];
    if (k == "--mode") mode = v;
    else if (k == "--dir") g_dir = v;
    else if (k == "--rank") g_rank = std::atoi(v.c_str());
    else if (k == "--world") g_world = std::atoi(v.c_str());
    else if (k == "--max-bytes") g_max_bytes = std::strtoull(v.c_str(), nullptr, 10);
    else if (k == "--bytes") g_bytes = v;
    else if (k == "--zero-copy") g_zero_copy = std::atoi(v.c_str()) != 0;
    else if (k == "--watchdog-s") watchdog_s = std::atoi(v.c_str());
    else Die("unknown flag " + k);
  }
  if (const char* r = std::getenv("OMPI_COMM_WORLD_RANK")) g_rank = std::atoi(r);
  if (const char* n = std::getenv("OMPI_COMM_WORLD_SIZE")) g_world = std::atoi(n);
  if (g_dir.empty() || mode.empty()) Die("usage: nccl_check --mode MODE --dir DIR [--rank R --world N]");
  if (watchdog_s > 0) {
    std::thread([watchdog_s] {
      std::this_thread::sleep_for(std::chrono::seconds(watchdog_s));
      std::fprintf(stderr, "FAIL rank %d: watchdog: still in \"%s\" after %d s\n", g_rank, g_step.load(),
                   watchdog_s);
      std::fflush(stderr);
      std::_Exit(4);
    }).detach();
  }
  CUDA_OK(cudaSetDevice(0));
  const auto start = std::chrono::steady_clock::now();
  if (mode == "ops") ModeOps();
  else if (mode == "graph") ModeGraph();
  else if (mode == "split") ModeSplit();
  else if (mode == "nonblocking") ModeNonblocking();
  else if (mode == "abort") ModeAbort();
  else if (mode == "kill") ModeKill();
  else if (mode == "initall") ModeInitAll();
  else if (mode == "bench") ModeBench();
  else Die("unknown mode " + mode);
  std::printf("PASS rank %d of %d: mode %s, %llu checks, %.0f ms\n", g_rank, g_world, mode.c_str(),
              static_cast<unsigned long long>(g_checks), Ms(start));
  return 0;
}
