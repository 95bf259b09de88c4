#include <poll.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>

#include "client/src/client_impl.h"
#include "client/src/communicator_impl.h"
#include "ipc/fd_channel.h"
#include "proto/status_convert.h"

namespace collectived {

// ---- Buffer ----------------------------------------------------------------

Buffer::Buffer() = default;
Buffer::Buffer(Buffer&&) noexcept = default;
Buffer& Buffer::operator=(Buffer&& other) noexcept {
  if (this != &other) {
    Free();
    state_ = std::move(other.state_);
  }
  return *this;
}
Buffer::~Buffer() { Free(); }

void* Buffer::data() const {
  if (!state_) return nullptr;
  return state_->device_ptr != nullptr ? state_->device_ptr : state_->window->data() + state_->offset;
}
uint64_t Buffer::size() const { return state_ ? state_->bytes : 0; }
uint64_t Buffer::id() const { return state_ ? state_->id : 0; }

Status Buffer::Free() {
  if (!state_) return Status::Ok();
  if (state_->release) {  // a GPU heap buffer: its range goes back to the heap
    Status s = state_->release();
    state_.reset();
    return s;
  }
  auto client = state_->client.lock();
  Status s = client ? client->FreeBuffer(state_.get()) : Status::Ok();
  if (s.ok()) state_.reset();
  return s;
}

// ---- Client ----------------------------------------------------------------

Client::Client(std::shared_ptr<ClientImpl> impl) : impl_(std::move(impl)) {}
Client::~Client() = default;

Status Client::Connect(const ClientOptions& options, std::unique_ptr<Client>* out) {
  auto impl = std::make_shared<ClientImpl>(options);
  COLLECTIVED_RETURN_IF_ERROR(impl->Connect());
  out->reset(new Client(std::move(impl)));
  return Status::Ok();
}

Status Client::GetVersion(VersionInfo* out) { return impl_->GetVersion(out); }
Status Client::AllocBuffer(uint64_t bytes, Buffer* out) { return impl_->AllocBuffer(bytes, out); }
Status Client::CreateCommunicator(const CommunicatorOptions& options, std::unique_ptr<Communicator>* out) {
  return impl_->CreateCommunicator(options, out);
}
uint64_t Client::session_id() const { return impl_->session_id(); }
uint64_t Client::session_token() const { return impl_->session_token(); }

// ---- ClientImpl ------------------------------------------------------------

std::unique_ptr<grpc::ClientContext> ClientImpl::NewContext(int timeout_ms) const {
  auto ctx = std::make_unique<grpc::ClientContext>();
  ctx->set_deadline(std::chrono::system_clock::now() +
                    std::chrono::milliseconds(timeout_ms < 0 ? options_.rpc_timeout_ms : timeout_ms));
  if (session_token_ != 0) ctx->AddMetadata(kSessionTokenMetadata, std::to_string(session_token_));
  return ctx;
}

Status ClientImpl::Connect() {
  if (options_.socket_path.empty()) return Status::InvalidArgument("ClientOptions.socket_path is empty");
  // A connection of its own: gRPC shares connections between channels of one
  // target, and one to a daemon that died would fail this client's first
  // call after the daemon came back (ARestartedDaemonIs... in daemon_test).
  grpc::ChannelArguments args;
  args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
  channel_ = grpc::CreateCustomChannel("unix:" + options_.socket_path, grpc::InsecureChannelCredentials(), args);
  stub_ = v1::CollectiveService::NewStub(channel_);

  VersionInfo version;
  COLLECTIVED_RETURN_IF_ERROR(GetVersion(&version));
  if (version.api_major != kApiMajor) {
    return Status::FailedPrecondition("daemon speaks API v" + std::to_string(version.api_major) +
                                      ", this client needs v" + std::to_string(kApiMajor));
  }
  daemon_api_minor_ = version.api_minor;
  v1::AttachRequest req;
  req.set_client_name(options_.client_name);
  req.set_api_major(kApiMajor);
  req.set_pid(static_cast<uint32_t>(getpid()));
  v1::AttachResponse resp;
  auto ctx = NewContext();
  COLLECTIVED_RETURN_IF_ERROR(FromGrpcStatus(stub_->Attach(ctx.get(), req, &resp)));
  session_id_ = resp.session_id();
  session_token_ = resp.session_token();

  // The fd socket: carries window fds and is the session's lease.
  COLLECTIVED_RETURN_IF_ERROR(ipc::ConnectUnix(resp.fd_socket_path(), &fd_sock_));
  ipc::FdRequest hello{ipc::kFdMagic, ipc::FdRequestType::kHello, session_id_, resp.session_token()};
  ipc::FdReply reply{};
  int no_fd = -1;
  // A daemon at its connection cap answers at accept and closes: the send may
  // fail, but its answer (naming the cap) is still there to read.
  Status sent = ipc::SendWithFd(fd_sock_, &hello, sizeof(hello), -1);
  Status got = ipc::RecvWithFd(fd_sock_, &reply, sizeof(reply), &no_fd);
  if (!got.ok()) return sent.ok() ? got : sent;
  if (no_fd >= 0) close(no_fd);
  reply.message[sizeof(reply.message) - 1] = '\0';
  if (reply.code != 0) return Status(static_cast<StatusCode>(reply.code), reply.message);
  return Status::Ok();
}

ClientImpl::~ClientImpl() {
  if (session_id_ != 0 && stub_) {
    v1::DetachRequest req;
    req.set_session_id(session_id_);
    v1::DetachResponse resp;
    auto ctx = NewContext(2000);
    stub_->Detach(ctx.get(), req, &resp);  // best effort: closing the fd socket ends the lease anyway
  }
  if (fd_sock_ >= 0) close(fd_sock_);
}

Status ClientImpl::Lease() const {
  // The daemon holds the other end of the fd socket for the session's life:
  // once it hangs up, the daemon that knew this session is gone, and a
  // daemon started since on the same socket would not know it.
  if (fd_sock_ < 0) return Status::Ok();  // still attaching (Connect asks for the version first)
  pollfd p{fd_sock_, POLLRDHUP, 0};
  if (poll(&p, 1, 0) == 1 && (p.revents & (POLLRDHUP | POLLHUP | POLLERR | POLLNVAL)) != 0) {
    return Status::Unavailable("the session's daemon is gone (collectived stopped or restarted): connect again "
                               "with Client::Connect");
  }
  return Status::Ok();
}

Status ClientImpl::GetVersion(VersionInfo* out) {
  COLLECTIVED_RETURN_IF_ERROR(Lease());
  v1::GetVersionRequest req;
  v1::GetVersionResponse resp;
  auto ctx = NewContext();
  COLLECTIVED_RETURN_IF_ERROR(FromGrpcStatus(stub_->GetVersion(ctx.get(), req, &resp)));
  out->daemon_version = resp.daemon_version();
  out->api_major = resp.api_major();
  out->api_minor = resp.api_minor();
  out->backends.assign(resp.backends().begin(), resp.backends().end());
  out->active_backend = resp.active_backend();
  out->capabilities.assign(resp.capabilities().begin(), resp.capabilities().end());
  out->max_message_bytes = resp.max_message_bytes();
  return Status::Ok();
}

Status ClientImpl::FetchFd(uint64_t window_id, int* out_fd, uint64_t* bytes) {
  std::lock_guard<std::mutex> lock(fd_mu_);
  ipc::FdRequest req{ipc::kFdMagic, ipc::FdRequestType::kFetchWindow, session_id_, window_id};
  ipc::FdReply reply{};
  int fd = -1;
  COLLECTIVED_RETURN_IF_ERROR(ipc::SendWithFd(fd_sock_, &req, sizeof(req), -1));
  COLLECTIVED_RETURN_IF_ERROR(ipc::RecvWithFd(fd_sock_, &reply, sizeof(reply), &fd));
  reply.message[sizeof(reply.message) - 1] = '\0';
  if (reply.code != 0) {
    if (fd >= 0) close(fd);
    return Status(static_cast<StatusCode>(reply.code), reply.message);
  }
  if (fd < 0) return Status::Internal("daemon sent no fd for window " + std::to_string(window_id));
  *out_fd = fd;
  *bytes = reply.bytes;
  return Status::Ok();
}

Status ClientImpl::DepositFd(int fd, uint64_t* deposit_id) {
  std::lock_guard<std::mutex> lock(fd_mu_);
  ipc::FdRequest req{ipc::kFdMagic, ipc::FdRequestType::kDepositFd, session_id_, 0};
  ipc::FdReply reply{};
  int stray = -1;
  COLLECTIVED_RETURN_IF_ERROR(ipc::SendWithFd(fd_sock_, &req, sizeof(req), fd));
  COLLECTIVED_RETURN_IF_ERROR(ipc::RecvWithFd(fd_sock_, &reply, sizeof(reply), &stray));
  if (stray >= 0) close(stray);
  reply.message[sizeof(reply.message) - 1] = '\0';
  if (reply.code != 0) return Status(static_cast<StatusCode>(reply.code), reply.message);
  *deposit_id = reply.bytes;
  return Status::Ok();
}

Status ClientImpl::FetchWindow(uint64_t window_id, uint64_t bytes, std::shared_ptr<ipc::ShmWindow>* out) {
  int fd = -1;
  uint64_t size = 0;
  COLLECTIVED_RETURN_IF_ERROR(FetchFd(window_id, &fd, &size));
  if (size < bytes) {
    close(fd);
    return Status::Internal("window smaller than announced");
  }
  std::unique_ptr<ipc::ShmWindow> window;
  COLLECTIVED_RETURN_IF_ERROR(ipc::ShmWindow::Map(fd, size, &window));
  *out = std::move(window);
  return Status::Ok();
}

Status ClientImpl::AllocBuffer(uint64_t bytes, Buffer* out) {
  COLLECTIVED_RETURN_IF_ERROR(Lease());
  v1::AllocBufferRequest req;
  req.set_session_id(session_id_);
  req.set_bytes(bytes);
  v1::AllocBufferResponse resp;
  auto ctx = NewContext();
  COLLECTIVED_RETURN_IF_ERROR(FromGrpcStatus(stub_->AllocBuffer(ctx.get(), req, &resp)));
  auto state = std::make_shared<BufferState>();
  state->client = weak_from_this();
  state->id = resp.buffer_id();
  state->offset = resp.window_offset();
  state->bytes = resp.bytes();
  Status s = FetchWindow(resp.window_id(), resp.window_bytes(), &state->window);
  if (!s.ok()) {
    v1::FreeBufferRequest freq;
    freq.set_session_id(session_id_);
    freq.set_buffer_id(resp.buffer_id());
    v1::FreeBufferResponse fresp;
    auto fctx = NewContext();
    stub_->FreeBuffer(fctx.get(), freq, &fresp);
    return s;
  }
  {
    std::lock_guard<std::mutex> lock(buffers_mu_);
    buffers_[state->id] = state;
  }
  *out = Buffer();
  out->state_ = std::move(state);
  return Status::Ok();
}

Status ClientImpl::FreeBuffer(BufferState* state) {
  if (state->freed) return Status::Ok();
  v1::FreeBufferRequest req;
  req.set_session_id(session_id_);
  req.set_buffer_id(state->id);
  v1::FreeBufferResponse resp;
  auto ctx = NewContext();
  Status s = FromGrpcStatus(stub_->FreeBuffer(ctx.get(), req, &resp));
  // NOT_FOUND: the daemon already dropped it (e.g. the session was reclaimed).
  if (!s.ok() && s.code() != StatusCode::kNotFound) return s;
  state->freed = true;
  std::lock_guard<std::mutex> lock(buffers_mu_);
  buffers_.erase(state->id);
  return Status::Ok();
}

Status ClientImpl::ResolveOwn(uint64_t buffer_id, uint64_t offset, uint64_t bytes, void** ptr) {
  std::lock_guard<std::mutex> lock(buffers_mu_);
  auto it = buffers_.find(buffer_id);
  if (it == buffers_.end()) return Status::NotFound("buffer " + std::to_string(buffer_id) + " is not mapped here");
  const BufferState& b = *it->second;
  if (offset > b.bytes || bytes > b.bytes - offset) {
    return Status::InvalidArgument("range [" + std::to_string(offset) + ", +" + std::to_string(bytes) +
                                   ") outside buffer " + std::to_string(buffer_id) + " of " +
                                   std::to_string(b.bytes) + " bytes");
  }
  *ptr = b.window->data() + b.offset + offset;
  return Status::Ok();
}

Status ClientImpl::CheckSpan(const BufferSpan& span, uint64_t bytes, const char* what, uint64_t* buffer_id) const {
  if (span.buffer == nullptr || !span.buffer->valid()) {
    return Status::InvalidArgument(std::string(what) + " buffer is not allocated");
  }
  const uint64_t id = span.buffer->id();
  std::lock_guard<std::mutex> lock(buffers_mu_);
  if (buffers_.find(id) == buffers_.end()) {
    return Status::InvalidArgument(std::string(what) + " buffer " + std::to_string(id) +
                                   " does not belong to this client");
  }
  const uint64_t size = span.buffer->size();
  if (span.offset > size || bytes > size - span.offset) {
    return Status::InvalidArgument(std::string(what) + " range [" + std::to_string(span.offset) + ", +" +
                                   std::to_string(bytes) + ") exceeds its buffer of " + std::to_string(size) +
                                   " bytes");
  }
  *buffer_id = id;
  return Status::Ok();
}

Status ClientImpl::CreateCommunicator(const CommunicatorOptions& options, std::unique_ptr<Communicator>* out) {
  COLLECTIVED_RETURN_IF_ERROR(Lease());
  v1::CreateCommunicatorRequest req;
  req.set_session_id(session_id_);
  req.set_key(options.key);
  req.set_world_size(options.world_size);
  req.set_rank(options.rank);
  req.set_mode(static_cast<v1::ExecutionMode>(options.mode));
  req.set_op_timeout_ms(options.op_timeout_ms);
  req.set_join_timeout_ms(options.join_timeout_ms > 0 ? options.join_timeout_ms : 0);
  std::shared_ptr<void> queue_lease;  // refused before the daemon hears of the rank
  COLLECTIVED_RETURN_IF_ERROR(PrepareGpuJoin(options, &req, &queue_lease));
  v1::CreateCommunicatorResponse resp;
  auto ctx = NewContext(options.join_timeout_ms + options_.rpc_timeout_ms);
  COLLECTIVED_RETURN_IF_ERROR(FromGrpcStatus(stub_->CreateCommunicator(ctx.get(), req, &resp)));
  // API 1.5: the daemon names the member's place in the segment (a
  // communicator across nodes holds this node's ranks only); before, the rank.
  const bool placed = resp.world_size() != 0;
  const uint32_t segment_rank = placed ? resp.segment_rank() : options.rank;
  std::shared_ptr<ipc::ShmWindow> window;
  Status s = FetchWindow(resp.window_id(), resp.window_bytes(), &window);
  ring::CommSegment seg;
  if (s.ok()) s = ring::CommSegment::Attach(window->data(), window->size(), &seg);
  if (s.ok() && (segment_rank >= seg.world_size() || (placed && resp.world_size() != options.world_size))) {
    s = Status::Internal("the daemon placed rank " + std::to_string(options.rank) + " at " +
                         std::to_string(segment_rank) + " of a segment of " + std::to_string(seg.world_size()) +
                         " ranks, world " + std::to_string(resp.world_size()));
  }
  if (!s.ok()) {
    DestroyCommunicator(resp.comm_id(), segment_rank);
    return s;
  }
  std::unique_ptr<GpuCommunicator> gpu;
  if (options.device >= 0) {
    s = GpuCommunicator::Create(MakeGpuSetup(options, segment_rank, resp, seg, window, std::move(queue_lease)),
                                [this](uint64_t id, int* fd, uint64_t* bytes) { return FetchFd(id, fd, bytes); }, &gpu);
    if (!s.ok()) {
      DestroyCommunicator(resp.comm_id(), segment_rank);
      return s;
    }
  }
  auto impl = std::make_unique<CommunicatorImpl>(shared_from_this(), resp.comm_id(), options.rank, options.world_size,
                                                 segment_rank, seg, std::move(window),
                                                 static_cast<ExecutionMode>(resp.mode()));
  if (gpu) {
    impl->SetGpu(std::move(gpu));
  } else {
    impl->Start();
  }
  out->reset(new Communicator(std::move(impl)));
  return Status::Ok();
}

Status ClientImpl::DestroyCommunicator(uint64_t comm_id, uint32_t rank) {
  COLLECTIVED_RETURN_IF_ERROR(Lease());
  v1::DestroyCommunicatorRequest req;
  req.set_session_id(session_id_);
  req.set_comm_id(comm_id);
  req.set_rank(rank);
  v1::DestroyCommunicatorResponse resp;
  auto ctx = NewContext();
  return FromGrpcStatus(stub_->DestroyCommunicator(ctx.get(), req, &resp));
}

Status ClientImpl::RegisterPlan(uint64_t comm_id, uint32_t rank, const v1::OpRequest& op) {
  COLLECTIVED_RETURN_IF_ERROR(Lease());
  v1::RegisterPlanRequest req;
  req.set_session_id(session_id_);
  req.set_comm_id(comm_id);
  req.set_rank(rank);
  *req.mutable_op() = op;
  v1::RegisterPlanResponse resp;
  auto ctx = NewContext();
  return FromGrpcStatus(stub_->RegisterPlan(ctx.get(), req, &resp));
}

Status ClientImpl::Submit(uint64_t comm_id, uint32_t rank, const v1::OpRequest& op, uint64_t* index) {
  COLLECTIVED_RETURN_IF_ERROR(Lease());
  v1::SubmitRequest req;
  req.set_session_id(session_id_);
  req.set_comm_id(comm_id);
  req.set_rank(rank);
  *req.mutable_op() = op;
  v1::SubmitResponse resp;
  auto ctx = NewContext();
  COLLECTIVED_RETURN_IF_ERROR(FromGrpcStatus(stub_->Submit(ctx.get(), req, &resp)));
  *index = resp.op_index();
  return Status::Ok();
}

}  // namespace collectived
