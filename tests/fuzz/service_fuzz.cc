// libFuzzer target: every RPC's request bytes, as a hostile local client
// could send them, through the daemon's real service (CollectiveServiceImpl
// over gRPC's in-process transport) and registry. Each input is a short
// program of calls; a call's bytes go to the server as they are (gRPC
// parses them, as over the socket), or, where they parse, with the session
// id and token of a real session put in, so that calls get past
// authorization and reach the registry. Waits the daemon would honour for
// up to an hour are cut to a few milliseconds (the fuzzer must keep moving);
// the checks on their range still see every value.
//
// Checked per call, beyond "no crash, no sanitizer report": a refused call
// carries a message; INVALID_ARGUMENT names a field (has a letter); and the
// daemon serves a good call (GetStats with the session) after each input.
#include <fuzzer/FuzzedDataProvider.h>
#include <grpcpp/grpcpp.h>
#include <grpcpp/impl/codegen/client_unary_call.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <set>
#include <string>
#include <thread>

#include "collectived/api_version.h"
#include "collectived/v1/collectived.grpc.pb.h"
#include "daemon/registry.h"
#include "daemon/service.h"
#include "tests/fuzz/fuzz_support.h"

namespace collectived::fuzz {
namespace {

namespace v1 = collectived::v1;

struct Daemon {
  daemon::DaemonConfig config;
  std::unique_ptr<daemon::Registry> registry;
  std::unique_ptr<daemon::CollectiveServiceImpl> service;
  std::unique_ptr<grpc::Server> server;
  std::shared_ptr<grpc::Channel> channel;
  ipc::PeerCredentials self;
  std::atomic<bool> stop{false};
  std::thread housekeeping;
};

Daemon* g = nullptr;

// Bounds that keep one input short; validation of the fields still sees them.
constexpr uint32_t kFuzzWaitMs = 5;

template <typename Req>
void CutWaits(Req*) {}
template <>
void CutWaits(v1::WaitOpRequest* r) {
  if (r->timeout_ms() > kFuzzWaitMs && r->timeout_ms() <= 3600000) r->set_timeout_ms(kFuzzWaitMs);
}
template <>
void CutWaits(v1::CreateCommunicatorRequest* r) {
  if (r->join_timeout_ms() > kFuzzWaitMs && r->join_timeout_ms() <= 3600000) r->set_join_timeout_ms(kFuzzWaitMs);
  if (r->join_timeout_ms() == 0) r->set_join_timeout_ms(kFuzzWaitMs);  // the daemon's default is a minute
  if (r->op_timeout_ms() > 50 && r->op_timeout_ms() <= 3600000) r->set_op_timeout_ms(50);
}

template <typename Req>
void SetSession(Req* r, uint64_t session) {
  if constexpr (requires { r->set_session_id(session); }) r->set_session_id(session);
}

struct Rpc {
  const char* method;
  // Rewrites `bytes` (when they parse as the request) for `session`, with
  // waits cut. False: send them unchanged.
  bool (*rewrite)(std::string* bytes, uint64_t session, bool with_session);
};

template <typename Req>
bool Rewrite(std::string* bytes, uint64_t session, bool with_session) {
  Req r;
  if (!r.ParseFromString(*bytes)) return false;
  if (with_session) SetSession(&r, session);
  CutWaits(&r);
  return r.SerializeToString(bytes);
}

// Drain is left out: it ends serving for good (tests/integration covers it).
const Rpc kRpcs[] = {
    {"GetVersion", Rewrite<v1::GetVersionRequest>},
    {"Attach", Rewrite<v1::AttachRequest>},
    {"Detach", Rewrite<v1::DetachRequest>},
    {"AllocBuffer", Rewrite<v1::AllocBufferRequest>},
    {"FreeBuffer", Rewrite<v1::FreeBufferRequest>},
    {"CreateCommunicator", Rewrite<v1::CreateCommunicatorRequest>},
    {"DestroyCommunicator", Rewrite<v1::DestroyCommunicatorRequest>},
    {"Submit", Rewrite<v1::SubmitRequest>},
    {"WaitOp", Rewrite<v1::WaitOpRequest>},
    {"RegisterPlan", Rewrite<v1::RegisterPlanRequest>},
    {"RegisterGpuBuffer", Rewrite<v1::RegisterGpuBufferRequest>},
    {"DeregisterGpuBuffer", Rewrite<v1::DeregisterGpuBufferRequest>},
    {"GetStats", Rewrite<v1::GetStatsRequest>},
    {"GetCluster", Rewrite<v1::GetClusterRequest>},
};
constexpr int kNumRpcs = sizeof(kRpcs) / sizeof(kRpcs[0]);

grpc::Status Call(const std::string& method, const std::string& bytes, uint64_t token, std::string* reply) {
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
  if (token != 0) ctx.AddMetadata(kSessionTokenMetadata, std::to_string(token));
  grpc::Slice slice(bytes);
  grpc::ByteBuffer req(&slice, 1), resp;
  grpc::Status s = grpc::internal::BlockingUnaryCall<grpc::ByteBuffer, grpc::ByteBuffer>(
      g->channel.get(),
      grpc::internal::RpcMethod(("/collectived.v1.CollectiveService/" + method).c_str(),
                                grpc::internal::RpcMethod::NORMAL_RPC),
      &ctx, req, &resp);
  reply->clear();
  std::vector<grpc::Slice> slices;
  if (s.ok() && resp.Dump(&slices).ok()) {
    for (const auto& sl : slices) reply->append(reinterpret_cast<const char*>(sl.begin()), sl.size());
  }
  return s;
}

void Check(bool cond, const char* what, const std::string& method, const grpc::Status& s) {
  if (cond) return;
  std::fprintf(stderr, "service_fuzz: %s: %s -> %d '%s'\n", what, method.c_str(), s.error_code(),
               s.error_message().c_str());
  std::abort();
}

}  // namespace
}  // namespace collectived::fuzz

using namespace collectived;         // NOLINT: a fuzz target's two entry points
using namespace collectived::fuzz;   // NOLINT

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  spdlog::set_level(spdlog::level::off);
  g = new Daemon;
  g->config.max_message_bytes = 64 << 10;
  g->config.max_buffer_bytes = 32 << 20;
  g->config.op_timeout_ms = 50;
  g->config.join_timeout_ms = kFuzzWaitMs;
  g->config.max_sessions = 64;
  g->registry = std::make_unique<daemon::Registry>(g->config);
  g->self = SelfCredentials();
  g->service = std::make_unique<daemon::CollectiveServiceImpl>(
      g->registry.get(), "fuzz.sock.fds",
      [](const std::string&, ipc::PeerCredentials* out) {
        *out = g->self;
        return true;
      },
      [] {});
  grpc::ServerBuilder builder;
  builder.RegisterService(g->service.get());
  g->server = builder.BuildAndStart();
  g->channel = g->server->InProcessChannel(grpc::ChannelArguments());
  // As the daemon's main loop: joins past their deadline expire.
  g->housekeeping = std::thread([] {
    while (!g->stop.load()) {
      g->registry->Housekeeping();
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
  });
  WriteSeedsIfAsked("service", [](std::vector<std::string>* seeds) {
    // Calls laid out as [rpc][flags][length][bytes]: starting points only
    // (FuzzedDataProvider takes integers from the input's end), from which
    // coverage grows (docs/proof.md).
    auto call = [](int rpc, uint8_t flags, const google::protobuf::Message& m) {
      std::string bytes = m.SerializeAsString();
      std::string out;
      out.push_back(static_cast<char>(rpc));
      out.push_back(static_cast<char>(flags));
      out.push_back(static_cast<char>(bytes.size()));
      out += bytes;
      return out;
    };
    v1::AllocBufferRequest alloc;
    alloc.set_bytes(4096);
    v1::CreateCommunicatorRequest join;
    join.set_key("fuzz");
    join.set_world_size(1);
    join.set_mode(v1::EXECUTION_MODE_DAEMON);
    v1::SubmitRequest submit;
    submit.set_comm_id(2);
    auto* op = submit.mutable_op();
    op->set_kind(v1::COLLECTIVE_KIND_ALL_REDUCE);
    op->set_dtype(v1::DATA_TYPE_FLOAT32);
    op->set_reduce_op(v1::REDUCE_OP_SUM);
    op->set_count(16);
    op->set_send_buffer_id(1);
    op->set_recv_buffer_id(1);
    v1::WaitOpRequest wait;
    wait.set_comm_id(2);
    wait.set_timeout_ms(1000);
    v1::AttachRequest attach;
    attach.set_api_major(collectived::kApiMajor);
    attach.set_client_name("seed");
    attach.set_pid(1);
    v1::GetStatsRequest stats;
    seeds->push_back(call(3, 3, alloc) + call(5, 3, join) + call(7, 3, submit) + call(8, 3, wait));
    seeds->push_back(call(1, 0, attach) + call(12, 3, stats));
    v1::RegisterPlanRequest plan;
    *plan.mutable_op() = *op;
    seeds->push_back(call(5, 3, join) + call(9, 3, plan) + call(6, 3, v1::DestroyCommunicatorRequest()));
  });
  return 0;
}

// Input: calls of [rpc index][flags][length][bytes]; flags bit 0: put the
// session in, bit 1: send its token.
extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  uint64_t session = 0, token = 0;
  if (!g->registry->Attach("fuzz", static_cast<uint32_t>(getpid()), g->self, &session, &token).ok()) std::abort();
  FuzzedDataProvider in(data, size);
  std::set<uint64_t> attached;  // sessions the input's Attach calls made
  for (int calls = 0; calls < 16 && in.remaining_bytes() > 0; ++calls) {
    const int rpc = in.ConsumeIntegral<uint8_t>() % kNumRpcs;
    const uint8_t flags = in.ConsumeIntegral<uint8_t>();
    std::string bytes = in.ConsumeBytesAsString(in.ConsumeIntegral<uint8_t>());
    kRpcs[rpc].rewrite(&bytes, session, flags & 1);
    std::string reply;
    const std::string method = kRpcs[rpc].method;
    grpc::Status s = Call(method, bytes, (flags & 2) ? token : 0, &reply);
    // UNIMPLEMENTED with no message: gRPC's own answer to bytes that do not
    // parse as the request, before the service sees them.
    if (!s.ok() && s.error_code() != grpc::StatusCode::UNIMPLEMENTED) {
      Check(!s.error_message().empty(), "a refusal without a message", method, s);
      if (s.error_code() == grpc::StatusCode::INVALID_ARGUMENT) {
        bool letter = false;
        for (char c : s.error_message()) letter = letter || std::isalpha(static_cast<unsigned char>(c));
        Check(letter, "INVALID_ARGUMENT naming nothing", method, s);
      }
    } else if (method == "Attach") {
      v1::AttachResponse r;
      if (r.ParseFromString(reply)) attached.insert(r.session_id());
    }
  }
  // Still serving a good call.
  v1::GetStatsRequest stats;
  std::string reply;
  grpc::Status s = Call("GetStats", stats.SerializeAsString(), 0, &reply);
  Check(s.ok(), "GetStats after the input", "GetStats", s);
  g->registry->Detach(session);
  for (uint64_t id : attached) g->registry->Detach(id);
  return 0;
}
