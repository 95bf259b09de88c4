#include "nccl/src/stream_temp.h"

#include <mutex>
#include <string>
#include <utility>
#include <vector>

namespace collectived::nccl {

namespace {

// Memory whose graph is gone. A user object's destructor may make no CUDA
// call, so it only lists the pointer; the next graph-owned allocation frees
// it on a stream of its device.
struct Released {
  std::mutex mu;
  std::vector<std::pair<int, void*>> list;  // device, pointer
};

Released& Graveyard() {
  static Released* r = new Released;  // never destroyed: destructors may run at exit
  return *r;
}

struct Owned {
  int device;
  void* p;
};

void ReleaseOwned(void* arg) {
  auto* o = static_cast<Owned*>(arg);
  {
    std::lock_guard<std::mutex> lock(Graveyard().mu);
    Graveyard().list.emplace_back(o->device, o->p);
  }
  delete o;
}

// One private non-blocking stream per device for these allocations: not
// captured, and waiting for it waits for nothing of the program's.
cudaStream_t SideStream(int device) {
  static std::mutex mu;
  static std::vector<cudaStream_t>* streams = new std::vector<cudaStream_t>;
  std::lock_guard<std::mutex> lock(mu);
  if (streams->size() <= static_cast<size_t>(device)) streams->resize(device + 1, nullptr);
  cudaStream_t& s = (*streams)[device];
  if (s == nullptr && cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking) != cudaSuccess) {
    cudaGetLastError();
    s = nullptr;
  }
  return s;
}

// Allocates `bytes` on `device` now, outside the capture, and ties its life
// to `graph`. The caller has made `device` current.
Status GraphOwnedAlloc(cudaGraph_t graph, int device, uint64_t bytes, void** p) {
  cudaStream_t side = SideStream(device);
  if (side == nullptr) return Status::Internal("cudaStreamCreate: no stream for graph-owned scratch memory");
  std::vector<std::pair<int, void*>> dead;
  {
    std::lock_guard<std::mutex> lock(Graveyard().mu);
    dead.swap(Graveyard().list);
  }
  // This thread's capture may be in global mode, which forbids the calls
  // below; they touch nothing the capture records.
  cudaStreamCaptureMode mode = cudaStreamCaptureModeRelaxed;
  COLLECTIVED_RETURN_IF_ERROR(Cuda(cudaThreadExchangeStreamCaptureMode(&mode), "cudaThreadExchangeStreamCaptureMode"));
  Status st = [&]() -> Status {
    for (const auto& [d, q] : dead) {
      cudaStream_t ds = d == device ? side : SideStream(d);
      if (ds != nullptr) cudaFreeAsync(q, ds);
    }
    COLLECTIVED_RETURN_IF_ERROR(Cuda(cudaMallocAsync(p, bytes, side), "cudaMallocAsync"));
    return Cuda(cudaStreamSynchronize(side), "cudaStreamSynchronize");
  }();
  cudaThreadExchangeStreamCaptureMode(&mode);
  COLLECTIVED_RETURN_IF_ERROR(st);
  auto* owned = new Owned{device, *p};
  cudaUserObject_t obj = nullptr;
  st = Cuda(cudaUserObjectCreate(&obj, owned, ReleaseOwned, 1, cudaUserObjectNoDestructorSync), "cudaUserObjectCreate");
  if (!st.ok()) {
    delete owned;
    cudaFreeAsync(*p, side);
    *p = nullptr;
    return st;
  }
  // The graph takes the only reference: the memory lives as long as the
  // graph and every graph instantiated from it.
  st = Cuda(cudaGraphRetainUserObject(graph, obj, 1, cudaGraphUserObjectMove), "cudaGraphRetainUserObject");
  if (!st.ok()) {
    cudaUserObjectRelease(obj, 1);  // runs ReleaseOwned: freed by a later call
    *p = nullptr;
  }
  return st;
}

}  // namespace

Status Cuda(cudaError_t e, const char* call) {
  if (e == cudaSuccess) return Status::Ok();
  cudaGetLastError();  // not sticky: clear it
  const StatusCode code = e == cudaErrorMemoryAllocation ? StatusCode::kResourceExhausted : StatusCode::kInternal;
  return Status(code, std::string(call) + ": " + cudaGetErrorString(e));
}

StreamTemp::~StreamTemp() {
  if (p_ != nullptr && !graph_owned_) cudaFreeAsync(p_, s_);
}

Status StreamTemp::Alloc(uint64_t bytes) {
  cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
  cudaGraph_t graph = nullptr;
  COLLECTIVED_RETURN_IF_ERROR(Cuda(cudaStreamGetCaptureInfo(s_, &capture, nullptr, &graph), "cudaStreamGetCaptureInfo"));
  if (capture == cudaStreamCaptureStatusActive) {
    graph_owned_ = true;
    // The side stream and the pool must be the stream's device's.
    int current = 0;
    COLLECTIVED_RETURN_IF_ERROR(Cuda(cudaGetDevice(&current), "cudaGetDevice"));
    if (current != device_) COLLECTIVED_RETURN_IF_ERROR(Cuda(cudaSetDevice(device_), "cudaSetDevice"));
    Status st = GraphOwnedAlloc(graph, device_, bytes, &p_);
    if (current != device_) cudaSetDevice(current);
    return st;
  }
  return Cuda(cudaMallocAsync(&p_, bytes, s_), "cudaMallocAsync");
}

}  // namespace collectived::nccl
