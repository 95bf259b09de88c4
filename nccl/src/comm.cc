#include "nccl/src/comm.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <string>

#include "nccl/src/stream_temp.h"
#include "nccl/src/type_map.h"

namespace collectived::nccl {

namespace {

// NCCL waits for peers as long as the program lets it; torch's watchdog
// gives a collective 10 minutes. A shorter op deadline would fail a training
// step whose ranks drift apart by a checkpoint's write.
constexpr int kDefaultOpTimeoutMs = 600000;
constexpr int kDefaultJoinTimeoutMs = 600000;  // the daemon caps it (join-timeout-ms)

int EnvMs(const char* name, int fallback) {
  const char* v = std::getenv(name);
  if (v == nullptr || *v == '\0') return fallback;
  char* end = nullptr;
  const long ms = std::strtol(v, &end, 10);
  return (end != nullptr && *end == '\0' && ms > 0 && ms <= 86400000) ? static_cast<int>(ms) : fallback;
}

bool Aligned(const void* p, uint64_t a) { return reinterpret_cast<uintptr_t>(p) % a == 0; }

// The integer words a type-blind op moves `bytes` as: 8-byte words where
// size and pointers allow, else 4-byte ones; kUnspecified when neither fits.
DataType WordType(uint64_t bytes, const void* a, const void* b) {
  if (bytes % 8 == 0 && Aligned(a, 8) && Aligned(b, 8)) return DataType::kInt64;
  if (bytes % 4 == 0 && Aligned(a, 4) && Aligned(b, 4)) return DataType::kInt32;
  return DataType::kUnspecified;
}

struct Registration {
  Buffer buffer;  // invalid: memory the daemon cannot map, ops on it stay staged
};

}  // namespace

Comm::Comm(CommParams p) : params_(std::move(p)) {}

Comm::~Comm() {
  comm_.reset();  // leaves (waiting for this rank's ops) before the session goes
  client_.reset();
}

void Comm::Init() {
  Status s = [&]() -> Status {
    if (cudaSetDevice(params_.device) != cudaSuccess) return Cuda(cudaGetLastError(), "cudaSetDevice");
    ClientOptions co;
    co.socket_path = params_.socket;
    co.client_name = "nccl " + (params_.name.empty() ? std::string("rank ") : params_.name + " rank ") +
                     std::to_string(params_.rank) + " pid " + std::to_string(getpid());
    COLLECTIVED_RETURN_IF_ERROR(Client::Connect(co, &client_));
    CommunicatorOptions o;
    o.key = params_.key;
    o.world_size = static_cast<uint32_t>(params_.world);
    o.rank = static_cast<uint32_t>(params_.rank);
    o.device = params_.device;
    o.op_timeout_ms = static_cast<uint32_t>(EnvMs("COLLECTIVED_NCCL_OP_TIMEOUT_MS", kDefaultOpTimeoutMs));
    o.join_timeout_ms = EnvMs("COLLECTIVED_NCCL_JOIN_TIMEOUT_MS", kDefaultJoinTimeoutMs);
    COLLECTIVED_RETURN_IF_ERROR(client_->CreateCommunicator(o, &comm_));
    slot_bytes_ = comm_->max_message_bytes();
    return Status::Ok();
  }();
  // An abort asked for while forming ends the communicator now that it exists.
  if (s.ok() && abort_requested_.load()) {
    comm_->Abort("ncclCommAbort while the communicator formed");
    s = Status::Aborted("ncclCommAbort while the communicator formed");
  }
  std::lock_guard<std::mutex> lock(state_mu_);
  init_status_ = s;
  state_ = s.ok() ? State::kReady : State::kFailed;
  state_cv_.notify_all();
}

Status Comm::WaitReady() {
  std::unique_lock<std::mutex> lock(state_mu_);
  const auto bound = std::chrono::milliseconds(EnvMs("COLLECTIVED_NCCL_JOIN_TIMEOUT_MS", kDefaultJoinTimeoutMs) + 10000);
  if (!state_cv_.wait_for(lock, bound, [&] { return state_ != State::kForming; })) {
    return Status::DeadlineExceeded("the communicator did not finish forming");
  }
  if (state_ == State::kClosed) return Status::FailedPrecondition("the communicator was finalized or aborted");
  return init_status_;
}

Status Comm::Usable() const {
  std::lock_guard<std::mutex> lock(state_mu_);
  switch (state_) {
    case State::kReady: return Status::Ok();
    case State::kFailed: return init_status_;
    case State::kClosed: return Status::FailedPrecondition("the communicator was finalized or aborted");
    case State::kForming: return Status::Unavailable("forming");
  }
  return Status::Internal("unknown state");
}

Status Comm::UsableReduction(int datatype, int op, DataType* dt, ReduceOp* rop) const {
  COLLECTIVED_RETURN_IF_ERROR(Usable());
  return MapReduction(datatype, op, dt, rop);
}

Status Comm::ReduceIn(const void* send, void* recv, uint64_t count, DataType dt, ReduceOp op, cudaStream_t s) {
  const uint64_t es = DataTypeSize(dt);
  const uint64_t bytes = count * es;
  Handle h;
  if (bytes <= slot_bytes_ || (comm_->ZeroCopy(send, bytes) && comm_->ZeroCopy(recv, bytes))) {
    return comm_->AllReduce(send, recv, count, dt, op, s, &h);
  }
  // Staged above the slot: pieces of the slot's size, one op each.
  const uint64_t per = std::max<uint64_t>(1, slot_bytes_ / es);
  for (uint64_t off = 0; off < count; off += per) {
    const uint64_t n = std::min(per, count - off);
    COLLECTIVED_RETURN_IF_ERROR(comm_->AllReduce(static_cast<const uint8_t*>(send) + off * es,
                                                 static_cast<uint8_t*>(recv) + off * es, n, dt, op, s, &h));
  }
  return Status::Ok();
}

Status Comm::GatherPieces(const void* send, uint64_t count, DataType dt, void* recv, uint64_t pitch, uint64_t valid,
                          cudaStream_t s) {
  const uint64_t es = DataTypeSize(dt);
  const uint64_t bytes = count * es;
  const uint64_t world = static_cast<uint64_t>(params_.world);
  Handle h;
  if (pitch == bytes && valid == bytes && (bytes <= slot_bytes_ || comm_->ZeroCopy(recv, world * bytes))) {
    return comm_->AllGather(send, recv, count, dt, s, &h);
  }
  // Through a temporary of `world` pieces, each copied to its place with one 2D copy.
  const uint64_t per = std::max<uint64_t>(1, std::min(count, slot_bytes_ / es));
  StreamTemp temp(s, params_.device);
  COLLECTIVED_RETURN_IF_ERROR(temp.Alloc(world * per * es));
  for (uint64_t off = 0; off < count; off += per) {
    const uint64_t n = std::min(per, count - off);
    const uint64_t at = off * es;
    if (at >= valid) break;  // padding only: every rank stops at the same piece
    COLLECTIVED_RETURN_IF_ERROR(
        comm_->AllGather(static_cast<const uint8_t*>(send) + at, temp.get(), n, dt, s, &h));
    const uint64_t width = std::min(n * es, valid - at);
    COLLECTIVED_RETURN_IF_ERROR(Cuda(cudaMemcpy2DAsync(static_cast<uint8_t*>(recv) + at, pitch, temp.get(), n * es,
                                                       width, world, cudaMemcpyDeviceToDevice, s),
                                     "cudaMemcpy2DAsync"));
  }
  return Status::Ok();
}

Status Comm::AllReduce(const void* send, void* recv, size_t count, int datatype, int op, cudaStream_t s) {
  std::shared_lock<std::shared_mutex> use(use_mu_);
  DataType dt;
  ReduceOp rop;
  COLLECTIVED_RETURN_IF_ERROR(UsableReduction(datatype, op, &dt, &rop));
  if (count == 0) return Status::Ok();
  return ReduceIn(send, recv, count, dt, rop, s);
}

Status Comm::AllGather(const void* send, void* recv, size_t count, int datatype, cudaStream_t s) {
  std::shared_lock<std::shared_mutex> use(use_mu_);
  COLLECTIVED_RETURN_IF_ERROR(Usable());
  TypeInfo t;
  COLLECTIVED_RETURN_IF_ERROR(MapType(datatype, &t));
  if (count == 0) return Status::Ok();
  const uint64_t bytes = count * t.size;
  if (t.native != DataType::kUnspecified) return GatherPieces(send, count, t.native, recv, bytes, bytes, s);
  // 1-byte types move as words: in place where size and alignment allow, else
  // through a padded copy of the input.
  const DataType w = WordType(bytes, send, recv);
  if (w != DataType::kUnspecified) return GatherPieces(send, bytes / DataTypeSize(w), w, recv, bytes, bytes, s);
  const uint64_t padded = (bytes + 3) / 4 * 4;
  StreamTemp in(s, params_.device);
  COLLECTIVED_RETURN_IF_ERROR(in.Alloc(padded));
  COLLECTIVED_RETURN_IF_ERROR(Cuda(cudaMemcpyAsync(in.get(), send, bytes, cudaMemcpyDeviceToDevice, s), "cudaMemcpyAsync"));
  return GatherPieces(in.get(), padded / 4, DataType::kInt32, recv, bytes, bytes, s);
}

Status Comm::Broadcast(const void* send, void* recv, size_t count, int datatype, int root, cudaStream_t s) {
  std::shared_lock<std::shared_mutex> use(use_mu_);
  COLLECTIVED_RETURN_IF_ERROR(Usable());
  TypeInfo t;
  COLLECTIVED_RETURN_IF_ERROR(MapType(datatype, &t));
  if (root < 0 || root >= params_.world) {
    return Status::InvalidArgument("root " + std::to_string(root) + " outside [0, " + std::to_string(params_.world) + ")");
  }
  if (count == 0) return Status::Ok();
  const uint64_t bytes = count * t.size;
  const bool is_root = root == params_.rank;
  // Every rank sums in place: the root's words plus zeros everywhere else are
  // the root's words, bit for bit, in two's complement.
  const DataType w = WordType(bytes, send, recv);
  if (w != DataType::kUnspecified) {
    if (is_root && send != recv) {
      COLLECTIVED_RETURN_IF_ERROR(Cuda(cudaMemcpyAsync(recv, send, bytes, cudaMemcpyDeviceToDevice, s), "cudaMemcpyAsync"));
    } else if (!is_root) {
      COLLECTIVED_RETURN_IF_ERROR(Cuda(cudaMemsetAsync(recv, 0, bytes, s), "cudaMemsetAsync"));
    }
    return ReduceIn(recv, recv, bytes / DataTypeSize(w), w, ReduceOp::kSum, s);
  }
  const uint64_t padded = (bytes + 3) / 4 * 4;
  StreamTemp temp(s, params_.device);
  COLLECTIVED_RETURN_IF_ERROR(temp.Alloc(padded));
  COLLECTIVED_RETURN_IF_ERROR(Cuda(cudaMemsetAsync(temp.get(), 0, padded, s), "cudaMemsetAsync"));
  if (is_root) {
    COLLECTIVED_RETURN_IF_ERROR(Cuda(cudaMemcpyAsync(temp.get(), send, bytes, cudaMemcpyDeviceToDevice, s), "cudaMemcpyAsync"));
  }
  COLLECTIVED_RETURN_IF_ERROR(ReduceIn(temp.get(), temp.get(), padded / 4, DataType::kInt32, ReduceOp::kSum, s));
  return Cuda(cudaMemcpyAsync(recv, temp.get(), bytes, cudaMemcpyDeviceToDevice, s), "cudaMemcpyAsync");
}

Status Comm::ReduceScatter(const void* send, void* recv, size_t recvcount, int datatype, int op, cudaStream_t s) {
  std::shared_lock<std::shared_mutex> use(use_mu_);
  DataType dt;
  ReduceOp rop;
  COLLECTIVED_RETURN_IF_ERROR(UsableReduction(datatype, op, &dt, &rop));
  if (recvcount == 0) return Status::Ok();
  const uint64_t es = DataTypeSize(dt);
  const uint64_t share = recvcount * es;
  StreamTemp temp(s, params_.device);
  COLLECTIVED_RETURN_IF_ERROR(temp.Alloc(share * params_.world));
  COLLECTIVED_RETURN_IF_ERROR(ReduceIn(send, temp.get(), recvcount * params_.world, dt, rop, s));
  return Cuda(cudaMemcpyAsync(recv, temp.get() + share * params_.rank, share, cudaMemcpyDeviceToDevice, s),
              "cudaMemcpyAsync");
}

Status Comm::Reduce(const void* send, void* recv, size_t count, int datatype, int op, int root, cudaStream_t s) {
  std::shared_lock<std::shared_mutex> use(use_mu_);
  DataType dt;
  ReduceOp rop;
  COLLECTIVED_RETURN_IF_ERROR(UsableReduction(datatype, op, &dt, &rop));
  if (root < 0 || root >= params_.world) {
    return Status::InvalidArgument("root " + std::to_string(root) + " outside [0, " + std::to_string(params_.world) + ")");
  }
  if (count == 0) return Status::Ok();
  const uint64_t bytes = count * DataTypeSize(dt);
  // Every rank reduces into a temporary (the same op everywhere); the root copies it out.
  StreamTemp temp(s, params_.device);
  COLLECTIVED_RETURN_IF_ERROR(temp.Alloc(bytes));
  COLLECTIVED_RETURN_IF_ERROR(ReduceIn(send, temp.get(), count, dt, rop, s));
  if (root != params_.rank) return Status::Ok();
  return Cuda(cudaMemcpyAsync(recv, temp.get(), bytes, cudaMemcpyDeviceToDevice, s), "cudaMemcpyAsync");
}

Status Comm::ExchangeColorKey(int color, int key, std::vector<std::pair<int, int>>* all) {
  std::shared_lock<std::shared_mutex> use(use_mu_);
  COLLECTIVED_RETURN_IF_ERROR(Usable());
  const uint64_t world = static_cast<uint64_t>(params_.world);
  int previous = 0;
  cudaGetDevice(&previous);
  COLLECTIVED_RETURN_IF_ERROR(Cuda(cudaSetDevice(params_.device), "cudaSetDevice"));
  cudaStream_t s = nullptr;
  int32_t* d = nullptr;
  std::vector<int32_t> host(2 * world);
  Status st = [&]() -> Status {
    // Everything on a private non-blocking stream: a synchronous call would
    // wait for every blocking stream of the device, where a collective of
    // this process may be waiting for a peer that is itself in this split.
    COLLECTIVED_RETURN_IF_ERROR(Cuda(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), "cudaStreamCreate"));
    COLLECTIVED_RETURN_IF_ERROR(
        Cuda(cudaMallocAsync(reinterpret_cast<void**>(&d), sizeof(int32_t) * 2 * (world + 1), s), "cudaMallocAsync"));
    static thread_local int32_t mine[2];
    mine[0] = color;
    mine[1] = key;
    COLLECTIVED_RETURN_IF_ERROR(
        Cuda(cudaMemcpyAsync(d, mine, sizeof(mine), cudaMemcpyHostToDevice, s), "cudaMemcpyAsync"));
    Handle h;
    COLLECTIVED_RETURN_IF_ERROR(comm_->AllGather(d, d + 2, 2, DataType::kInt32, s, &h));
    COLLECTIVED_RETURN_IF_ERROR(h.Wait());
    COLLECTIVED_RETURN_IF_ERROR(Cuda(
        cudaMemcpyAsync(host.data(), d + 2, sizeof(int32_t) * 2 * world, cudaMemcpyDeviceToHost, s), "cudaMemcpyAsync"));
    return Cuda(cudaStreamSynchronize(s), "cudaStreamSynchronize");
  }();
  if (d != nullptr) cudaFreeAsync(d, s);
  if (s != nullptr) {
    cudaStreamSynchronize(s);
    cudaStreamDestroy(s);
  }
  cudaSetDevice(previous);
  COLLECTIVED_RETURN_IF_ERROR(st);
  all->clear();
  for (uint64_t r = 0; r < world; ++r) all->emplace_back(host[2 * r], host[2 * r + 1]);
  return Status::Ok();
}

Status Comm::Register(void* buff, size_t size, void** handle) {
  std::shared_lock<std::shared_mutex> use(use_mu_);
  COLLECTIVED_RETURN_IF_ERROR(Usable());
  if (buff == nullptr) return Status::InvalidArgument("buff is null");
  if (size == 0) return Status::InvalidArgument("size is 0");
  auto r = std::make_unique<Registration>();
  Status s = comm_->RegisterBuffer(buff, size, &r->buffer);
  // NCCL takes registration as a hint: memory the daemon cannot map
  // (cudaMalloc, pools) gets a handle and its ops stay staged.
  if (!s.ok() && s.code() != StatusCode::kInvalidArgument) return s;
  *handle = r.release();
  return Status::Ok();
}

Status Comm::Deregister(void* handle) {
  std::shared_lock<std::shared_mutex> use(use_mu_);
  if (handle == nullptr) return Status::InvalidArgument("handle is null");
  std::unique_ptr<Registration> r(static_cast<Registration*>(handle));
  return r->buffer.valid() ? r->buffer.Free() : Status::Ok();
}

Status Comm::Finalize() {
  Status ready = WaitReady();
  std::unique_lock<std::shared_mutex> use(use_mu_);
  {
    std::lock_guard<std::mutex> lock(state_mu_);
    if (state_ != State::kReady) return state_ == State::kClosed ? Status::Ok() : ready;
    state_ = State::kClosed;
  }
  return comm_->Destroy();
}

Status Comm::Abort() {
  abort_requested_.store(true);
  {
    std::lock_guard<std::mutex> lock(state_mu_);
    // Still forming: Init ends it once it exists (this call does not wait for the join).
    if (state_ == State::kForming || state_ == State::kFailed) return Status::Ok();
  }
  // Thread-safe in the library: ops in flight on other threads give up now.
  Status s = comm_->Abort("ncclCommAbort");
  std::unique_lock<std::shared_mutex> use(use_mu_);
  std::lock_guard<std::mutex> lock(state_mu_);
  state_ = State::kClosed;
  return s;
}

ncclResult_t Comm::AsyncError(Status* why) {
  {
    std::lock_guard<std::mutex> lock(state_mu_);
    switch (state_) {
      case State::kForming: return ncclInProgress;
      case State::kFailed: *why = init_status_; return ResultFor(init_status_);
      case State::kClosed: return ncclSuccess;
      case State::kReady: break;
    }
  }
  *why = comm_->AsyncError();
  return ResultFor(*why);
}

}  // namespace collectived::nccl
