// Scratch device memory for one NCCL call's composition (padding, pieces),
// ordered on the caller's stream.
#ifndef COLLECTIVED_NCCL_SRC_STREAM_TEMP_H_
#define COLLECTIVED_NCCL_SRC_STREAM_TEMP_H_

#include <cuda_runtime_api.h>

#include <cstdint>

#include "collectived/status.h"

namespace collectived::nccl {

// A CUDA error as a Status naming the call; clears the (non-sticky) error.
Status Cuda(cudaError_t e, const char* call);

// Outside capture: cudaMallocAsync on the stream, freed on it when the
// StreamTemp goes. Under capture, a graph's own allocation would have no
// pointer attributes until the graph is launched, and the client refuses it
// as not device memory; so the memory is allocated now (real pool memory)
// and owned by the graph being captured: freed after the graph is destroyed.
// Contract: Alloc once; get() is valid on the stream (or in the graph) until
// the work enqueued after it has run.
class StreamTemp {
 public:
  // `device`: the stream's (the communicator's), which need not be the
  // thread's current one (ops of several communicators in one group).
  StreamTemp(cudaStream_t s, int device) : s_(s), device_(device) {}
  ~StreamTemp();
  StreamTemp(const StreamTemp&) = delete;
  StreamTemp& operator=(const StreamTemp&) = delete;

  Status Alloc(uint64_t bytes);
  uint8_t* get() const { return static_cast<uint8_t*>(p_); }

 private:
  cudaStream_t s_;
  int device_;
  void* p_ = nullptr;
  bool graph_owned_ = false;
};

}  // namespace collectived::nccl

#endif  // COLLECTIVED_NCCL_SRC_STREAM_TEMP_H_
