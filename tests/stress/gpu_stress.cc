#include "tests/stress/gpu_stress.h"

#include <cuda_runtime.h>

#include <chrono>
#include <cstdio>
#include <deque>
#include <random>
#include <thread>
#include <vector>

#include "tests/support/exact_data.h"
#include "tests/support/op_mix.h"

namespace collectived::stress {
namespace {

bool Ok(cudaError_t e, const char* what, int rank) {
  if (e == cudaSuccess) return true;
  std::fprintf(stderr, "rank %d: %s: %s\n", rank, what, cudaGetErrorString(e));
  return false;
}

struct Slot {  // one op's buffers: heap (zero-copy) and cudaMalloc (staged)
  Buffer heap_send, heap_recv;
  void* dev_send = nullptr;
  void* dev_recv = nullptr;
  void* host_a = nullptr;  // pinned: the result as the second stream read it
  void* host_b = nullptr;  // and as the third stream read it
  void* host_out = nullptr;  // pinned: poisoned output (and the in-place input) to upload
  void* host_in = nullptr;   // pinned: the input to upload
};

struct InFlight {
  testing::MixedOp mix;
  int slot = 0;
  bool zero_copy = false;
  bool graph = false;
  Handle handle;
  cudaEvent_t after = nullptr;  // graph ops: recorded after the replay
  uint64_t index = 0;           // the rank's op index: one op per k, eager or replayed once
};

}  // namespace

GpuTotals RunGpuStress(Client& client, const GpuStressOptions& o, bool (*keep_going)(double)) {
  GpuTotals t;
  int ndev = 0;
  cudaGetDeviceCount(&ndev);
  const int device = ndev > 0 ? o.rank % ndev : 0;
  cudaSetDevice(device);
  const uint64_t in_max = o.max_count * 8, out_max = in_max * o.world;
  CommunicatorOptions copts;
  copts.key = o.key;
  copts.world_size = o.world;
  copts.rank = o.rank;
  copts.mode = o.mode;
  copts.device = device;
  copts.gpu_heap_bytes = (in_max + out_max + 4096) * o.window;
  copts.gpu_op_trace = true;  // race windows are proved from the trace
  std::unique_ptr<Communicator> comm;
  Status s = client.CreateCommunicator(copts, &comm);
  if (!s.ok()) {
    std::fprintf(stderr, "rank %d: create GPU communicator: %s\n", o.rank, s.ToString().c_str());
    t.failed = 1;
    return t;
  }
  if (o.say_joined) {
    std::printf("rank %d: joined\n", o.rank);
    std::fflush(stdout);
  }
  if (o.max_count * 8 > comm->max_message_bytes()) {
    std::fprintf(stderr, "rank %d: --max-count above the daemon's slots; staged ops would be refused\n", o.rank);
    t.failed = 1;
    return t;
  }
  cudaStream_t stream, second, third;
  cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking);
  cudaStreamCreateWithFlags(&second, cudaStreamNonBlocking);
  cudaStreamCreateWithFlags(&third, cudaStreamNonBlocking);
  std::vector<Slot> slots(o.window);
  for (Slot& sl : slots) {
    bool ok = comm->AllocBuffer(in_max, &sl.heap_send).ok() && comm->AllocBuffer(out_max, &sl.heap_recv).ok() &&
              Ok(cudaMalloc(&sl.dev_send, in_max), "malloc", o.rank) &&
              Ok(cudaMalloc(&sl.dev_recv, out_max), "malloc", o.rank) &&
              Ok(cudaMallocHost(&sl.host_a, out_max), "host alloc", o.rank) &&
              Ok(cudaMallocHost(&sl.host_b, out_max), "host alloc", o.rank) &&
              Ok(cudaMallocHost(&sl.host_out, out_max), "host alloc", o.rank) &&
              Ok(cudaMallocHost(&sl.host_in, in_max), "host alloc", o.rank);
    if (!ok) {
      t.failed = 1;
      return t;
    }
  }
  std::mt19937_64 rng(o.seed);  // same on every rank: same ops, same buffer kinds
  std::mt19937_64 skew(o.seed * 31 + o.rank);
  std::deque<InFlight> inflight;
  const bool daemon = o.mode == ExecutionMode::kDaemon;

  auto finish = [&](InFlight& f) {
    Slot& sl = slots[f.slot];
    Status st = f.graph ? Status::Ok() : f.handle.Wait();
    bool ok = Ok(cudaStreamSynchronize(second), "second stream", o.rank) &&
              Ok(cudaStreamSynchronize(third), "third stream", o.rank);
    if (f.graph) ok = ok && Ok(cudaStreamSynchronize(stream), "graph stream", o.rank);
    // A replayed op has no verdict of its own: once the communicator is
    // aborted (a peer was killed) its outputs are not results, and it counts
    // as failed, not wrong (the GPU soak counted them wrong, 2026-12-05).
    if (f.graph && ok) st = comm->AsyncError();
    uint64_t wrong = 0;
    if (st.ok() && ok) {
      for (void* host : {sl.host_a, sl.host_b}) {
        wrong += f.mix.gather ? testing::CountWrongAllGather(f.mix.dtype, o.world, f.mix.seed, host, f.mix.count)
                              : testing::CountWrongAllReduce(f.mix.dtype, f.mix.op, o.world, f.mix.seed, host,
                                                             f.mix.count);
      }
    } else if (t.failed < 3) {
      std::fprintf(stderr, "rank %d: GPU op failed: %s\n", o.rank, st.ToString().c_str());
    }
    if (!st.ok() || !ok || wrong != 0) {
      t.failed++;
      t.wrong += wrong;
    } else {
      t.passed++;
    }
    // The end barrier's window, from the device trace (client-executed): this
    // rank completed while a peer had not finished reading (its reads ended
    // later, or had not ended when this rank looked, after its completion).
    // Only ops that ran to the end: an eager op's verdict says so; a graph op
    // has none, so only an exact one counts (a failed op's blocks may never
    // reach the trace).
    if (!daemon && st.ok() && ok && (!f.graph || wrong == 0)) {
      std::vector<OpTrace> trace;
      if (comm->GetOpTrace(f.index, &trace).ok() && trace[o.rank].valid) {
        const int64_t mine = trace[o.rank].completed_ns;
        for (int p = 0; p < o.world; ++p) {
          if (p != o.rank && trace[p].posted && (trace[p].reads_done_ns == 0 || trace[p].reads_done_ns > mine)) {
            t.windows++;
            break;
          }
        }
      }
    }
    if (!f.graph && !f.handle.Wait().ok() && st.ok()) t.failed++;  // and again later
    if (f.after) cudaEventDestroy(f.after);
  };

  const auto start = std::chrono::steady_clock::now();
  for (int k = 0;; ++k) {
    if (o.max_ops > 0) {
      if (k >= o.max_ops) break;
    } else if (k % 16 == 0) {
      const double left = o.seconds - std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      if (!keep_going(left)) break;
    }
    InFlight f;
    f.index = static_cast<uint64_t>(k);
    f.mix = testing::NextMixedOp(rng, o.max_count, o.seed, k);
    f.zero_copy = rng() % 2 == 0;
    f.graph = rng() % 8 == 0;
    if (daemon && f.mix.gather) f.zero_copy = true;  // the daemon gathers into heaps only
    f.slot = k % o.window;
    if (static_cast<int>(inflight.size()) == o.window) {
      finish(inflight.front());
      inflight.pop_front();
    }
    Slot& sl = slots[f.slot];
    void* send = f.zero_copy ? sl.heap_send.data() : sl.dev_send;
    void* recv = f.zero_copy ? sl.heap_recv.data() : sl.dev_recv;
    const size_t es = DataTypeSize(f.mix.dtype);
    const uint64_t out_count = (f.mix.gather ? o.world : 1) * f.mix.count;
    // Exact inputs and a poisoned output, uploaded on the op's stream from
    // pinned buffers (free: the slot's previous op has finished).
    uint8_t* out_host = static_cast<uint8_t*>(sl.host_out);
    testing::Poison(f.mix.dtype, out_host, out_count);
    void* input = send;
    if (f.mix.in_place) input = f.mix.gather ? static_cast<uint8_t*>(recv) + o.rank * f.mix.count * es : recv;
    bool ok = true;
    if (f.mix.in_place) {
      testing::FillInput(f.mix.dtype, f.mix.op, o.rank, f.mix.seed,
                         out_host + (f.mix.gather ? o.rank * f.mix.count * es : 0), f.mix.count);
      ok = Ok(cudaMemcpyAsync(recv, out_host, out_count * es, cudaMemcpyHostToDevice, stream), "upload", o.rank);
    } else {
      testing::FillInput(f.mix.dtype, f.mix.op, o.rank, f.mix.seed, sl.host_in, f.mix.count);
      ok = Ok(cudaMemcpyAsync(recv, out_host, out_count * es, cudaMemcpyHostToDevice, stream), "poison", o.rank) &&
           Ok(cudaMemcpyAsync(send, sl.host_in, f.mix.count * es, cudaMemcpyHostToDevice, stream), "upload", o.rank);
    }
    if (!ok) {
      t.failed++;
      break;
    }
    if (o.skew_us > 0 && skew() % 8 == 0) std::this_thread::sleep_for(std::chrono::microseconds(skew() % o.skew_us));
    auto post = [&](Handle* h) {
      return f.mix.gather ? comm->AllGather(input, recv, f.mix.count, f.mix.dtype, stream, h)
                          : comm->AllReduce(input, recv, f.mix.count, f.mix.dtype, f.mix.op, stream, h);
    };
    if (f.graph) {
      // Captured and replayed once: the index is taken at replay, on the device.
      cudaGraph_t graph;
      cudaGraphExec_t exec;
      s = Status::Ok();
      if (!Ok(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal), "capture", o.rank)) break;
      s = post(&f.handle);
      if (!Ok(cudaStreamEndCapture(stream, &graph), "end capture", o.rank) || !s.ok()) break;
      ok = Ok(cudaGraphInstantiate(&exec, graph, 0), "instantiate", o.rank) &&
           Ok(cudaGraphLaunch(exec, stream), "replay", o.rank);
      cudaEventCreateWithFlags(&f.after, cudaEventDisableTiming);
      ok = ok && Ok(cudaEventRecord(f.after, stream), "record", o.rank) &&
           Ok(cudaStreamWaitEvent(second, f.after, 0), "wait", o.rank) &&
           Ok(cudaStreamWaitEvent(third, f.after, 0), "wait", o.rank);
      cudaGraphExecDestroy(exec);  // safe: the launch keeps what it needs
      cudaGraphDestroy(graph);
      t.graph_ops++;
    } else {
      s = post(&f.handle);
      ok = s.ok() && f.handle.WaitOn(second).ok() && f.handle.WaitOn(third).ok();
    }
    if (!s.ok() || !ok) {
      std::fprintf(stderr, "rank %d: post failed: %s\n", o.rank, s.ToString().c_str());
      t.failed++;
      break;
    }
    t.staged_ops += f.zero_copy ? 0 : 1;
    // The second and third streams read the result after their waits; then
    // the op's stream overwrites the input at once (anyone still reading it
    // would see 0x5A).
    const uint64_t out_bytes = out_count * es;
    const void* result = recv;
    ok = Ok(cudaMemcpyAsync(sl.host_a, result, out_bytes, cudaMemcpyDeviceToHost, second), "read", o.rank) &&
         Ok(cudaMemcpyAsync(sl.host_b, result, out_bytes, cudaMemcpyDeviceToHost, third), "read", o.rank) &&
         (f.mix.in_place || Ok(cudaMemsetAsync(send, 0x5A, f.mix.count * es, stream), "overwrite", o.rank));
    if (!ok) {
      t.failed++;
      break;
    }
    inflight.push_back(std::move(f));
  }
  while (!inflight.empty()) {
    finish(inflight.front());
    inflight.pop_front();
  }
  s = comm->Destroy();
  if (!s.ok() && s.code() != StatusCode::kAborted) t.failed++;
  for (Slot& sl : slots) {
    cudaFree(sl.dev_send);
    cudaFree(sl.dev_recv);
    cudaFreeHost(sl.host_a);
    cudaFreeHost(sl.host_b);
    cudaFreeHost(sl.host_out);
    cudaFreeHost(sl.host_in);
  }
  cudaStreamDestroy(stream);
  cudaStreamDestroy(second);
  cudaStreamDestroy(third);
  return t;
}

}  // namespace collectived::stress
