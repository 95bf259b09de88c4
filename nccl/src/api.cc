// The exported NCCL functions that collectived implements. Each checks its
// arguments (ncclInvalidArgument naming the field), records failures for
// ncclGetLastError, and forwards to a Comm (comm.h).
#include <cuda_runtime.h>

#include <algorithm>
#include <cstring>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <tuple>
#include <utility>
#include <vector>

#include "ipc/cumem_window.h"
#include "nccl.h"
#include "nccl/src/comm.h"
#include "nccl/src/last_error.h"
#include "nccl/src/type_map.h"
#include "nccl/src/unique_id.h"

using collectived::Status;
using collectived::nccl::Comm;
using collectived::nccl::CommParams;
using collectived::nccl::Fail;

// The opaque handle of nccl.h. The Comm is shared with a non-blocking
// init's thread, which may outlive an ncclCommAbort.
struct ncclComm {
  std::shared_ptr<Comm> impl;
};

namespace {

constexpr int kVersionCode = NCCL_VERSION_CODE;

// ncclGroupStart/End: calls in between are queued per thread and run at the
// end, communicators first (concurrently: each waits for its peers), then
// the ops in the order they were called.
struct Group {
  int depth = 0;
  std::vector<std::shared_ptr<Comm>> inits;
  std::vector<std::pair<const char*, std::function<Status()>>> ops;
};
thread_local Group t_group;

// Runs `op` on the communicator now, or at ncclGroupEnd inside a group
// (holding the communicator until then).
template <typename F>
ncclResult_t RunOrQueue(const char* call, const std::shared_ptr<Comm>& impl, F op) {
  if (t_group.depth > 0) {
    t_group.ops.emplace_back(call, [impl, op] { return op(*impl); });
    return ncclSuccess;
  }
  return Fail(call, op(*impl));
}

ncclResult_t CheckComm(const char* call, const ncclComm* comm) {
  if (comm == nullptr || !comm->impl) return Fail(call, ncclInvalidArgument, "comm is null");
  return ncclSuccess;
}

// Blocking: forms in place (inside a group: at ncclGroupEnd). Non-blocking:
// forms on a thread of its own and the call answers ncclInProgress.
ncclResult_t StartInit(const char* call, CommParams p, ncclComm_t* out) {
  auto impl = std::make_shared<Comm>(std::move(p));
  const bool blocking = impl->params().blocking;
  *out = new ncclComm{impl};
  if (t_group.depth > 0) {
    t_group.inits.push_back(impl);
    return ncclSuccess;
  }
  if (!blocking) {
    std::thread([impl] { impl->Init(); }).detach();
    return ncclInProgress;
  }
  impl->Init();
  Status s = impl->WaitReady();
  if (!s.ok()) {
    delete *out;
    *out = nullptr;
  }
  return Fail(call, s);
}

// The fields of `config` that lie within its declared size (later NCCL
// versions append fields; older callers pass a shorter struct).
ncclResult_t ReadConfig(const char* call, const ncclConfig_t* config, CommParams* p) {
  if (config == nullptr) return ncclSuccess;
  if (config->magic != NCCL_API_MAGIC) {
    return Fail(call, ncclInvalidArgument, "config: not initialized with NCCL_CONFIG_INITIALIZER (magic)");
  }
  const size_t size = config->size;
  auto has = [&](size_t offset, size_t bytes) { return size >= offset + bytes; };
  if (has(offsetof(ncclConfig_t, blocking), sizeof(int)) && config->blocking != NCCL_CONFIG_UNDEF_INT) {
    if (config->blocking != 0 && config->blocking != 1) {
      return Fail(call, ncclInvalidArgument, "config->blocking must be 0 or 1, not " + std::to_string(config->blocking));
    }
    p->blocking = config->blocking == 1;
  }
  if (has(offsetof(ncclConfig_t, commName), sizeof(const char*)) && config->commName != nullptr) {
    p->name.assign(config->commName, strnlen(config->commName, 64));
  }
  return ncclSuccess;
}

ncclResult_t InitRank(const char* call, ncclComm_t* comm, int nranks, const ncclUniqueId& id, int rank,
                      const ncclConfig_t* config) {
  if (comm == nullptr) return Fail(call, ncclInvalidArgument, "comm is null");
  *comm = nullptr;
  if (nranks < 1) return Fail(call, ncclInvalidArgument, "nranks " + std::to_string(nranks) + " is below 1");
  if (rank < 0 || rank >= nranks) {
    return Fail(call, ncclInvalidArgument,
                "rank " + std::to_string(rank) + " outside [0, " + std::to_string(nranks) + ")");
  }
  collectived::nccl::UniqueId uid;
  if (ncclResult_t r = Fail(call, collectived::nccl::DecodeUniqueId(id, &uid)); r != ncclSuccess) return r;
  CommParams p;
  p.key = "nccl-" + uid.key;
  p.socket = collectived::nccl::DaemonSocket(uid);
  p.world = nranks;
  p.rank = rank;
  if (ncclResult_t r = ReadConfig(call, config, &p); r != ncclSuccess) return r;
  if (cudaGetDevice(&p.device) != cudaSuccess) {
    return Fail(call, ncclUnhandledCudaError, std::string("cudaGetDevice: ") + cudaGetErrorString(cudaGetLastError()));
  }
  return StartInit(call, std::move(p), comm);
}

// ncclMemAlloc's allocations: exportable cuMem, so that a registration maps them in every peer.
std::mutex g_mem_mu;
std::map<void*, std::unique_ptr<collectived::ipc::CuMemWindow>> g_mem;

}  // namespace

extern "C" {

ncclResult_t ncclGetVersion(int* version) {
  if (version == nullptr) return Fail("ncclGetVersion", ncclInvalidArgument, "version is null");
  *version = kVersionCode;
  return ncclSuccess;
}

ncclResult_t ncclGetUniqueId(ncclUniqueId* uniqueId) {
  if (uniqueId == nullptr) return Fail("ncclGetUniqueId", ncclInvalidArgument, "uniqueId is null");
  collectived::nccl::UniqueId id;
  if (ncclResult_t r = Fail("ncclGetUniqueId", collectived::nccl::FreshKey(&id.key)); r != ncclSuccess) return r;
  id.socket = collectived::nccl::DaemonSocket({});
  return Fail("ncclGetUniqueId", collectived::nccl::EncodeUniqueId(id, uniqueId));
}

ncclResult_t ncclCommInitRankConfig(ncclComm_t* comm, int nranks, ncclUniqueId commId, int rank,
                                    ncclConfig_t* config) {
  return InitRank("ncclCommInitRankConfig", comm, nranks, commId, rank, config);
}

ncclResult_t ncclCommInitRank(ncclComm_t* comm, int nranks, ncclUniqueId commId, int rank) {
  return InitRank("ncclCommInitRank", comm, nranks, commId, rank, nullptr);
}

ncclResult_t ncclCommInitRankScalable(ncclComm_t* newcomm, int nranks, int myrank, int nId, ncclUniqueId* commIds,
                                      ncclConfig_t* config) {
  // Several ids only spread NCCL's own bootstrap; the daemon needs one key.
  if (nId < 1 || commIds == nullptr) {
    return Fail("ncclCommInitRankScalable", ncclInvalidArgument, "nId must be at least 1 with commIds set");
  }
  return InitRank("ncclCommInitRankScalable", newcomm, nranks, commIds[0], myrank, config);
}

ncclResult_t ncclCommInitAll(ncclComm_t* comms, int ndev, const int* devlist) {
  const char* call = "ncclCommInitAll";
  if (comms == nullptr) return Fail(call, ncclInvalidArgument, "comm is null");
  if (ndev < 1) return Fail(call, ncclInvalidArgument, "ndev " + std::to_string(ndev) + " is below 1");
  collectived::nccl::UniqueId id;
  if (ncclResult_t r = Fail(call, collectived::nccl::FreshKey(&id.key)); r != ncclSuccess) return r;
  std::vector<std::shared_ptr<Comm>> impls;
  for (int i = 0; i < ndev; ++i) {
    CommParams p;
    p.key = "nccl-" + id.key;
    p.socket = collectived::nccl::DaemonSocket({});
    p.world = ndev;
    p.rank = i;
    p.device = devlist != nullptr ? devlist[i] : i;
    impls.push_back(std::make_shared<Comm>(std::move(p)));
  }
  // Every rank waits in its join for the others: form them concurrently.
  std::vector<std::thread> threads;
  for (auto& c : impls) threads.emplace_back([c] { c->Init(); });
  for (auto& t : threads) t.join();
  Status first;
  for (auto& c : impls) {
    Status s = c->WaitReady();
    if (!s.ok() && first.ok()) first = s;
  }
  for (int i = 0; i < ndev; ++i) comms[i] = first.ok() ? new ncclComm{impls[i]} : nullptr;
  return Fail(call, first);
}

ncclResult_t ncclCommSplit(ncclComm_t comm, int color, int key, ncclComm_t* newcomm, ncclConfig_t* config) {
  const char* call = "ncclCommSplit";
  if (ncclResult_t r = CheckComm(call, comm); r != ncclSuccess) return r;
  if (newcomm == nullptr) return Fail(call, ncclInvalidArgument, "newcomm is null");
  *newcomm = nullptr;
  if (color < 0 && color != NCCL_SPLIT_NOCOLOR) {
    return Fail(call, ncclInvalidArgument, "color " + std::to_string(color) + " is negative (NCCL_SPLIT_NOCOLOR aside)");
  }
  Comm& parent = *comm->impl;
  if (ncclResult_t r = Fail(call, parent.WaitReady()); r != ncclSuccess) return r;
  const uint32_t split = parent.NextSplit();
  std::vector<std::pair<int, int>> all;
  if (ncclResult_t r = Fail(call, parent.ExchangeColorKey(color, key, &all)); r != ncclSuccess) return r;
  if (color == NCCL_SPLIT_NOCOLOR) return ncclSuccess;
  // Members of this color ordered by (key, parent rank).
  std::vector<std::tuple<int, int>> members;
  for (int r = 0; r < static_cast<int>(all.size()); ++r) {
    if (all[r].first == color) members.emplace_back(all[r].second, r);
  }
  std::sort(members.begin(), members.end());
  CommParams p;
  p.world = static_cast<int>(members.size());
  for (int i = 0; i < p.world; ++i) {
    if (std::get<1>(members[i]) == parent.params().rank) p.rank = i;
  }
  p.key = parent.params().key + "/split" + std::to_string(split) + "/color" + std::to_string(color);
  p.socket = parent.params().socket;
  p.device = parent.params().device;
  p.blocking = parent.params().blocking;
  p.name = parent.params().name;
  if (ncclResult_t r = ReadConfig(call, config, &p); r != ncclSuccess) return r;
  return StartInit(call, std::move(p), newcomm);
}

ncclResult_t ncclCommFinalize(ncclComm_t comm) {
  if (ncclResult_t r = CheckComm("ncclCommFinalize", comm); r != ncclSuccess) return r;
  return RunOrQueue("ncclCommFinalize", comm->impl, [](Comm& c) { return c.Finalize(); });
}

ncclResult_t ncclCommDestroy(ncclComm_t comm) {
  if (comm == nullptr) return ncclSuccess;  // as NCCL: destroying NULL is a no-op
  Status s = comm->impl->Finalize();  // OK when finalized already
  delete comm;
  return Fail("ncclCommDestroy", s);
}

ncclResult_t ncclCommAbort(ncclComm_t comm) {
  if (comm == nullptr) return ncclSuccess;
  Status s = comm->impl->Abort();
  delete comm;
  return Fail("ncclCommAbort", s);
}

ncclResult_t ncclCommGetAsyncError(ncclComm_t comm, ncclResult_t* asyncError) {
  if (ncclResult_t r = CheckComm("ncclCommGetAsyncError", comm); r != ncclSuccess) return r;
  if (asyncError == nullptr) return Fail("ncclCommGetAsyncError", ncclInvalidArgument, "asyncError is null");
  Status why;
  *asyncError = comm->impl->AsyncError(&why);
  if (*asyncError != ncclSuccess && *asyncError != ncclInProgress) Fail("ncclCommGetAsyncError", why);
  return ncclSuccess;
}

const char* ncclGetErrorString(ncclResult_t result) { return collectived::nccl::ResultString(result); }

const char* ncclGetLastError(ncclComm_t) { return collectived::nccl::LastErrorText(); }

ncclResult_t ncclCommCount(const ncclComm_t comm, int* count) {
  if (ncclResult_t r = CheckComm("ncclCommCount", comm); r != ncclSuccess) return r;
  if (count == nullptr) return Fail("ncclCommCount", ncclInvalidArgument, "count is null");
  *count = comm->impl->params().world;
  return ncclSuccess;
}

ncclResult_t ncclCommCuDevice(const ncclComm_t comm, int* device) {
  if (ncclResult_t r = CheckComm("ncclCommCuDevice", comm); r != ncclSuccess) return r;
  if (device == nullptr) return Fail("ncclCommCuDevice", ncclInvalidArgument, "device is null");
  *device = comm->impl->params().device;
  return ncclSuccess;
}

ncclResult_t ncclCommUserRank(const ncclComm_t comm, int* rank) {
  if (ncclResult_t r = CheckComm("ncclCommUserRank", comm); r != ncclSuccess) return r;
  if (rank == nullptr) return Fail("ncclCommUserRank", ncclInvalidArgument, "rank is null");
  *rank = comm->impl->params().rank;
  return ncclSuccess;
}

ncclResult_t ncclMemAlloc(void** ptr, size_t size) {
  const char* call = "ncclMemAlloc";
  if (ptr == nullptr) return Fail(call, ncclInvalidArgument, "ptr is null");
  if (size == 0) return Fail(call, ncclInvalidArgument, "size is 0");
  int device = 0;
  if (cudaGetDevice(&device) != cudaSuccess) {
    return Fail(call, ncclUnhandledCudaError, std::string("cudaGetDevice: ") + cudaGetErrorString(cudaGetLastError()));
  }
  std::unique_ptr<collectived::ipc::CuMemWindow> w;
  if (ncclResult_t r = Fail(call, collectived::ipc::CuMemWindow::Create(device, size, &w)); r != ncclSuccess) return r;
  *ptr = w->device_ptr();
  std::lock_guard<std::mutex> lock(g_mem_mu);
  g_mem[*ptr] = std::move(w);
  return ncclSuccess;
}

ncclResult_t ncclMemFree(void* ptr) {
  if (ptr == nullptr) return ncclSuccess;
  std::unique_ptr<collectived::ipc::CuMemWindow> w;
  {
    std::lock_guard<std::mutex> lock(g_mem_mu);
    auto it = g_mem.find(ptr);
    if (it == g_mem.end()) return Fail("ncclMemFree", ncclInvalidArgument, "ptr was not returned by ncclMemAlloc");
    w = std::move(it->second);
    g_mem.erase(it);
  }
  return ncclSuccess;  // unmapped and released as `w` goes
}

ncclResult_t ncclCommRegister(const ncclComm_t comm, void* buff, size_t size, void** handle) {
  if (ncclResult_t r = CheckComm("ncclCommRegister", comm); r != ncclSuccess) return r;
  if (handle == nullptr) return Fail("ncclCommRegister", ncclInvalidArgument, "handle is null");
  return Fail("ncclCommRegister", comm->impl->Register(buff, size, handle));
}

ncclResult_t ncclCommDeregister(const ncclComm_t comm, void* handle) {
  if (ncclResult_t r = CheckComm("ncclCommDeregister", comm); r != ncclSuccess) return r;
  return Fail("ncclCommDeregister", comm->impl->Deregister(handle));
}

ncclResult_t ncclAllReduce(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype,
                           ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream) {
  if (ncclResult_t r = CheckComm("ncclAllReduce", comm); r != ncclSuccess) return r;
  return RunOrQueue("ncclAllReduce", comm->impl, [=](Comm& c) {
    return c.AllReduce(sendbuff, recvbuff, count, datatype, op, stream);
  });
}

ncclResult_t ncclAllGather(const void* sendbuff, void* recvbuff, size_t sendcount, ncclDataType_t datatype,
                           ncclComm_t comm, cudaStream_t stream) {
  if (ncclResult_t r = CheckComm("ncclAllGather", comm); r != ncclSuccess) return r;
  return RunOrQueue("ncclAllGather", comm->impl, [=](Comm& c) {
    return c.AllGather(sendbuff, recvbuff, sendcount, datatype, stream);
  });
}

ncclResult_t ncclBroadcast(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype, int root,
                           ncclComm_t comm, cudaStream_t stream) {
  if (ncclResult_t r = CheckComm("ncclBroadcast", comm); r != ncclSuccess) return r;
  return RunOrQueue("ncclBroadcast", comm->impl, [=](Comm& c) {
    return c.Broadcast(sendbuff, recvbuff, count, datatype, root, stream);
  });
}

ncclResult_t ncclBcast(void* buff, size_t count, ncclDataType_t datatype, int root, ncclComm_t comm,
                       cudaStream_t stream) {
  if (ncclResult_t r = CheckComm("ncclBcast", comm); r != ncclSuccess) return r;
  return RunOrQueue("ncclBcast", comm->impl, [=](Comm& c) {
    return c.Broadcast(buff, buff, count, datatype, root, stream);
  });
}

ncclResult_t ncclReduceScatter(const void* sendbuff, void* recvbuff, size_t recvcount, ncclDataType_t datatype,
                               ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream) {
  if (ncclResult_t r = CheckComm("ncclReduceScatter", comm); r != ncclSuccess) return r;
  return RunOrQueue("ncclReduceScatter", comm->impl, [=](Comm& c) {
    return c.ReduceScatter(sendbuff, recvbuff, recvcount, datatype, op, stream);
  });
}

ncclResult_t ncclReduce(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype, ncclRedOp_t op,
                        int root, ncclComm_t comm, cudaStream_t stream) {
  if (ncclResult_t r = CheckComm("ncclReduce", comm); r != ncclSuccess) return r;
  return RunOrQueue("ncclReduce", comm->impl, [=](Comm& c) {
    return c.Reduce(sendbuff, recvbuff, count, datatype, op, root, stream);
  });
}

// The calls collectived does not implement (unsupported.cc) answer this.
int collectived_nccl_unsupported(const char* call) {
  return Fail(call, ncclInvalidUsage, "not supported by collectived (docs/nccl.md lists what is)");
}

ncclResult_t ncclGroupStart(void) {
  ++t_group.depth;
  return ncclSuccess;
}

ncclResult_t ncclGroupEnd(void) {
  if (t_group.depth == 0) return Fail("ncclGroupEnd", ncclInvalidUsage, "no ncclGroupStart before it");
  if (--t_group.depth > 0) return ncclSuccess;
  Group g = std::move(t_group);
  t_group = Group{};
  std::vector<std::thread> threads;
  for (auto& c : g.inits) threads.emplace_back([c] { c->Init(); });
  for (auto& t : threads) t.join();
  ncclResult_t first = ncclSuccess;
  for (auto& c : g.inits) {
    ncclResult_t r = Fail("ncclGroupEnd (communicator init)", c->WaitReady());
    if (first == ncclSuccess) first = r;
  }
  for (auto& [call, op] : g.ops) {
    ncclResult_t r = Fail(call, op());
    if (first == ncclSuccess) first = r;
  }
  return first;
}

}  // extern "C"
