// Stands in for the GPU communicator's CUDA sources (gpu_communicator.cc and
// the parts it uses) when the library is built without the CUDA toolkit:
// GPU communicators are refused with a clear reason.
#include "client/src/gpu_communicator.h"
#include "client/src/gpu_queue_lease.h"

#include "collectived/client.h"

namespace collectived {

namespace {
Status NoCuda() { return Status::FailedPrecondition("this collectived client library was built without CUDA"); }
}  // namespace

struct GpuOpState {};
Status GpuOpWait(const GpuOpState&, int64_t) { return NoCuda(); }
bool GpuOpTest(const GpuOpState&, Status* status) {
  if (status) *status = NoCuda();
  return true;
}
Status GpuOpWaitOn(const GpuOpState&, void*) { return NoCuda(); }
Status GpuDeviceUuid(int, std::string*) { return NoCuda(); }
Status WarmGpuDevice(int) { return NoCuda(); }
Status LeaseGpuRankQueue(int, const std::string&, std::shared_ptr<void>*) { return NoCuda(); }

class GpuRankEngine {};
class DaemonPoster {};
GpuCommunicator::GpuCommunicator(std::unique_ptr<GpuRankEngine> engine, std::unique_ptr<DaemonPoster> daemon)
    : engine_(std::move(engine)), daemon_(std::move(daemon)) {}
GpuCommunicator::~GpuCommunicator() = default;
Status GpuCommunicator::Create(GpuCommSetup, const FetchFd&, std::unique_ptr<GpuCommunicator>*) { return NoCuda(); }
Status GpuCommunicator::AllocBuffer(uint64_t, GpuHeapBuffer*) { return NoCuda(); }
Status GpuCommunicator::RegisterBuffer(void*, uint64_t, GpuHeapBuffer*) { return NoCuda(); }
Status GpuCommunicator::AllReduce(const void*, void*, uint64_t, DataType, ReduceOp, void*,
                                  std::shared_ptr<GpuOpState>*) {
  return NoCuda();
}
Status GpuCommunicator::AllGather(const void*, void*, uint64_t, DataType, void*, std::shared_ptr<GpuOpState>*) {
  return NoCuda();
}
Status GpuCommunicator::Quiesce(int64_t) { return Status::Ok(); }
bool GpuCommunicator::ZeroCopy(const void*, uint64_t) const { return false; }
Status GpuCommunicator::LastOpError() const { return Status::Ok(); }
Status GpuCommunicator::RaiseAbort() { return NoCuda(); }
void GpuCommunicator::ReleaseQueueLease() {}
Status GpuCommunicator::ReadTrace(uint64_t, std::vector<OpTrace>*) const { return NoCuda(); }

}  // namespace collectived
