// GPU collectives for ranks that can address each other's buffers (one GPU
// shared by several ranks, or peers over NVLink): the data kernels. Each runs
// its data movement inside the op protocol's envelope (ring/op_ring_device.cuh:
// start barrier with the device-side matcher, data, end barrier, completion);
// posting, completing and waiting are ring/op_ring_gpu.h. Host-callable
// launchers; every launch goes on the caller's stream and captures into CUDA
// graphs. No rank returns while a peer may still read its input or write its
// output.
#ifndef COLLECTIVED_KERNELS_DEVICE_DEVICE_COLLECTIVES_H_
#define COLLECTIVED_KERNELS_DEVICE_DEVICE_COLLECTIVES_H_

#include <cstdint>

#include "collectived/status.h"
#include "collectived/types.h"
#include "base/gpu/gpu_runtime.h"
#include "ring/gpu_control_layout.h"
#include "ring/op_ring_gpu.h"

namespace collectived::device {

// The protocol's limits and words (ring/gpu_control_layout.h), by the names
// the kernels' callers use.
using ring::DeviceError;
using ring::kDeviceAborted;
using ring::kDeviceDeadline;
using ring::kDeviceMismatch;
using ring::kDeviceOk;
using ring::kDescriptorWords;
using ring::kFlagWords;
using ring::kMaxBlocks;
using ring::kMaxDeviceRanks;
using ring::kTraceDepth;
using ring::kTraceEntryWords;

// Blocks per SM that ranks sharing a GPU may launch together: every block of
// every rank must be resident at once, since they spin on each other. One per
// SM is the tested setting. Two per SM measured +9 points of the copy ceiling
// at 1 GiB (docs/results-history.md), but with the ranks filling every slot the GPU
// tests hit their deadline: not every block was resident. Until the real
// residency is queried (cudaOccupancyMaxActiveBlocksPerMultiprocessor) and
// some slack kept, the default stays 1.
constexpr uint32_t kResidentBlocksPerSm = 1;

enum class DeviceAlgorithm : uint32_t {
  kOneShot = 1,      // every rank reads every input, writes its own output
  kTwoShotPush = 2,  // rank r reduces chunk r of every input, writes it to every output
};

// What one rank's kernel needs: the protocol words (ring::DeviceOpArgs) and
// the buffers. Plain data, passed by value to the kernel.
struct DeviceRankArgs : ring::DeviceOpArgs {
  uint64_t count = 0;  // elements of each rank's input
  const void* inputs[kMaxDeviceRanks] = {};
  void* outputs[kMaxDeviceRanks] = {};
  // Only outputs[rank] is written (one-shot all-reduce, pull all-gather), so
  // peers' outputs may be null: they live in other processes, unmapped here.
  bool own_output_only = false;
  // Debug hook: this rank waits this long after the start barrier before
  // reading peers (a slow reader, so a race window is really open).
  uint64_t debug_read_delay_ns = 0;
};

// Loads every kernel of this file now. With lazy module loading (the CUDA
// default) the first launch of a kernel loads it, and that can block the host
// until running kernels finish: a rank spinning in a barrier for a peer that
// the blocked host has not launched yet never finishes (seen on the H200:
// the first op of a process hit its deadline). Call once per device before
// the first collective.
Status PreloadKernels();

// Whether the op launchers launch on the current device as programmatic
// dependent launches: the device has compute capability 9.0 or later and the
// kernels' code holds their wait for the grid before them (built for
// sm_90 or later). Such a launch lets the op's blocks be placed while the
// kernel before it on the stream ends; the op reads nothing before that
// kernel has completed and its writes are visible. Asked once per device;
// the environment's COLLECTIVED_PROGRAMMATIC_LAUNCH=0 makes it false.
bool ProgrammaticLaunches();

// In place (inputs[k] == outputs[k]) always runs two-shot push: one-shot
// would overwrite an input a peer is still reading. INVALID_ARGUMENT for
// buffers that partially overlap.
Status LaunchAllReduce(DataType dtype, ReduceOp op, DeviceAlgorithm algo, const DeviceRankArgs& args, uint32_t blocks,
                       gpuStream_t stream);
enum class GatherAlgorithm : uint32_t {
  kPush = 1,  // outputs[k][rank * count + j] = inputs[rank][j] for every k
  kPull = 2,  // outputs[rank][k * count + j] = inputs[k][j] for every k (own output only)
};
Status LaunchAllGather(DataType dtype, const DeviceRankArgs& args, uint32_t blocks, gpuStream_t stream,
                       GatherAlgorithm algo = GatherAlgorithm::kPush);
// The launchers' argument checks alone (nothing is launched): callers that
// enqueue other work before the kernel (a post that takes an op index) check
// first, so a refused op leaves no trace on the stream.
Status ValidateAllReduce(DataType dtype, ReduceOp op, DeviceAlgorithm algo, const DeviceRankArgs& args,
                         uint32_t blocks);
Status ValidateAllGather(DataType dtype, const DeviceRankArgs& args, uint32_t blocks, GatherAlgorithm algo);
// Type and placement checks of a fused (or copy-engine) all-gather / all-reduce.
Status ValidateFusedAllGather(DataType dtype, const DeviceRankArgs& args);
Status ValidateFusedAllReduce(DataType dtype, ReduceOp op, const DeviceRankArgs& args);

// A kernel that only waits `ns` on the device: the race windows of tests and
// debug hooks (a delayed rank, a delayed epilogue).
Status LaunchDelay(uint64_t ns, gpuStream_t stream);

// Fused all-reduce for ranks that share one device and one launcher (the
// daemon): a single kernel reads each input once and writes each output once.
Status LaunchFusedAllReduce(DataType dtype, ReduceOp op, const DeviceRankArgs& args, uint32_t blocks,
                            gpuStream_t stream);
// Fused all-gather for ranks served by one launcher: outputs[j][k * count + i]
// = inputs[k][i] for every j, k (each input read once, each output written once).
Status LaunchFusedAllGather(DataType dtype, const DeviceRankArgs& args, uint32_t blocks, gpuStream_t stream);

}  // namespace collectived::device

#endif  // COLLECTIVED_KERNELS_DEVICE_DEVICE_COLLECTIVES_H_
