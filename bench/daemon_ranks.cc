// Ranks through collectived: each local rank is its own client session with
// its own stream; ops go through the client library (client-executed GPU
// communicators over daemon-owned memory).
#include <thread>

#include "bench/rank_set.h"
#include "collectived/client.h"
#include "ipc/cumem_window.h"
#include "base/gpu/gpu_check.h"
#include "tests/support/exact_data.h"
#include "tests/support/gpu_upload.h"

namespace collectived::bench {
namespace {

class DaemonRanks : public RankSet {
 public:
  ~DaemonRanks() override {
    for (auto& l : ranks_) {
      l.send_buf.Free();  // registered: deregistered before the memory goes
      l.recv_buf.Free();
      if (l.comm) l.comm->Destroy();
      for (void* p : l.malloced) gpuFree(p);
      if (l.stream) gpuStreamDestroy(l.stream);
    }
  }

  Status Init(const std::string& socket, const std::string& key, uint32_t world, const std::vector<uint32_t>& local,
              uint64_t in_bytes, uint64_t out_bytes, Placement placement, bool daemon_executed) {
    world_ = world;
    daemon_executed_ = daemon_executed;
    local_ = local;
    placement_ = placement;
    const bool heap = placement == Placement::kHeap;
    int ndev = 0;
    COLLECTIVED_GPU_CHECK(gpuGetDeviceCount(&ndev));
    ranks_.resize(world);
    std::vector<Status> st(world);
    std::vector<std::thread> threads;
    for (uint32_t r : local) {
      threads.emplace_back([&, r] {
        Local& l = ranks_[r];
        l.device = static_cast<int>(r % ndev);
        st[r] = Client::Connect({.socket_path = socket, .client_name = "collective-bench"}, &l.client);
        if (!st[r].ok()) return;
        CommunicatorOptions o;
        o.key = key;
        o.world_size = world;
        o.rank = r;
        o.device = l.device;
        o.gpu_heap_bytes = heap ? in_bytes + out_bytes + (1 << 20) : 0;
        o.join_timeout_ms = 120000;
        o.mode = daemon_executed ? ExecutionMode::kDaemon : ExecutionMode::kClient;
        st[r] = l.client->CreateCommunicator(o, &l.comm);
      });
    }
    for (auto& t : threads) t.join();
    for (uint32_t r : local) {
      COLLECTIVED_RETURN_IF_ERROR(st[r]);
      Local& l = ranks_[r];
      COLLECTIVED_GPU_CHECK(gpuSetDevice(l.device));
      COLLECTIVED_GPU_CHECK(gpuStreamCreateWithFlags(&l.stream, gpuStreamNonBlocking));
      if (heap) {
        COLLECTIVED_RETURN_IF_ERROR(l.comm->AllocBuffer(in_bytes, &l.send_buf));
        COLLECTIVED_RETURN_IF_ERROR(l.comm->AllocBuffer(out_bytes, &l.recv_buf));
        l.send = l.send_buf.data();
        l.recv = l.recv_buf.data();
      } else if (placement == Placement::kRegistered) {
        // As a framework would: one cuMem allocation per rank, both buffers in it.
        const uint64_t recv_at = (in_bytes + 4095) / 4096 * 4096;
        COLLECTIVED_RETURN_IF_ERROR(ipc::CuMemWindow::Create(l.device, recv_at + out_bytes, &l.own));
        l.send = l.own->device_ptr();
        l.recv = static_cast<uint8_t*>(l.own->device_ptr()) + recv_at;
      } else {
        COLLECTIVED_GPU_CHECK(gpuMalloc(&l.send, in_bytes));
        COLLECTIVED_GPU_CHECK(gpuMalloc(&l.recv, out_bytes));
        l.malloced = {l.send, l.recv};
      }
    }
    if (placement == Placement::kRegistered) {  // collective: every local rank at once
      threads.clear();
      for (uint32_t r : local) {
        threads.emplace_back([&, r] {
          Local& l = ranks_[r];
          st[r] = l.comm->RegisterBuffer(l.send, in_bytes, &l.send_buf);
          if (st[r].ok()) st[r] = l.comm->RegisterBuffer(l.recv, out_bytes, &l.recv_buf);
        });
      }
      for (auto& t : threads) t.join();
      for (uint32_t r : local) COLLECTIVED_RETURN_IF_ERROR(st[r]);
    }
    return Status::Ok();
  }

  uint32_t world() const override { return world_; }
  const std::vector<uint32_t>& local() const override { return local_; }
  gpuStream_t stream(uint32_t r) const override { return ranks_[r].stream; }

  Status Prepare(const OpSpec& spec, uint64_t seed, uint64_t count, bool in_place) override {
    const size_t es = DataTypeSize(spec.dtype);
    const uint64_t out_count = spec.gather ? world_ * count : count;
    std::vector<uint8_t> host(out_count * es);
    for (uint32_t r : local_) {
      Local& l = ranks_[r];
      testing::Poison(spec.dtype, host.data(), out_count);
      COLLECTIVED_RETURN_IF_ERROR(testing::UploadToDevice(l.recv, host.data(), out_count * es));
      testing::FillInput(spec.dtype, spec.gather ? ReduceOp::kUnspecified : spec.op, r, seed, host.data(), count);
      COLLECTIVED_RETURN_IF_ERROR(testing::UploadToDevice(SendOf(spec, r, count, in_place), host.data(), count * es));
    }
    return Status::Ok();
  }

  Status Enqueue(const OpSpec& spec, uint64_t count, bool in_place) override {
    for (uint32_t r : local_) {
      Local& l = ranks_[r];
      Handle h;
      if (spec.gather) {
        COLLECTIVED_RETURN_IF_ERROR(
            l.comm->AllGather(SendOf(spec, r, count, in_place), l.recv, count, spec.dtype, l.stream, &h));
      } else {
        COLLECTIVED_RETURN_IF_ERROR(
            l.comm->AllReduce(SendOf(spec, r, count, in_place), l.recv, count, spec.dtype, spec.op, l.stream, &h));
      }
      l.last = h;  // earlier handles are dropped: their ops are checked through the stream and the last one
    }
    return Status::Ok();
  }

  Status Sync() override {
    for (uint32_t r : local_) {
      Local& l = ranks_[r];
      COLLECTIVED_GPU_CHECK(gpuStreamSynchronize(l.stream));
      if (l.last.valid()) {
        Status s;
        if (l.last.Test(&s) && !s.ok() && s.code() != StatusCode::kFailedPrecondition) return s;  // captured: no verdict
      }
    }
    return Status::Ok();
  }

  Status WaitLast() override {
    for (uint32_t r : local_) {
      if (ranks_[r].last.valid()) COLLECTIVED_RETURN_IF_ERROR(ranks_[r].last.Wait());
    }
    return Status::Ok();
  }

  uint64_t Wrong(const OpSpec& spec, uint64_t seed, uint64_t count) override {
    const size_t es = DataTypeSize(spec.dtype);
    const uint64_t out_count = spec.gather ? world_ * count : count;
    std::vector<uint8_t> host(out_count * es);
    uint64_t wrong = 0;
    for (uint32_t r : local_) {
      if (gpuMemcpy(host.data(), ranks_[r].recv, out_count * es, gpuMemcpyDeviceToHost) != gpuSuccess) {
        return out_count * local_.size();
      }
      wrong += spec.gather ? testing::CountWrongAllGather(spec.dtype, world_, seed, host.data(), count)
                           : testing::CountWrongAllReduce(spec.dtype, spec.op, world_, seed, host.data(), count);
    }
    return wrong;
  }

  std::string Describe() const override {
    return "through collectived: " + std::to_string(local_.size()) + " of " + std::to_string(world_) +
           " ranks in this process, " + (daemon_executed_ ? "daemon-executed, " : "client-executed, ") + (placement_ == Placement::kHeap         ? "zero-copy (symmetric heap)"
            : placement_ == Placement::kRegistered ? "zero-copy (registered cuMem buffers)"
                                                   : "staged (cudaMalloc buffers)");
  }

 private:
  struct Local {
    int device = 0;
    std::unique_ptr<Client> client;
    std::unique_ptr<Communicator> comm;
    gpuStream_t stream = nullptr;
    std::unique_ptr<ipc::CuMemWindow> own;  // registered placement: the rank's own allocation
    Buffer send_buf, recv_buf;
    void* send = nullptr;
    void* recv = nullptr;
    std::vector<void*> malloced;
    Handle last;
  };
  void* SendOf(const OpSpec& spec, uint32_t r, uint64_t count, bool in_place) const {
    const Local& l = ranks_[r];
    if (!in_place) return l.send;
    return spec.gather ? static_cast<uint8_t*>(l.recv) + r * count * DataTypeSize(spec.dtype) : l.recv;
  }

  uint32_t world_ = 0;
  std::vector<uint32_t> local_;
  Placement placement_ = Placement::kHeap;
  bool daemon_executed_ = false;
  std::vector<Local> ranks_;
};

}  // namespace

Status MakeDaemonRanks(const std::string& socket, const std::string& key, uint32_t world,
                       const std::vector<uint32_t>& local, uint64_t in_bytes, uint64_t out_bytes, Placement placement,
                       bool daemon_executed, std::unique_ptr<RankSet>* out) {
  auto r = std::make_unique<DaemonRanks>();
  COLLECTIVED_RETURN_IF_ERROR(r->Init(socket, key, world, local, in_bytes, out_bytes, placement, daemon_executed));
  *out = std::move(r);
  return Status::Ok();
}

}  // namespace collectived::bench
