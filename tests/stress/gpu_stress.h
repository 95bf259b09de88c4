// collective-stress on GPU communicators (--gpu 1): the same seeded mix on the
// ranks' CUDA streams, over heap (zero-copy) and cudaMalloc (staged) buffers,
// eager and graph-replayed; every result read from a second and a third
// stream after Handle::WaitOn, checked exactly, and the input overwritten on
// the op's stream right after it. Client-executed ops also count the end
// barrier's race window from the device trace (Communicator::GetOpTrace);
// the epilogue and staging windows are not timed on the GPU.
#ifndef COLLECTIVED_TESTS_STRESS_GPU_STRESS_H_
#define COLLECTIVED_TESTS_STRESS_GPU_STRESS_H_

#include <cstdint>
#include <string>

#include "collectived/client.h"

namespace collectived::stress {

struct GpuTotals {
  uint64_t passed = 0, failed = 0, wrong = 0, graph_ops = 0, staged_ops = 0;
  uint64_t windows = 0;  // ops whose end-barrier window the device trace shows open
};

struct GpuStressOptions {
  ExecutionMode mode = ExecutionMode::kClient;
  std::string key;
  int rank = 0, world = 1;
  double seconds = 10;
  int max_ops = 0;
  uint64_t seed = 1;
  uint64_t max_count = 4096;
  int window = 8;
  int skew_us = 500;
  // Prints "rank R: joined" once the communicator is formed (tests/soak/soak.py
  // times its mid-op kills from it).
  bool say_joined = false;
};

// `keep_going` is asked every 16 ops with the same answer on every rank.
GpuTotals RunGpuStress(Client& client, const GpuStressOptions& o, bool (*keep_going)(double seconds_left));

}  // namespace collectived::stress

#endif  // COLLECTIVED_TESTS_STRESS_GPU_STRESS_H_
