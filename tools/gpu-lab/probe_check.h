// The lab's CUDA probes (tools/gpu-lab/*.cu): CK(call) exits with the file,
// line, call and CUDA's message where a runtime call fails. Each probe is
// one file built with nvcc beside this header.
#ifndef COLLECTIVED_TOOLS_GPU_LAB_PROBE_CHECK_H_
#define COLLECTIVED_TOOLS_GPU_LAB_PROBE_CHECK_H_

#include <cuda_runtime.h>

#include <cstdio>
#include <cstdlib>

#define CK(x)                                                                                   \
  do {                                                                                          \
    cudaError_t e_ = (x);                                                                       \
    if (e_ != cudaSuccess) {                                                                    \
      std::fprintf(stderr, "%s:%d %s -> %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e_)); \
      std::exit(1);                                                                             \
    }                                                                                           \
  } while (0)

#endif  // COLLECTIVED_TOOLS_GPU_LAB_PROBE_CHECK_H_
