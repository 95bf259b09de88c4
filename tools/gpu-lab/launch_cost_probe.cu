// Issue 19's eager target: what each runtime call of an eager op's host path
// costs, per call, in one process or in several at once under MPS (the
// eager rows of collective-bench -H 1 spend about the whole op's time
// enqueueing at 8 processes). Each call is timed over ITERS calls; a kernel
// whose argument is as large as DeviceRankArgs spins SPIN_NS on the GPU, so
// the launch queue fills as an eager bench's does. One line per call:
// mean microseconds per call.
//   nvcc -O2 -arch=sm_90 -o launch_cost_probe launch_cost_probe.cu
//   ./launch_cost_probe [SPIN_NS] [ITERS]          (run N at once for N processes)
#include <cuda_runtime.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <unistd.h>

struct BigArgs {  // about DeviceRankArgs' size: 16 inputs, 16 outputs, words
  const void* in[16];
  void* out[16];
  uint64_t words[24];
};

__global__ void Spin(BigArgs a, uint64_t ns) {
  uint64_t t0, t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t0));
  do {
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  } while (t - t0 < ns);
  if (a.words[0] == 12345) a.out[0] = nullptr;  // keeps the argument live
}

#include "probe_check.h"

template <typename F>
double PerCallUs(int iters, F f) {
  const auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < iters; ++i) f(i);
  return std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count() / iters;
}

int main(int argc, char** argv) {
  const uint64_t spin_ns = argc > 1 ? std::strtoull(argv[1], nullptr, 0) : 0;
  const int iters = argc > 2 ? std::atoi(argv[2]) : 2000;
  cudaStream_t s;
  CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  BigArgs a{};
  void* buf = nullptr;
  CK(cudaMalloc(&buf, 1 << 20));
  cudaEvent_t ev[64];
  for (auto& event : ev) CK(cudaEventCreateWithFlags(&event, cudaEventDisableTiming));
  Spin<<<1, 32, 0, s>>>(a, 0);
  CK(cudaStreamSynchronize(s));
  const pid_t pid = getpid();
  auto line = [&](const char* what, double us) {
    std::printf("pid %d spin %llu ns: %-44s %8.2f us/call\n", static_cast<int>(pid),
                static_cast<unsigned long long>(spin_ns), what, us);
  };
  cudaStreamCaptureStatus cap;
  line("cudaStreamIsCapturing", PerCallUs(iters, [&](int) { cudaStreamIsCapturing(s, &cap); }));
  cudaPointerAttributes attr;
  line("cudaPointerGetAttributes", PerCallUs(iters, [&](int) { cudaPointerGetAttributes(&attr, buf); }));
  line("cudaEventCreate + cudaEventDestroy", PerCallUs(iters, [&](int) {
         cudaEvent_t e;
         cudaEventCreateWithFlags(&e, cudaEventDisableTiming);
         cudaEventDestroy(e);
       }));
  line("cudaEventQuery (fired)", PerCallUs(iters, [&](int i) { cudaEventQuery(ev[i % 64]); }));
  line("cudaEventRecord", PerCallUs(iters, [&](int i) { cudaEventRecord(ev[i % 64], s); }));
  CK(cudaStreamSynchronize(s));
  line("cudaStreamWaitEvent (same stream's event)", PerCallUs(iters, [&](int i) { cudaStreamWaitEvent(s, ev[i % 64], 0); }));
  CK(cudaStreamSynchronize(s));
  line("launch (kernel spins SPIN_NS)", PerCallUs(iters, [&](int) { Spin<<<1, 32, 0, s>>>(a, spin_ns); }));
  CK(cudaStreamSynchronize(s));
  line("wait + launch + record (an eager op's calls)", PerCallUs(iters, [&](int i) {
         cudaStreamWaitEvent(s, ev[(i + 63) % 64], 0);
         Spin<<<1, 32, 0, s>>>(a, spin_ns);
         cudaEventRecord(ev[i % 64], s);
       }));
  CK(cudaStreamSynchronize(s));
  CK(cudaGetLastError());
  return 0;
}
